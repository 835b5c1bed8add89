"""Generated CLI artefacts match the typer app, and the CLI starts light (daemon/README.md §25.5).

Regenerate with ``python -m sbctl.cli.completions`` and ``python -m sbctl.cli.docs --write``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sbctl.cli import completions, docs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBCTL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


@pytest.mark.parametrize("name", sorted(completions.FILES.values()))
def test_completion_script_is_not_stale(name: str) -> None:
    path = ROOT / "completions" / name
    expected = completions.scripts()[name]
    assert path.exists(), f"{path} is missing: run `python -m sbctl.cli.completions`"
    assert path.read_text(encoding="utf-8") == expected, (
        f"{path} is stale: run `python -m sbctl.cli.completions`"
    )


def test_command_reference_is_not_stale() -> None:
    fix = "run `python -m sbctl.cli.docs --write`"
    assert docs.REFERENCE.exists(), f"sbctl/cli/REFERENCE.md is missing: {fix}"
    assert docs.REFERENCE.read_text(encoding="utf-8") == docs.reference(), (
        f"sbctl/cli/REFERENCE.md is stale: {fix}"
    )


def test_readme_links_the_command_reference() -> None:
    text = README.read_text(encoding="utf-8")
    assert "(sbctl/cli/REFERENCE.md)" in text, "README must link sbctl/cli/REFERENCE.md"


def test_generated_text_ignores_terminal_and_environment() -> None:
    code = "from sbctl.cli import docs, completions; print(docs.render(), completions.scripts())"
    plain = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_cli_env(PYTHONHASHSEED="1"),
        check=True,
    ).stdout
    odd = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_cli_env(
            PYTHONHASHSEED="2", COLUMNS="33", SBCTL_NAMESPACE="elsewhere", SBCTL_SOCKET="/x.sock"
        ),
        check=True,
    ).stdout
    assert plain == odd


def test_every_command_option_and_argument_has_help() -> None:
    missing = []
    for node in docs.tree():
        if not node.help:
            missing.append(node.command)
        for param in (*node.options, *node.arguments):
            if not param.help:
                missing.append(f"{node.command} {param.synopsis}")
    assert not missing, f"without help text: {missing}"


def test_the_command_tree() -> None:
    commands = {node.command for node in docs.tree()}
    assert {
        "sbctl daemon start",
        "sbctl daemon stop",
        "sbctl daemon status",
        "sbctl namespace create",
        "sbctl namespace list",
        "sbctl namespace show",
        "sbctl namespace delete",
        "sbctl queue create",
        "sbctl queue update",
        "sbctl queue list",
        "sbctl queue show",
        "sbctl queue delete",
        "sbctl send",
        "sbctl peek",
        "sbctl receive",
        "sbctl message complete",
        "sbctl message abandon",
    } <= commands


@pytest.mark.parametrize("argv", [["--help"], ["queue", "create", "--help"], ["send", "--help"]])
def test_help_imports_neither_rich_nor_the_client(argv: list[str]) -> None:
    # asyncio is not checked: typer's own parameter coercion (pydantic) imports it.
    probe = (
        "import sys\n"
        "from sbctl.cli.app import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] == 'rich' "
        "or m in ('sbctl.client', 'sbctl.core.protocol', 'msgspec'))\n"
        "print(heavy, file=sys.stderr)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=_cli_env()
    )
    assert proc.returncode == 0, f"`sbctl {' '.join(argv)}` imported {proc.stderr.strip()}"
    assert "Usage: sbctl" in proc.stdout


# -- the scripts work in the shells themselves, where those are installed


def _bash_complete(line: str, cwd: Path) -> list[str]:
    words = line.split(" ")
    script = (
        f"source {ROOT / 'completions' / 'sbctl.bash'}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        "_sbctl\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(
        ["bash", "--norc", "-c", script], capture_output=True, text=True, cwd=cwd, check=True
    )
    return sorted(proc.stdout.split())


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("sbctl q", ["queue"]),
        ("sbctl -o ", ["json", "table"]),
        ("sbctl -o json -n ns queue cr", ["create"]),
        (
            "sbctl queue create q --status ",
            ["Active", "Disabled", "ReceiveDisabled", "SendDisabled"],
        ),
        ("sbctl queue create q --no-enable-s", ["--no-enable-session"]),
        ("sbctl receive q --settle ", ["abandon", "complete", "dead-letter", "defer", "none"]),
        ("sbctl send q --input ", ["in.jsonl"]),
        ("sbctl message ", ["abandon", "complete", "dead-letter", "defer", "renew-lock"]),
    ],
)
def test_bash_completion(line: str, expected: list[str], tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text("{}\n")
    assert _bash_complete(line, tmp_path) == expected


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_parses() -> None:
    subprocess.run(["zsh", "-n", str(ROOT / "completions" / "_sbctl")], check=True)


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completion() -> None:
    script = (
        f"source {ROOT / 'completions' / 'sbctl.fish'}\n"
        "complete -C 'sbctl -o json queue ' | string replace -r '\\t.*' ''\n"
    )
    proc = subprocess.run(["fish", "-c", script], capture_output=True, text=True, check=True)
    assert sorted(proc.stdout.split()) == ["create", "delete", "list", "show", "update"]


# -- help text as people read it


def test_help_has_no_type_placeholders_and_plain_usage_lines() -> None:
    text = docs.render()
    for placeholder in ("<int range>", "<str>", "<integer>", "<float>", "<text>"):
        assert placeholder not in text, placeholder
    for node in docs.tree():
        assert "{" not in node.usage, node.usage
        for argument in node.arguments:
            if argument.repeatable:
                assert argument.synopsis.endswith("...") and "......" not in argument.synopsis
                assert argument.synopsis in node.usage, node.usage


def test_entity_help_says_what_each_command_accepts() -> None:
    by_command = {node.command: node for node in docs.tree()}

    def entity_help(command: str) -> str:
        return next(a.help for a in by_command[command].arguments if a.metavar == "ENTITY")

    for command in ("sbctl send", "sbctl schedule", "sbctl cancel-scheduled"):
        text = entity_help(command)
        assert "topic" in text and "subscription" not in text and "dead-letter" not in text
    for command in ("sbctl receive", "sbctl peek", "sbctl message complete"):
        assert "dead-letter queue" in entity_help(command)
    assert "session-enabled" in entity_help("sbctl session get-state")


def test_user_visible_help_cites_no_sections() -> None:
    text = docs.render()
    assert "§" not in text


def test_global_options_move_before_the_command_unless_it_has_its_own() -> None:
    from sbctl.cli import app

    root = app.command_tree()
    moved = app.hoist_globals(["queue", "list", "--no-retry", "--socket=/s", "-o", "json"], root)
    assert moved == ["--no-retry", "--socket", "/s", "--output", "json", "queue", "list"]
    own = ["daemon", "start", "--data-dir", "/d", "--retry-total", "2"]
    assert app.hoist_globals(own, root) == [
        "--retry-total",
        "2",
        "daemon",
        "start",
        "--data-dir",
        "/d",
    ]
