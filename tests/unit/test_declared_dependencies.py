"""Every third-party module the code and the tests import comes from a distribution that
pyproject.toml declares (the core dependencies or an extra), so that README's test command
passes in a fresh virtual environment, not only where something was installed by hand."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("sbctl", "daemon", "tests", "data")


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    return {_normal(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requirements}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported() -> dict[str, str]:
    """Top-level module → a file importing it (absolute imports only)."""
    found: dict[str, str] = {}
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def _local() -> set[str]:
    names = {"sbctl", "sbctld"}
    for tree in TREES:
        names |= {p.stem for p in (ROOT / tree).rglob("*.py")}
    return names


def test_every_imported_distribution_is_declared() -> None:
    declared = _declared()
    owners = importlib.metadata.packages_distributions()
    local = _local()
    missing = []
    for module, where in sorted(_imported().items()):
        if module in sys.stdlib_module_names or module in local or module.startswith("_"):
            continue
        if importlib.util.find_spec(module) is None:
            continue  # not installed here: its own tests say so
        dists = {_normal(d) for d in owners.get(module, [])}
        if dists and not dists & declared:
            missing.append(f"{module} (from {', '.join(sorted(dists))}), imported by {where}")
    assert not missing, "imported but declared nowhere in pyproject.toml:\n" + "\n".join(missing)
