"""``sbctl import-config FILE`` and ``sbctl export-config [NS]...``: the official Azure
Service Bus emulator's Config.json in and out (:mod:`sbctl.emulator_config` does the work).

Namespaces come from the file, not from the global ``-n``. Import prints one row per entity
(its JSON path, kind, name and what was done); ``--dry-run`` checks the file against the
daemon and prints the plan without changing anything.
"""

import sys
from typing import Annotated, Any

import typer

from sbctl.cli import options, render

REPORT_COLUMNS = ("path", "kind", "entity", "action", "changes")  # -o json adds namespace


def register(app: typer.Typer) -> None:
    app.command("import-config")(import_config)
    app.command("export-config")(export_config)


def import_config(
    ctx: typer.Context,
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE",
            show_default=False,
            help="A Config.json in the official emulator's schema ('-': stdin).",
        ),
    ],
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Check the file and show the plan; change nothing."),
    ] = False,
) -> None:
    """Create the entities of an official-emulator Config.json; re-importing is a no-op.

    Existing entities are updated where they differ; a subscription that lists rules ends
    up with exactly those rules. Namespaces come from the file, not from -n.
    """
    from sbctl.cli.cmd_messages import read_input
    from sbctl.core.errors import BadRequest
    from sbctl.emulator_config import apply_config, load_config

    g = options.state(ctx)
    source = "stdin" if file == "-" else file
    try:
        text = read_input(file).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    plan = load_config(text, source)
    for warning in plan.warnings:
        sys.stderr.write(f"warning: {render.escape(warning)}\n")
    with options.connect(ctx) as sb:
        rows = apply_config(sb, plan, dry_run=dry_run)
    report = {"dry_run": dry_run, "results": rows, "warnings": list(plan.warnings)}
    render.emit(g.output, report, _report)
    if dry_run and g.output != "json":
        sys.stderr.write("dry run: nothing was changed\n")


def _report(report: dict[str, Any]) -> Any:
    rows = [{**row, "changes": "; ".join(row["changes"]) or None} for row in report["results"]]
    return render.rows(REPORT_COLUMNS)(rows)


def export_config(
    ctx: typer.Context,
    namespaces: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[NS]...", show_default=False, help="Namespaces to export (default: all)."
        ),
    ] = None,
    file: Annotated[
        str | None,
        typer.Option(
            "--file",
            "-f",
            metavar="PATH",
            show_default=False,
            help="Write the config to PATH instead of stdout.",
        ),
    ] = None,
) -> None:
    """Write namespaces as an official-emulator Config.json that import-config reads back.

    Properties outside the emulator's schema (sbctl's extras) are written only where an
    entity's value differs from Azure's default.
    """
    import json

    from sbctl.emulator_config import export_config as export

    g = options.state(ctx)
    with options.connect(ctx) as sb:
        config = export(sb, namespaces)
    text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    if file is None:
        sys.stdout.write(text)
        return
    with open(file, "w", encoding="utf-8") as fh:
        fh.write(text)
    names = [ns["Name"] for ns in config["UserConfig"]["Namespaces"]]
    render.emit(
        g.output,
        {"file": file, "namespaces": names},
        lambda _: f"wrote {len(names)} namespace(s) to {render.escape(file)}",
    )
