"""Every third-party module the package imports is a declared dependency of the installed distribution,
so a fresh virtual environment has it (prompt_toolkit once passed only on machines that had it anyway)."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import localrun

PACKAGE = Path(localrun.__file__).parent


def imported_top_level_modules() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"localrun", "__future__"}


def declared_distributions() -> set[str]:
    """The distributions localrun requires without any extra (environment markers aside)."""
    names = set()
    for requirement in metadata.requires("localrun") or []:
        if "extra ==" not in requirement:
            names.add(_normalize(re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]))
    return names


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_imported_module_comes_from_a_declared_dependency():
    providers = metadata.packages_distributions()
    declared = declared_distributions()
    # A module not installed here is named as its distribution (tomli, declared for Python < 3.11).
    undeclared = {module: providers.get(module, [module]) for module in imported_top_level_modules()
                  if not any(_normalize(d) in declared for d in providers.get(module, [module]))}
    assert undeclared == {}, f"imported but not declared in pyproject.toml's dependencies: {undeclared}"


def test_the_check_sees_the_imports_it_must_see():
    modules = imported_top_level_modules()
    assert {"llama_cpp", "prompt_toolkit", "fastapi", "typer", "numpy"} <= modules
    assert {"llama-cpp-python", "prompt-toolkit", "fastapi"} <= declared_distributions()
    assert "pytest" not in declared_distributions()  # extras (dev, bundled) do not count
