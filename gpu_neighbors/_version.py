"""The version of gpu-neighbors, recorded in every signature and saved scorer; pyproject.toml
reads it from here, so the two cannot differ."""
__version__ = "0.2.0"
