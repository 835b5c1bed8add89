"""The command reference, generated from the typer app: ``sbctl/cli/REFERENCE.md``.

:func:`tree` reads the command tree once into plain :class:`Node` records, which both this
module (Markdown) and :mod:`sbctl.cli.completions` (shell scripts) render, so the help, the
reference and the completions cannot disagree. The output depends on nothing but the app: no
terminal width, no environment. ``python -m sbctl.cli.docs`` prints the Markdown,
``python -m sbctl.cli.docs --write`` rewrites REFERENCE.md; tests/unit/test_cli_static.py
fails when the file differs from :func:`reference`.
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import typer.main

PROG = "sbctl"
REFERENCE = Path(__file__).with_name("REFERENCE.md")
REFERENCE_HEADER = (
    "# sbctl command reference\n\n"
    "Every command and option of `sbctl`, generated from the CLI itself by\n"
    "`python -m sbctl.cli.docs --write` (a test fails when this file is stale). For what the\n"
    "commands do, start with the [README](../../README.md).\n"
)


@dataclass(frozen=True)
class Param:
    """One option or argument as help shows it."""

    names: tuple[str, ...]  # option strings (-n, --namespace); the metavar for arguments
    secondary: tuple[str, ...]  # the --no-x of a --x/--no-x pair
    takes_value: bool
    repeatable: bool
    choices: tuple[str, ...]
    metavar: str
    help: str
    synopsis: str  # e.g. "-o, --output <table|json>"
    details: str  # help plus [default, env var, range], as --help shows it


@dataclass(frozen=True)
class Node:
    """One command or group; ``path`` is empty for ``sbctl`` itself."""

    path: tuple[str, ...]
    help: str
    short_help: str
    usage: str
    options: tuple[Param, ...]
    arguments: tuple[Param, ...]
    children: tuple[str, ...]

    @property
    def command(self) -> str:
        return " ".join((PROG, *self.path))


def _choices(param: Any) -> tuple[str, ...]:
    # click keeps choices on ``param.type``; the click vendored in typer on ``type_descriptor``.
    kind = getattr(param, "type_descriptor", None) or getattr(param, "type", None)
    values = getattr(kind, "choices", None) or ()
    return tuple(str(getattr(v, "value", v)) for v in values)


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _ordered(names: list[str]) -> tuple[str, ...]:
    # Short options first. click builds the help option's names from a set, so their
    # order changes from run to run (PYTHONHASHSEED); generated text must not.
    return tuple(sorted(names, key=lambda n: (n.startswith("--"), n)))


def _option(param: Any, ctx: Any) -> Param:
    record = param.get_help_record(ctx) or ("", "")
    takes_value = not (param.is_flag or getattr(param, "count", False))
    metavar = param.metavar or ("" if not takes_value else param.name.upper())
    names, secondary = _ordered(param.opts), _ordered(param.secondary_opts)
    synopsis = _one_line(record[0])
    if not takes_value:  # a flag: its synopsis is just its names
        synopsis = " / ".join(", ".join(group) for group in (names, secondary) if group)
    return Param(
        names=names,
        secondary=secondary,
        takes_value=takes_value,
        repeatable=bool(param.multiple),
        choices=_choices(param),
        metavar=metavar,
        help=_one_line(param.help),
        synopsis=synopsis,
        details=_one_line(record[1]),
    )


def _argument(param: Any) -> Param:
    metavar = param.metavar or param.name.upper()
    repeated = param.nargs == -1 and not metavar.endswith("...")
    synopsis = metavar + ("..." if repeated else "")
    text = _one_line(getattr(param, "help", None))
    return Param(
        names=(metavar,),
        secondary=(),
        takes_value=True,
        repeatable=param.nargs == -1,
        choices=_choices(param),
        metavar=metavar,
        help=text,
        synopsis=synopsis,
        details=text + ("" if param.required else " (optional)"),
    )


def tree(app: typer.Typer | None = None) -> list[Node]:
    """Every command and group, parents before children, in help order (sbctl's own with
    every command loaded when ``app`` is None)."""
    if app is None:
        from sbctl.cli.app import full_tree

        root = full_tree()
    else:
        from sbctl.cli.options import polish

        root = polish(typer.main.get_command(app))
    nodes: list[Node] = []

    def visit(command: Any, path: tuple[str, ...], parent: Any) -> None:
        name = path[-1] if path else PROG
        ctx = command.make_context(name, [], parent=parent, resilient_parsing=True)
        params = [p for p in command.get_params(ctx) if not getattr(p, "hidden", False)]
        children: dict[str, Any] = getattr(command, "commands", None) or {}
        listed = command.list_commands(ctx) if children else []
        names = tuple(n for n in listed if not children[n].hidden)
        usage = " ".join((ctx.command_path, *command.collect_usage_pieces(ctx)))
        nodes.append(
            Node(
                path=path,
                help=inspect.cleandoc(command.help or ""),
                short_help=_one_line(command.get_short_help_str(limit=200)),
                usage=usage,
                options=tuple(_option(p, ctx) for p in params if p.param_type_name == "option"),
                arguments=tuple(_argument(p) for p in params if p.param_type_name == "argument"),
                children=names,
            )
        )
        for child in names:
            visit(children[child], (*path, child), ctx)

    visit(root, (), None)
    return nodes


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _node_markdown(node: Node, by_path: dict[tuple[str, ...], Node]) -> list[str]:
    out = [f"### `{node.command}`", ""]
    if node.help:
        out += [node.help, ""]
    out += ["```text", node.usage, "```", ""]
    if node.arguments:
        out += ["| Argument | Description |", "| --- | --- |"]
        out += [f"| `{_cell(a.synopsis)}` | {_cell(a.details)} |" for a in node.arguments]
        out.append("")
    if node.options:
        out += ["| Option | Description |", "| --- | --- |"]
        out += [f"| `{_cell(o.synopsis)}` | {_cell(o.details)} |" for o in node.options]
        out.append("")
    if node.children:
        out += ["| Command | Description |", "| --- | --- |"]
        for child in node.children:
            sub = by_path[(*node.path, child)]
            out.append(f"| [`{sub.command}`](#{_anchor(sub.command)}) | {_cell(sub.short_help)} |")
        out.append("")
    return out


def _anchor(command: str) -> str:
    """GitHub's heading anchor for ``### `sbctl queue create` ``."""
    return command.lower().replace(" ", "-")


def render(app: typer.Typer | None = None) -> str:
    """The reference as Markdown: one section per command, parents first."""
    nodes = tree(app)
    by_path = {node.path: node for node in nodes}
    lines: list[str] = []
    for node in nodes:
        lines += _node_markdown(node, by_path)
    return "\n".join(lines).rstrip() + "\n"


def reference(app: typer.Typer | None = None) -> str:
    """The whole of REFERENCE.md: a short header, then :func:`render`."""
    return REFERENCE_HEADER + "\n" + render(app)


def index_json() -> str:
    """The whole of ``commands.json``, the root's index of its lazily loaded commands
    (:mod:`sbctl.cli.app`)."""
    from sbctl.cli.app import index

    return json.dumps(index(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        from sbctl.cli.app import INDEX

        REFERENCE.write_text(reference(), encoding="utf-8")
        INDEX.write_text(index_json(), encoding="utf-8")
    else:
        print(render(), end="")
