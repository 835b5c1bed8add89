"""Through a real daemon: every AMQP primitive type of an application property comes back
over AMQP with the type it was sent with and `sbctl peek -o json` names it; a ulong at the
top of its range is delivered (it once closed every receiving connection); 200 KiB
amqp-value bodies are taken as body, not header; the Python SDK's own types round-trip."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t
from tests.integration.amqp_raw import RawClient
from tests.integration.amqp_sdk import (  # noqa: F401
    cli_json,
    collect_sdk_sockets,
    peek,
    receive_exactly,
)

AT = datetime.datetime(2026, 3, 4, 5, 6, 7, 891000, tzinfo=datetime.UTC)
ID = uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e")
EVERY_TYPE: dict[str, Any] = {
    "byte": t.Byte(-5),
    "ubyte": t.UByte(250),
    "short": t.Short(-300),
    "ushort": t.UShort(60000),
    "int": t.Int(42),
    "uint": t.UInt(4_000_000_000),
    "long": 42,  # a long that fits 32 bits: it once came back an int
    "ulong": t.ULong(2**64 - 1),  # it once failed to encode and closed the connection
    "float": t.Float(1.5),
    "double": 2.25,
    "decimal32": t.Decimal32(bytes.fromhex("32800001")),
    "decimal64": t.Decimal64(bytes.fromhex("31c0000000000001")),
    "decimal128": t.Decimal128(bytes.fromhex("30400000000000000000000000000001")),
    "char": t.Char("é"),
    "boolean": True,
    "timestamp": t.Timestamp(1_772_600_767_891),
    "uuid": ID,
    "binary": b"\x00\xff",
    "string": "text",
    "symbol": t.Symbol("sym"),
}
SHOWN = {
    "byte": {"$type": "byte", "value": -5},
    "ubyte": {"$type": "ubyte", "value": 250},
    "short": {"$type": "short", "value": -300},
    "ushort": {"$type": "ushort", "value": 60000},
    "int": 42,
    "uint": {"$type": "uint", "value": 4_000_000_000},
    "long": {"$type": "long", "value": 42},
    "ulong": {"$type": "ulong", "value": 2**64 - 1},
    "float": {"$type": "float", "value": 1.5},
    "double": 2.25,
    "decimal32": {"$type": "decimal32", "value": "32800001"},
    "decimal64": {"$type": "decimal64", "value": "31c0000000000001"},
    "decimal128": {"$type": "decimal128", "value": "30400000000000000000000000000001"},
    "char": {"$type": "char", "value": "é"},
    "boolean": True,
    "timestamp": {"$type": "timestamp", "value": "2026-03-04T05:06:07.891Z"},
    "uuid": {"$type": "uuid", "value": str(ID)},
    "binary": {"$type": "binary", "value": "AP8="},
    "string": "text",
    "symbol": {"$type": "symbol", "value": "sym"},
}


@pytest.fixture(scope="module")
def raw(module_daemon: Any) -> Iterator[tuple[Any, RawClient]]:
    for name in ("types", "bodies", "sdk"):
        module_daemon.cli("queue", "create", name, check=True)
    port: int = cli_json(module_daemon, "daemon", "status")["amqp_port"]
    client = RawClient(port)
    try:
        yield module_daemon, client
    finally:
        client.close()


def send(client: RawClient, queue: str, message: codec.Message) -> Any:
    """One message on a new sender link, in frames of at most 60 000 bytes; its outcome."""
    tx = client.attach(False, queue)
    client.until(t.Attach)
    client.until(t.Flow)
    payload = codec.encode_message(message)
    chunks = [payload[i : i + 60_000] for i in range(0, len(payload), 60_000)]
    for i, chunk in enumerate(chunks):
        more = i < len(chunks) - 1
        transfer = t.Transfer(tx, 0, b"\x00\x00\x00\x01", 0, False, more)
        client.sock.sendall(framing.encode_frame(0, transfer, chunk))
    return client.until(t.Disposition).body.state


def receive(client: RawClient, queue: str) -> codec.Message:
    """One message, received and deleted on a new receiver link."""
    client.handles += 1
    rx = client.handles
    attach = t.Attach(f"rx-{rx}", rx, True, 1, 0, t.Source(queue), t.Target("me"))
    client.sock.sendall(framing.encode_frame(0, attach))
    client.until(t.Attach)
    client.sock.sendall(framing.encode_frame(0, t.Flow(None, 5000, 0, 5000, rx, 0, 1)))
    payload = b""
    while True:
        frame = client.until(t.Transfer)
        payload += frame.payload
        if not frame.body.more:
            return codec.decode_message(payload)


def test_every_amqp_type_round_trips_and_peek_names_it(raw: Any) -> None:
    daemon, client = raw
    sent = codec.Message(application_properties=EVERY_TYPE, body=[b"typed"])
    assert isinstance(send(client, "types", sent), t.Accepted)
    (shown,) = peek(daemon, "types")
    assert shown["application_properties"] == SHOWN
    got = receive(client, "types").application_properties
    assert got is not None
    for key, value in EVERY_TYPE.items():
        assert (type(got[key]), got[key]) == (type(value), value), key


def test_typed_json_from_the_cli_reaches_amqp_typed(raw: Any) -> None:
    daemon, client = raw
    import json

    line = json.dumps({"body": "cli", "application_properties": SHOWN})
    daemon.cli("send", "types", "--input", "-", input=line + "\n", check=True)
    daemon.cli("send", "types", "--body", "p", "--property", 'n={"$type":"short","value":7}')
    got = receive(client, "types").application_properties
    assert got is not None
    for key, value in EVERY_TYPE.items():
        assert (type(got[key]), got[key]) == (type(value), value), key
    props = receive(client, "types").application_properties
    assert props is not None and (type(props["n"]), props["n"]) == (t.Short, 7)


@pytest.mark.parametrize("value", ["s" * 204_800, b"\x01" * 204_800])
def test_a_200_kib_amqp_value_body_is_a_body(raw: Any, value: Any) -> None:
    _, client = raw
    state = send(client, "bodies", codec.Message(body=value, body_kind="value"))
    assert isinstance(state, t.Accepted), state
    got = receive(client, "bodies")
    assert got.body_kind == "value" and (type(got.body), got.body) == (type(value), value)


def test_the_python_sdks_types_round_trip(raw: Any) -> None:
    """What the Python SDK sends: an int (as an AMQP int), float, bool, str, UUID, datetime,
    and through its AMQP layer's typed values (``{TYPE: ..., VALUE: ...}``) every width;
    peek names each type, the SDK reads each value back. And a 200 KiB amqp-value body."""
    sb = pytest.importorskip("azure.servicebus")
    from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes
    from azure.servicebus.amqp import AmqpAnnotatedMessage

    from tests.integration.amqp_sdk import connection_string

    daemon, _ = raw
    plain = {"i": 5, "f": 0.5, "b": True, "s": "x", "u": ID, "at": AT}
    widths = {"long": 2**40, "short": -3, "ubyte": 7, "ulong": 2**64 - 1, "float": 1.5}
    typed = {k: {TYPE: getattr(AMQPTypes, k), VALUE: v} for k, v in widths.items()}
    with sb.ServiceBusClient.from_connection_string(connection_string(daemon)) as client:
        with client.get_queue_sender("sdk") as sender:
            message = sb.ServiceBusMessage("p", application_properties={**plain, **typed})
            sender.send_messages(message)
            sender.send_messages(AmqpAnnotatedMessage(value_body="v" * 204_800))
        shown = peek(daemon, "sdk", "--count", "2")
        props = shown[0]["application_properties"]
        assert {k: props[k] for k in widths} == {
            "long": 2**40,  # (a plain JSON integer beyond 32 bits is a long)
            "short": {"$type": "short", "value": -3},
            "ubyte": {"$type": "ubyte", "value": 7},
            "ulong": {"$type": "ulong", "value": 2**64 - 1},
            "float": {"$type": "float", "value": 1.5},
        }
        assert (props["i"], props["f"], props["b"], props["s"]) == (5, 0.5, True, "x")
        assert shown[1]["body_kind"] == "value" and len(shown[1]["body"]) == 204_800
        with client.get_queue_receiver("sdk", max_wait_time=5) as receiver:
            got = receive_exactly(receiver, 2)
            back = {k.decode(): v for k, v in got[0].application_properties.items()}
            at = back.pop("at")
            if isinstance(at, int):  # (epoch ms or a datetime, by the SDK's version)
                at = datetime.datetime.fromtimestamp(at / 1000, tz=datetime.UTC)
            assert at == AT
            back["s"] = back["s"].decode() if isinstance(back["s"], bytes) else back["s"]
            assert back == {**{k: v for k, v in plain.items() if k != "at"}, **widths}
            body = got[1].body
            assert (body.decode() if isinstance(body, bytes) else body) == "v" * 204_800
            for m in got:
                receiver.complete_message(m)
