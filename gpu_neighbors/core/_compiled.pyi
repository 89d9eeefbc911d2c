# The core's compiled host loops (_compiled.pyx), for the type checker.
import numpy as np

def merge_top(tile: np.ndarray, first_column: int, tie_rank: np.ndarray, similarity: np.ndarray,
              index: np.ndarray) -> None: ...
def topk_sums(similarity: np.ndarray, index: np.ndarray, ends: np.ndarray, table: np.ndarray, power: float,
              sums: np.ndarray, counts: np.ndarray) -> None: ...
