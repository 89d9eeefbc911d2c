"""requirements.lock holds the whole environment of pyproject.toml's dev extra, each package at one
exact version inside the project's ranges: a requirement added without refreshing the lock
(`bash scripts/lock.sh`) fails here, not on a fresh machine on some later day."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
ENVIRONMENT = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
               "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
               "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, Version]:
    pins = {}
    for number, line in enumerate(LOCK.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        name, separator, version = line.partition("==")
        assert separator and version.strip(), f"{LOCK.name}:{number}: not an exact pin: {line!r}"
        assert normalised(name) not in pins, f"{LOCK.name}:{number}: {name} pinned twice"
        pins[normalised(name)] = Version(version.strip())
    return pins


def project_requirements() -> list[Requirement]:
    """The project's requirements with its dev extra (the extras it names expanded) and what its
    build requires (setup.sh builds it with the locked ones)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    extras = project["optional-dependencies"]
    wanted = [Requirement(text) for text in project["dependencies"] + pyproject["build-system"]["requires"]]
    todo, seen = ["dev"], set()
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for requirement in map(Requirement, extras[extra]):
            if normalised(requirement.name) == normalised(project["name"]):
                todo.extend(set(requirement.extras) - seen)
            else:
                wanted.append(requirement)
    return wanted


def test_every_project_requirement_is_locked_within_its_range():
    pins = locked()
    wrong = []
    for requirement in project_requirements():
        if requirement.marker is not None and not requirement.marker.evaluate(ENVIRONMENT):
            continue
        version = pins.get(normalised(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            wrong.append(f"{requirement} (locked: {version})")
    assert not wrong, f"requirements.lock lacks or contradicts (run bash scripts/lock.sh): {wrong}"


def test_torch_is_locked_to_the_cpu_build():
    """A bare torch pin resolves to a multi-GB CUDA build on PyPI; the lock names the CPU one."""
    assert str(locked()["torch"]).endswith("+cpu")


def test_the_project_itself_is_not_in_the_lock():
    assert "gpu-neighbors" not in locked()  # installed editable from the tree by setup.sh
