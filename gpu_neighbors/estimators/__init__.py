"""Estimators, one module each, all behind `Estimator` (see `base.py`)."""
from __future__ import annotations

from gpu_neighbors.estimators.base import TUNING_MODES, Estimator, TilePass
from gpu_neighbors.estimators.ridge import Ridge, RidgeFit
from gpu_neighbors.estimators.threshold import Threshold
from gpu_neighbors.estimators.topk import TopK

ESTIMATOR_CLASSES: dict[str, type[Estimator]] = {cls.name: cls for cls in (Threshold, TopK, Ridge)}


def estimator_part(estimator: str | Estimator, **settings: object) -> Estimator:
    """The part `estimator` stands for: a part as given, a name as that estimator with
    `settings` (none: its defaults)."""
    if isinstance(estimator, Estimator):
        if settings:
            raise TypeError(f"settings {sorted(settings)} go on the part itself: {estimator!r}")
        return estimator
    if not isinstance(estimator, str) or estimator not in ESTIMATOR_CLASSES:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {', '.join(ESTIMATOR_CLASSES)}")
    return ESTIMATOR_CLASSES[estimator](**settings)  # type: ignore[arg-type]


def estimator_from_settings(settings: dict[str, object]) -> Estimator:
    """The part `settings()` described (what a saved scorer holds)."""
    return estimator_part(str(settings["name"]), **{key: value for key, value in settings.items() if key != "name"})


__all__ = ["ESTIMATOR_CLASSES", "TUNING_MODES", "Estimator", "Ridge", "RidgeFit", "Threshold", "TilePass", "TopK",
           "estimator_from_settings", "estimator_part"]
