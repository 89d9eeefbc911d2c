"""The installed version of gpu-neighbors, recorded in every signature."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpu-neighbors")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
