"""Fluency: a small language model's judgment of each text, a part of a scorer beside kernel,
estimator and intervals (`part.py`); its model files and the offline model's fetch (`files.py`),
the model itself (`model.py`), its column of the outlier test (`outlier.py`) and the check
that training texts are English before `auto` runs it (`language.py`)."""
from __future__ import annotations

from gpu_neighbors.fluency.files import ModelFiles, fetch_model, model_files, models_folder, offline_model
from gpu_neighbors.fluency.part import (
    AUTO,
    NONE,
    FittedFluency,
    Fluency,
    check_weights,
    fluency_part,
    resolved_dtype,
)

__all__ = ["AUTO", "NONE", "FittedFluency", "Fluency", "ModelFiles", "check_weights", "fetch_model",
           "fluency_part", "model_files", "models_folder", "offline_model", "resolved_dtype"]
