"""Helpers for the end-to-end tests that drive a real daemon through the Azure SDK."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from typing import Any

import pytest


def connection_string(daemon: Any, namespace: str | None = None) -> str:
    args = ["-o", "json", "namespace", "connection-string"]
    if namespace:
        args.append(namespace)
    text: str = daemon.cli(*args, check=True).json()["connection_string"]
    return text


def cli_json(daemon: Any, *args: str) -> Any:
    return daemon.cli("-o", "json", *args, check=True).json()


def amqp_type(value: Any) -> str:
    """The AMQP type `sbctl peek -o json` shows: ``$type`` when given, else JSON's own."""
    if isinstance(value, dict) and "$type" in value:
        return str(value["$type"])
    return {bool: "boolean", int: "int", float: "double", str: "string"}[type(value)]


def peek(daemon: Any, *args: str) -> list[Any]:
    """``sbctl peek -o json`` (JSON Lines) as a list."""
    rows: list[Any] = daemon.cli("-o", "json", "peek", *args, check=True).jsonl()
    return rows


def receive_exactly(receiver: Any, count: int) -> list[Any]:
    """``count`` messages from an SDK receiver, over as many receive calls as it takes."""
    got: list[Any] = receiver.receive_messages(max_message_count=count, max_wait_time=5)
    while len(got) < count:
        more = receiver.receive_messages(max_message_count=count, max_wait_time=5)
        assert more, f"{len(got)} of {count} messages received"
        got += more
    return got


@pytest.fixture(autouse=True)
def collect_sdk_sockets() -> Iterator[None]:
    """The SDK can leave a socket to the garbage collector (e.g. when the daemon was
    killed under it); collect it here, where its ResourceWarning is expected, rather than
    in whichever later test the collector happens to run."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
