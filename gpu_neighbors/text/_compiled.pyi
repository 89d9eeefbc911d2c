# The compiled host loops (_compiled.pyx), for the type checker.
import numpy as np

def count_texts(char_ids: np.ndarray, kinds: np.ndarray, word_bit: int, space_bit: int, bounds: np.ndarray, first: int,
                size: int, space_id: int, ends: np.ndarray, end_bounds: np.ndarray, dense: np.ndarray,
                slots: np.ndarray, keys: np.ndarray, index_bounds: np.ndarray, unigrams: int, char_offsets: np.ndarray,
                indptr: np.ndarray, indices: np.ndarray, counts: np.ndarray) -> int: ...
def weigh_rows(indptr: np.ndarray, indices: np.ndarray, counts: np.ndarray, tf_of_count: np.ndarray, idf: np.ndarray,
               word_features: int, values: np.ndarray) -> None: ...
def quantise_split(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, word_features: int, scale: float,
                   max_squared_norm: int, position: np.ndarray, head: np.ndarray, tail_indptr: np.ndarray,
                   tail_indices: np.ndarray, tail_values: np.ndarray) -> None: ...
def find_keys(dense: np.ndarray, slots: np.ndarray, keys: np.ndarray, shift: int, mask: int, asked: np.ndarray,
              found: np.ndarray) -> None: ...
def word_ids(char_ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, size: int, ends: np.ndarray,
             end_bounds: np.ndarray, dense: np.ndarray, slots: np.ndarray, keys: np.ndarray, bounds: np.ndarray,
             found: np.ndarray) -> None: ...
