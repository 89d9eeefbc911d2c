"""Issue 22: the cli package and cli/main.py imported each other for one constant, a cycle the
layer contract misses because one side imports lazily. No cli module imports the package root."""
from __future__ import annotations

import ast
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
