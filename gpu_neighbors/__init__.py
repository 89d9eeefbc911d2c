"""gpu-neighbors: reference-less quality estimation by nearest neighbours under a text kernel."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpu-neighbors")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

from .kernels import KERNEL_NAMES  # noqa: E402
from .neighbours import Prediction  # noqa: E402
from .scorer import NeighborsScorer  # noqa: E402

__all__ = ["KERNEL_NAMES", "NeighborsQuality", "NeighborsScorer", "Prediction", "__version__"]


def __getattr__(name: str):
    """`NeighborsQuality` loads on first use, so torchmetrics stays an optional extra."""
    if name == "NeighborsQuality":
        from .metric import NeighborsQuality

        return NeighborsQuality
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
