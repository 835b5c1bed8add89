"""A command imports only what it uses, so that every ``sbctl`` command starts fast.

The root loads a command's module only when that command runs (:mod:`sbctl.cli.app`),
lists the commands from the generated index ``sbctl/cli/commands.json`` (so help reads the
same as when every module is loaded), and JSON output, errors and ``--version`` never
import rich, asyncio, the asynchronous client or another command's module. These are not
timed tests: they check the mechanism (``sys.modules`` in a fresh interpreter) so that the
start-up cannot silently regress; ``sbctl bench --cli`` prints the figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from sbctl.cli import app, docs

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_index_is_not_stale() -> None:
    assert app.INDEX.read_text(encoding="utf-8") == docs.index_json(), (
        f"{app.INDEX} is stale: run `python -m sbctl.cli.docs --write`"
    )


def test_the_command_index_ships_with_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    data = project["tool"]["setuptools"]["package-data"]["sbctl"]
    assert app.INDEX.relative_to(ROOT / "sbctl").as_posix() in data


@pytest.mark.parametrize("width", [50, 80, 200])
def test_help_lists_the_commands_as_the_loaded_tree_does(width: int) -> None:
    def root_help(root: Any) -> str:
        ctx = root.make_context("sbctl", [], max_content_width=width, terminal_width=width)
        return str(ctx.get_help())

    lazy = app.command_tree()
    assert root_help(lazy) == root_help(app.full_tree())
    assert all(isinstance(command, app.Unloaded) for command in lazy.commands.values())


def test_a_command_is_loaded_when_it_is_resolved() -> None:
    root = app.command_tree()
    assert isinstance(root.commands["queue"], app.Unloaded)
    queue = root.load("queue")
    assert not isinstance(queue, app.Unloaded)
    assert root.commands["queue"] is queue
    assert {"create", "list", "show"} <= set(queue.commands)


# What no command here may import: the table renderer, the event loop and the asynchronous
# client, the record batches' checksum.
NEVER = ("rich", "asyncio", "sbctl.client._async", "crc32c")

PROBE = """
import json, sys
from sbctl.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _imports(*argv: str) -> tuple[int, set[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBCTL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env
    )
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return report["code"], set(report["modules"])


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m in NEVER or m.split(".")[0] in NEVER)


def _commands(modules: set[str]) -> set[str]:
    return {m.rpartition(".")[2] for m in modules if m.startswith("sbctl.cli.cmd_")}


def test_version_imports_no_command_and_no_client() -> None:
    code, modules = _imports("--version")
    assert code == 0
    assert _heavy(modules) == []
    assert _commands(modules) == set()
    assert not {"sbctl.client", "msgspec", "sbctl.cli.render"} & modules


@pytest.mark.parametrize(
    ("argv", "modules"),
    [
        (["queue", "list"], {"cmd_queue"}),
        (["send", "orders", "--body", "x"], {"cmd_messages"}),
        (["receive", "orders"], {"cmd_messages"}),
        (["topic", "show", "events"], {"cmd_topic", "cmd_queue"}),  # the flags topics share
        (["daemon", "status"], {"cmd_daemon"}),
    ],
)
def test_a_command_with_json_output_imports_only_its_own_module(
    argv: list[str], modules: set[str], tmp_path: Path
) -> None:
    # No daemon at this socket: the command goes all the way to the client's connect and
    # reports the error as JSON (exit 9).
    code, imported = _imports("-o", "json", "--socket", str(tmp_path / "none.sock"), *argv)
    assert code == 9
    assert _heavy(imported) == []
    assert _commands(imported) == modules
    assert "sbctl.client._sync" in imported
