"""`python -m gpu_neighbors.cli`: the `gpu-neighbors` command."""
import sys

from gpu_neighbors.cli import main

sys.exit(main())
