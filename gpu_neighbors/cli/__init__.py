"""The `gpu-neighbors` command line."""
from gpu_neighbors.cli.main import main

__all__ = ["main"]
