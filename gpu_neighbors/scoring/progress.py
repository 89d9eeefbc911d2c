"""Progress of a long scoring run on stderr: texts done, texts/s, pairs/s and the time left.

Pairs per second (texts per second times the training-set size) is the figure that compares
across training sets and devices; texts per second and the ETA are what a user waits on.
"""
from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm

WITH_TOTAL = "{l_bar}{bar}| {n_fmt}/{total_fmt} texts [{elapsed}<{remaining}, {rate_fmt}, {pair_rate}]"
WITHOUT_TOTAL = "{n_fmt} texts [{elapsed}, {rate_fmt}, {pair_rate}]"


class ScoringProgress(tqdm):
    """A tqdm bar counting texts that also shows pairs scored per second.

    total: texts expected (None when unknown, e.g. gzip input: no bar and no ETA).
    initial: texts already done (a resumed run); the rates count only the new ones.
    pairs_per_text: the training-set size.
    """

    def __init__(self, total: int | None, *, initial: int = 0, pairs_per_text: int,
                 enabled: bool = True, file: TextIO | None = None) -> None:
        self.pairs_per_text = pairs_per_text
        super().__init__(
            total=total, initial=initial, disable=not enabled, file=file or sys.stderr,
            unit=" texts", dynamic_ncols=True, smoothing=0.1,
            bar_format=WITHOUT_TOTAL if total is None else WITH_TOTAL,
        )

    @property
    def format_dict(self) -> dict[str, Any]:
        values = super().format_dict
        rate = values.get("rate")
        if rate is None and values["elapsed"] > 0:
            rate = (values["n"] - values["initial"]) / values["elapsed"]
        shown = "?" if rate is None else self.format_sizeof(rate * self.pairs_per_text)
        values["pair_rate"] = f"{shown} pairs/s"
        return values
