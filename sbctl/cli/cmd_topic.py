"""Placeholder: filled in by the topics work (issue 4)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    del app
