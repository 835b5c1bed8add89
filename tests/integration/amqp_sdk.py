"""Helpers for the end-to-end tests that drive a real daemon through the Azure SDK."""

from __future__ import annotations

from typing import Any


def connection_string(daemon: Any, namespace: str | None = None) -> str:
    args = ["-o", "json", "namespace", "connection-string"]
    if namespace:
        args.append(namespace)
    text: str = daemon.cli(*args, check=True).json()["connection_string"]
    return text


def cli_json(daemon: Any, *args: str) -> Any:
    return daemon.cli("-o", "json", *args, check=True).json()


def peek(daemon: Any, *args: str) -> list[Any]:
    """``sbctl peek -o json`` (JSON Lines) as a list."""
    rows: list[Any] = daemon.cli("-o", "json", "peek", *args, check=True).jsonl()
    return rows
