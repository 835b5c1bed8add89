"""``sbctl bench --cli`` (:mod:`sbctl.bench_cli`): its rows, and a command that exits with
another status than expected stops the bench (figures are printed, never asserted)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sbctl import bench_cli
from sbctl.core.errors import GeneralError

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBCTL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def test_each_command_gets_a_row_after_the_interpreter_floor() -> None:
    commands = (("sbctl --version", lambda i: ["--version"], 0),)
    rows = bench_cli.measure(_env(), runs=2, commands=commands)
    assert [row["command"] for row in rows] == ["python -c pass (the floor)", "sbctl --version"]
    for row in rows:
        for mode in ("own", "served"):
            assert 0 < row[f"{mode}_min_ms"] <= row[f"{mode}_median_ms"]
        assert row["vs_target"] == round(row["served_median_ms"] / bench_cli.TARGET_MS, 2)


def test_an_unexpected_exit_status_stops_the_bench() -> None:
    commands = (("bad", lambda i: ["no-such-command"], 0),)
    with pytest.raises(GeneralError, match="'bad' exited 2, not 0"):
        bench_cli.measure(_env(), runs=1, commands=commands)
