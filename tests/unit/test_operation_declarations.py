"""Operations are declared once (sbctl.core.operations) and both sides follow the declaration.

The table against the service's handlers and against the client (every declared
operation has a handler and a client call; every handler and every client call names a
declared operation), the protocol reference generated from it, and the daemon applying a
declaration's durability and wake-ups (on the real Unix front-end over an in-memory
transport, the fake clock's timers and the real group commit).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest

from sbctl.client import AsyncClient, Client
from sbctl.client._calls import METHOD_OPS
from sbctl.core.operations import OPERATIONS, OPS, decode_request, main, reference
from sbctl.core.protocol import FaultAdd, Receive, Send, Settle, encode_request
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.frontends.unix.server import UnixFrontend
from sbctld.service import Service
from sbctld.service.operations import Operations
from tests.unit.test_service import FakeTimers, Unix, settle_loop

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "sbctl" / "client"
NS = DEFAULT_NAMESPACE


def _named_ops(path: Path) -> list[tuple[str, int]]:
    """The operation names ``path`` sends: ``self._op("name", ...)`` and
    ``OPERATIONS["name"]``, with their lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "_op"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.append((node.args[0].value, node.lineno))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "OPERATIONS"
            and isinstance(node.slice, ast.Constant)
        ):
            found.append((node.slice.value, node.lineno))
    return found


def _calls_used(path: Path) -> set[str]:
    """The ``self._calls.<method>(...)`` a client module calls."""
    return {
        node.func.attr
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "_calls"
    }


# -- The table against the handlers and the client ------------------------------------------


def test_every_declared_operation_has_a_service_handler_and_every_handler_is_declared() -> None:
    served = {name[3:] for name in dir(Operations) if name.startswith("op_")}
    assert sorted(set(OPERATIONS) - served) == [], "declared without a handler"
    assert sorted(served - set(OPERATIONS)) == [], "a handler without a declaration"


def test_the_service_refuses_to_start_with_a_handler_out_of_the_table() -> None:
    class Extra(Operations):
        def op_drop_everything(self, a: Any, call: Any) -> Any:
            return None

    with pytest.raises(RuntimeError, match="without declaration: drop_everything"):
        object.__new__(Extra).table()
    table = object.__new__(Operations).table()
    assert list(table) == list(OPERATIONS)


def test_every_declared_operation_has_a_client_call_and_every_call_is_declared() -> None:
    named = {path.name: _named_ops(path) for path in sorted(CLIENT.glob("*.py"))}
    undeclared = [(f, n, line) for f, ops in named.items() for n, line in ops if n not in OPS]
    assert undeclared == []
    sent = {n for ops in named.values() for n, _ in ops}
    assert sorted(set(OPERATIONS) - sent) == [], "declared, but no client call sends it"


def test_the_request_builders_are_named_after_their_operation_and_both_clients_use_them() -> None:
    tree = ast.parse((CLIENT / "_calls.py").read_text(encoding="utf-8"))
    calls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_Calls")
    builders = {}
    for fn in calls.body:
        if isinstance(fn, ast.FunctionDef) and not fn.name.startswith("_"):
            ops = {
                node.args[0].value
                for node in ast.walk(fn)
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "_op"
            }
            builders[fn.name] = ops
    misnamed = {name: ops for name, ops in builders.items() if ops != {name}}
    assert misnamed == {"send_report": {"send"}}  # the one builder of a second form
    # The transaction's commit builds `transact`; every other operation is a builder, which
    # both clients call (and nothing else restates an operation's wiring).
    assert set(builders) | {"transact"} == set(OPERATIONS) | {"send_report"}
    assert _calls_used(CLIENT / "_sync.py") == set(builders)
    assert _calls_used(CLIENT / "_async.py") == set(builders)


def test_the_sync_and_async_clients_offer_the_same_methods_with_the_same_parameters() -> None:
    def public(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(fn).parameters)
            for name, fn in vars(cls).items()
            if callable(fn) and not name.startswith("_")
        }

    sync, async_ = public(Client), public(AsyncClient)
    sync.pop("close")
    async_.pop("aclose")
    assert sync == async_
    for name in sync:
        if name not in ("using", "transaction"):
            assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_every_operation_method_of_the_clients_has_help(cls: type) -> None:
    """A method without its own docstring shows its operation's about line."""
    assert all(hasattr(cls, name) and op in OPERATIONS for name, op in METHOD_OPS.items())
    for name, fn in vars(cls).items():
        if METHOD_OPS.get(name, name) in OPERATIONS:
            assert fn.__doc__, name
    assert cls.queue_get.__doc__ == OPERATIONS["queue_get"].about  # type: ignore[attr-defined]
    assert cls.list_sessions.__doc__ == OPERATIONS["session_list"].about  # type: ignore[attr-defined]


def test_a_client_request_decodes_as_the_daemon_reads_its_arguments() -> None:
    """What the client encodes (``sends``) is what the daemon decodes (``args``)."""
    op, args, _read = OPERATIONS["send"].call(NS, "q", [Message(body=b"x")])
    req_id, got_op, decoded = decode_request(encode_request(5, op, args)[4:])
    assert (req_id, got_op) == (5, "send")
    assert isinstance(decoded, OPS["send"]) and decoded.entity == "q"


# -- The reference ---------------------------------------------------------------------------


def test_the_protocol_reference_is_generated_from_the_table() -> None:
    text = reference()
    for op in OPERATIONS.values():
        assert f"| `{op.name}` |" in text and op.about in text
    assert "| `receive` | " in text and "In receive-and-delete mode" in text
    stored = (ROOT / "sbctl" / "core" / "PROTOCOL.md").read_text(encoding="utf-8")
    assert stored == text, "stale: run python -m sbctl.core.operations --write"


def test_the_reference_prints_without_write(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert capsys.readouterr().out == reference()


def test_every_about_line_is_one_sentence_of_its_own() -> None:
    abouts = [op.about for op in OPERATIONS.values()]
    assert len(set(abouts)) == len(abouts)
    assert all(a.endswith(".") and "\n" not in a and len(a) <= 120 for a in abouts)


# -- The daemon applies the declaration ------------------------------------------------------


@pytest.fixture
def unix(broker: Broker, clock: FakeClock, tmp_path: Path) -> Any:
    broker.management.queue_create(NS, "q", {})

    def make() -> tuple[Service, UnixFrontend]:
        timers = FakeTimers(clock)
        service = Service(broker, broker.syncer, timers=lambda: timers)
        return service, UnixFrontend(service, tmp_path / "never-bound.sock")

    return make


def test_a_receive_is_durable_only_in_receive_and_delete_mode(unix: Any) -> None:
    async def scenario() -> None:
        service, frontend = unix()
        client = Unix(frontend, [])
        client.request("send", Send(NS, "q", [Message(body=b"a"), Message(body=b"b")]))
        await settle_loop()
        locked = client.request("receive", Receive(NS, "q"))
        assert client.reply(locked) is not None  # answered at once: nothing to make durable
        deleted = client.request("receive", Receive(NS, "q", mode="receive-and-delete"))
        assert client.reply(deleted) is None  # waits for the group commit's sync
        rounds = service.committer.rounds
        await settle_loop()
        reply = client.reply(deleted)
        assert reply is not None and reply[0] and len(reply[1]) == 1
        assert service.committer.rounds == rounds + 1
        await service.stop()

    asyncio.run(scenario())


def test_an_abandon_wakes_a_receive_parked_on_its_entity_and_a_complete_does_not(
    unix: Any,
) -> None:
    async def scenario() -> None:
        service, frontend = unix()
        client = Unix(frontend, [])
        client.request("send", Send(NS, "q", [Message(body=b"a"), Message(body=b"b")]))
        await settle_loop()
        first = client.request("receive", Receive(NS, "q", count=2))
        reply = client.reply(first)
        assert reply is not None and len(reply[1]) == 2
        tokens = [d[3] for d in reply[1]]  # Delivered travels as an array: the lock token
        parked = client.request("receive", Receive(NS, "q", max_wait_ms=60_000))
        assert client.reply(parked) is None
        client.request("settle", Settle(NS, "q", "complete", tokens[:1]))
        await settle_loop()
        assert client.reply(parked) is None  # completing frees nothing to receive
        client.request("settle", Settle(NS, "q", "abandon", tokens[1:]))
        await settle_loop()
        reply = client.reply(parked)
        assert reply is not None and reply[0] and len(reply[1]) == 1
        assert service.status()["parked_receives"] == 0
        await service.stop()

    asyncio.run(scenario())


def test_a_fault_on_the_namespace_wakes_its_parked_receives_to_fail(unix: Any) -> None:
    async def scenario() -> None:
        service, frontend = unix()
        waiting = Unix(frontend, [])
        parked = waiting.request("receive", Receive(NS, "q", max_wait_ms=60_000))
        await settle_loop()
        assert waiting.reply(parked) is None
        service.broker.housekeeping.fault_add(NS, None, [], "unavailable", None)
        await settle_loop()
        assert waiting.reply(parked) is None  # the broker call alone wakes nothing
        other = Unix(frontend, [])
        other.request("fault_add", FaultAdd(NS, "q"))
        await settle_loop()
        reply = waiting.reply(parked)
        assert reply is not None and not reply[0]
        assert reply[1]["code"] == "ServiceCommunicationProblem"
        await service.stop()

    asyncio.run(scenario())
