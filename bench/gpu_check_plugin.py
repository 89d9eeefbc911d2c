"""A pytest plugin of the GPU check's tests step (`-p gpu_check_plugin`): each failed test,
setup, teardown or collection is appended to the file named by GPU_CHECK_FAILURES the moment
its report arrives, with the end of its traceback, and flushed; so a run that is cut off (the
device call's limit) still names every failure so far. pytest's JUnit XML, written at the end,
has the rest. Under xdist only the controller writes (workers send it their reports)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

TRACEBACK_LINES = 30  # the end of each report: the assertion and where it failed


class FailureLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, name: str, report: pytest.CollectReport | pytest.TestReport) -> None:
        text = "\n".join(str(report.longrepr).splitlines()[-TRACEBACK_LINES:])
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(f"## {name}\n\n```\n{text}\n```\n\n")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.append(f"{report.nodeid} ({report.when})", report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.append(f"{report.nodeid} (collection)", report)


def pytest_configure(config: pytest.Config) -> None:
    target = os.environ.get("GPU_CHECK_FAILURES")
    if target and not hasattr(config, "workerinput"):  # an xdist worker reports to the controller
        config.pluginmanager.register(FailureLog(Path(target)), "gpu_check_failure_log")
