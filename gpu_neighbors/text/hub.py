"""The Hugging Face hub is reached only when the user allows it.

`local_files_only=True` is not enough: the hub client still resolves and contacts the hub
while it builds request headers. Its offline switch stops every request, so it is set
whenever downloads are not allowed: for the whole process by the command line (before or after
the hub client is imported), and around each load by the library.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def forbid_downloads() -> None:
    """Offline mode for this process: the environment for clients not imported yet, and the
    hub client's own switch (read at each request) if it is imported already."""
    for name in OFFLINE_VARIABLES:
        os.environ[name] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        setattr(constants, "HF_HUB_OFFLINE", True)  # noqa: B010 - a module mypy cannot see


@contextmanager
def hub_access(allow_download: bool) -> Iterator[None]:
    """Loads inside this block reach the hub only if `allow_download`; the switch is put back
    afterwards (a process already offline stays offline either way)."""
    if allow_download:
        yield
        return
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' progress bars off inside this block, as they were after: its "Loading
    weights" bar, drawn on stderr at every load of a model already on disk, even under --quiet."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            logging.enable_progress_bar()
