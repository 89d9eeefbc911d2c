"""The GPU pack (bench/gpu_pack.txt) covers what the code imports: every third-party import of
gpu_neighbors/, tests/ and bench/ is a package a bare device Python holds (torch, numpy, scipy,
transformers, pytest and what they require) or one the pack names, and so is every package that
a carried package requires. A bare environment missing one collected nothing on a device."""
from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "bench" / "gpu_pack.txt"
BARE = ("torch", "numpy", "scipy", "transformers", "pytest")
KINDS = {"pinned", "binary", "built", "optional"}
# Modules whose distribution is named otherwise, for those not installed here to ask.
DISTRIBUTION_OF = {"pynvml": "nvidia-ml-py", "sklearn": "scikit-learn", "yaml": "pyyaml",
                   "spellchecker": "pyspellchecker", "torchgen": "torch"}


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pack() -> dict[str, str]:
    """Each packed distribution's kind, read as gpu_check.sh reads the file."""
    kinds = {}
    for number, line in enumerate(PACK.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        kind, name = line.split()
        assert kind in KINDS, f"{PACK.name}:{number}: unknown kind {kind!r}"
        kinds[normalised(name)] = kind
    return kinds


def requirements(name: str) -> Iterator[str]:
    """What an installed distribution requires, its extras left out."""
    for text in metadata.requires(name) or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            yield normalised(requirement.name)


def closure(names: set[str], through: Callable[[str], bool] = lambda name: True) -> set[str]:
    """The distributions `names` need, recursively, expanding only those `through` accepts."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if not through(name):
            continue
        try:
            todo.extend(requirements(name))
        except metadata.PackageNotFoundError:
            pass  # not installed here: nothing known of its requirements
    return seen


def local_names() -> set[str]:
    """Modules of the project's own: its package, and the helpers beside the tests and benchmarks."""
    names = {"gpu_neighbors", "tests", "bench"}
    for folder in ("tests", "bench"):
        names |= {path.stem for path in (ROOT / folder).rglob("*.py")}
        names |= {path.name for path in (ROOT / folder).rglob("*") if path.is_dir()}
    return names


def third_party_imports() -> dict[str, set[str]]:
    """Each distribution imported anywhere in gpu_neighbors/, tests/ and bench/, with where."""
    installed = metadata.packages_distributions()
    local = local_names()
    found: dict[str, set[str]] = {}
    for folder in ("gpu_neighbors", "tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            if any(part.startswith(".") for part in path.relative_to(ROOT).parts):
                continue  # bench/.tensorbleu and other fetched peers
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top in sys.stdlib_module_names or top in local:
                        continue
                    distribution = DISTRIBUTION_OF.get(top) or (installed.get(top) or [top])[0]
                    found.setdefault(normalised(distribution), set()).add(f"{path.relative_to(ROOT)}")
    return found


def test_every_import_is_bare_or_packed():
    packed = pack()
    bare = closure(set(BARE))
    missing = {name: sorted(where)[:3] for name, where in third_party_imports().items()
               if name not in bare and name not in packed}
    assert not missing, f"imported, but neither in a bare device Python nor in {PACK.name}: {missing}"


def test_what_a_carried_package_requires_is_bare_or_packed():
    """Recursively, except through an optional package: bert-score needs matplotlib, which does
    not travel, so where the device lacks it bert-score's tests skip."""
    packed = pack()
    bare = closure(set(BARE))
    carried = [name for name, kind in packed.items() if kind != "optional"]
    missing = {}
    for name in carried:  # what an optional package needs is absent with it: its importers skip
        needed = closure({name}, through=lambda needed: packed.get(needed) != "optional") - {name}
        lacking = sorted(needed - bare - set(packed))
        if lacking:
            missing[name] = lacking
    assert not missing, f"carried packages require what neither a bare Python nor {PACK.name} has: {missing}"


def test_the_pack_names_no_package_twice_and_none_of_the_bare_ones():
    names = [line.split()[1] for line in PACK.read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.startswith("#")]
    assert len(names) == len(set(map(normalised, names)))
    assert not set(map(normalised, names)) & set(BARE)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_gpu_check_sh_packs_the_list(kind):
    listed = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "list", kind], capture_output=True,
                            text=True, check=True).stdout.split()
    assert sorted(map(normalised, listed)) == sorted(name for name, given in pack().items() if given == kind)
