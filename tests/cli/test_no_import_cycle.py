"""Issue 22: the cli package and its `run` module imported each other for one constant, a cycle
the layer contract misses because one side imports lazily. No cli module imports the package root,
and no cli module is named after a name of the package (`gpu_neighbors.cli.main`)."""
from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import gpu_neighbors.cli


def test_no_cli_module_imports_the_cli_package_itself():
    folder = Path(gpu_neighbors.cli.__file__).parent
    offenders = []
    for path in folder.glob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):  # the package and its entry point
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "gpu_neighbors.cli":
                # a submodule (`from gpu_neighbors.cli import commands`) is fine; a name of the package is not
                offenders += [f"{path.name}: {alias.name}" for alias in node.names
                              if not (folder / f"{alias.name}.py").exists()]
            if isinstance(node, ast.Import) and any(alias.name == "gpu_neighbors.cli" for alias in node.names):
                offenders.append(path.name)
    assert offenders == []


def test_importing_every_cli_module_leaves_main_the_function():
    """Issue 31: the module cli/main.py, once imported (by the first call of `main`, or by the GPU
    check walking the package), replaced the package's attribute `main`, so a second
    `gpu_neighbors.cli.main(...)`, or any `from gpu_neighbors.cli import main` after it, got a
    module: 178 tests failed on CUDA with "'module' object is not callable"."""
    for module in pkgutil.iter_modules(gpu_neighbors.cli.__path__, "gpu_neighbors.cli."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    from gpu_neighbors.cli import main

    assert callable(main) and main is gpu_neighbors.cli.main
