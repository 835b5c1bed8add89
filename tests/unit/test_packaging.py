"""What a (non-editable) install ships: every package folder is listed in pyproject.toml, so a
wheel is never missing a module that the editable install happens to find."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = {name: ROOT / folder for name, folder in config["package-dir"].items()}
    found = set()
    for name, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            found.add(".".join((name, *rel.parts)))
    assert found - listed == set(), "packages missing from pyproject.toml"
    assert listed - found == set(), "listed packages that do not exist"
