"""`sbctl help`: the user guides ship in the package and the CLI shows them."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from conftest import CliResult, run_cli

ROOT = Path(__file__).resolve().parents[2]
GUIDES = sorted(p.stem for p in (ROOT / "sbctl" / "guides").glob("*.md"))


def _sbctl(*args: str) -> CliResult:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "daemon")]))
    return run_cli(list(args), env)


def test_the_guides_are_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "guides/*.md" in config["tool"]["setuptools"]["package-data"]["sbctl"]
    assert {"cli", "testing", "sdks", "spark", "troubleshooting", "data-dir"} <= set(GUIDES)


def test_help_lists_every_guide_and_shows_one() -> None:
    listing = _sbctl("help")
    assert listing.code == 0, listing.stderr
    listed = [line.split()[0] for line in listing.stdout.splitlines()[1:]]
    assert listed == GUIDES
    shown = _sbctl("help", "testing")
    assert shown.code == 0, shown.stderr
    assert "Testing your application" in shown.stdout and "sbctl_namespace" in shown.stdout
    raw = _sbctl("help", "troubleshooting", "--raw")
    assert raw.stdout == (ROOT / "sbctl" / "guides" / "troubleshooting.md").read_text("utf-8")


def test_an_unknown_topic_is_a_usage_error_naming_the_topics() -> None:
    answer = _sbctl("help", "nope")
    assert answer.code == 2
    assert "unknown topic 'nope'" in answer.stderr and "testing" in answer.stderr
