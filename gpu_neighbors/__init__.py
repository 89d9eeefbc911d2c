"""gpu-neighbors: reference-less quality estimation by nearest neighbours under a text kernel."""
from gpu_neighbors._version import __version__
from gpu_neighbors.core.neighbours import Prediction
from gpu_neighbors.kernels import KERNEL_NAMES
from gpu_neighbors.scorer import NeighborsScorer

__all__ = ["KERNEL_NAMES", "NeighborsQuality", "NeighborsScorer", "Prediction", "__version__"]


def __getattr__(name: str):
    """`NeighborsQuality` loads on first use, so torchmetrics stays an optional extra."""
    if name == "NeighborsQuality":
        from gpu_neighbors.training.metric import NeighborsQuality

        return NeighborsQuality
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
