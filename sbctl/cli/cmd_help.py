"""``sbctl help [TOPIC]``: the user guides shipped in the package (``sbctl/guides/*.md``).

``sbctl help`` lists the topics with their titles; ``sbctl help TOPIC`` renders one guide as
rich Markdown (through a pager on a terminal, as ``git help`` does); ``--raw`` prints the
Markdown source. The guides are package data, so they are there in any install.
"""

import os
import sys
from importlib import resources
from typing import Annotated

import typer

from sbctl.cli import options


def register(app: typer.Typer) -> None:
    app.command(name="help")(help_command)


def topics() -> dict[str, str]:
    """Every guide's topic name and its Markdown text, sorted by name."""
    folder = resources.files("sbctl") / "guides"
    found = {
        entry.name.removesuffix(".md"): entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".md")
    }
    return dict(sorted(found.items()))


def title(text: str) -> str:
    """The first heading of a guide, without its ``#``."""
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def help_command(
    ctx: typer.Context,
    topic: Annotated[
        str | None, typer.Argument(metavar="[TOPIC]", help="The guide to show.")
    ] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Print the guide's Markdown source.")] = False,
) -> None:
    """Show a user guide (cli, testing, sdks, ...); without TOPIC, list them.

    Commands and options: `sbctl COMMAND --help`.
    """
    guides = topics()
    if topic is None:
        _list(guides, options.state(ctx).output)
        return
    text = guides.get(topic.lower().removesuffix(".md"))
    if text is None:
        raise typer.BadParameter(
            f"unknown topic {topic!r}; one of: {', '.join(guides)}", param_hint="'TOPIC'"
        )
    if raw:
        typer.echo(text, nl=False)
        return
    _render(text)


def _list(guides: dict[str, str], output: str) -> None:
    if output == "json":
        import json

        rows = [{"topic": name, "title": title(text)} for name, text in guides.items()]
        typer.echo(json.dumps(rows))
        return
    width = max(map(len, guides), default=0)
    typer.echo("Guides (sbctl help TOPIC):")
    for name, text in guides.items():
        typer.echo(f"  {name.ljust(width)}  {title(text)}")


def _render(text: str) -> None:
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console()
    if sys.stdout.isatty():
        os.environ.setdefault("LESS", "-R")  # less shows the styles instead of escape codes
        with console.pager(styles=True):
            console.print(Markdown(text))
    else:
        console.print(Markdown(text))
