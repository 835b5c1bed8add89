"""What the broker answers on the wire, as strict AMQP stacks (Go's go-amqp, .NET's
Microsoft.Azure.Amqp) check it: a receiver link's attach reply carries the settle modes the
broker applies (those asked for), the session filter comes back in the form it was sent
(plain or described), and a deferred message received by sequence number carries its lock
token in the ``x-opt-lock-token`` delivery annotation (daemon/README.md §29)."""

from __future__ import annotations

import uuid
from typing import Any

from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t
from tests.integration.amqp_raw import RawClient
from tests.integration.test_amqp_raw_protocol import amqp_port

SESSION_FILTER = t.Symbol("com.microsoft:session-filter")
GO_DESCRIPTOR = t.ULong(0x137000000C)  # what azservicebus (Go) sends
SPEC_DESCRIPTOR = t.ULong(0x0000013700000000C)  # 0x00000137:0x0000000C


def attach_reply(client: RawClient, handle: int) -> Any:
    while True:
        frame = client.until(t.Attach)
        if frame.body.name == f"link-{handle}":  # (the broker numbers its own handles)
            return frame.body


def test_receiver_links_answer_the_settle_modes_they_apply(module_daemon: Any) -> None:
    module_daemon.cli("queue", "create", "modes", check=True)
    client = RawClient(amqp_port(module_daemon), mechanism="ANONYMOUS")
    try:
        asked = {
            "peek-lock, receiver settles second": (0, 1),
            "peek-lock, receiver settles first": (0, 0),
            "receive-and-delete": (1, 0),
            "mixed": (2, 1),
        }
        answered = {}
        for what, modes in asked.items():
            handle = client.attach(True, "modes", settle_modes=modes)
            reply = attach_reply(client, handle)
            answered[what] = (reply.snd_settle_mode, reply.rcv_settle_mode)
        assert answered == asked
    finally:
        client.close()


def test_the_session_filter_is_echoed_in_the_form_sent(module_daemon: Any) -> None:
    module_daemon.cli("queue", "create", "forms", "--enable-session", check=True)
    for sid in ("named", "next", "plain"):
        module_daemon.cli("send", "forms", "--body", sid, "--session-id", sid, check=True)
    client = RawClient(amqp_port(module_daemon), mechanism="ANONYMOUS")
    try:
        sent = {
            "named": t.Described(GO_DESCRIPTOR, "named"),
            "next": t.Described(SPEC_DESCRIPTOR, None),
            "plain": "plain",
        }
        echoed = {}
        for what, value in sent.items():
            handle = client.attach(
                True, "forms", settle_modes=(0, 1), filter={SESSION_FILTER: value}
            )
            reply = attach_reply(client, handle)
            echoed[what] = reply.source.filter[SESSION_FILTER]
        assert echoed == {
            "named": t.Described(GO_DESCRIPTOR, "named"),
            "next": t.Described(SPEC_DESCRIPTOR, "next"),
            "plain": "plain",
        }
        # The connection lives on: a wrong filter value is refused on its link alone.
        handle = client.attach(
            True, "forms", filter={SESSION_FILTER: t.Described(GO_DESCRIPTOR, 7)}
        )
        reply = attach_reply(client, handle)
        assert reply.source is None  # refused
        detach = client.until(t.Detach).body
        assert detach.error.condition == "com.microsoft:argument-error", detach.error
        assert "session filter must be a session id" in detach.error.description
    finally:
        client.close()


def receive_and_defer(client: RawClient, entity: str, **source: Any) -> int:
    """Receive one message on a new peek-lock link (link-N) and defer it: its sequence
    number."""
    rx = client.attach(True, entity, settle_modes=(0, 1), **source)
    client.sock.sendall(framing.encode_frame(0, t.Flow(0, 5000, 0, 5000, rx, 0, 1)))
    delivery = client.until(t.Transfer)
    seq: int = codec.decode_message(delivery.payload).message_annotations["x-opt-sequence-number"]
    defer = t.Modified(True, True)
    disposition = t.Disposition(True, delivery.body.delivery_id, None, True, defer)
    client.sock.sendall(framing.encode_frame(0, disposition))
    return seq


def receive_deferred(
    client: RawClient, entity: str, seq: int, app: dict[str, Any] | None = None
) -> Any:
    node = f"{entity}/$management"
    tx, _ = client.management(node)
    request = {"sequence-numbers": t.Array("long", [seq]), "receiver-settle-mode": t.UInt(1)}
    op = "com.microsoft:receive-by-sequence-number"
    status, body = client.request(tx, node, op, request, 0, app)
    assert status["statusCode"] == 200, status
    (entry,) = body["messages"]
    return entry


def test_a_deferred_message_carries_its_lock_token_as_a_delivery_annotation(
    module_daemon: Any,
) -> None:
    module_daemon.cli("queue", "create", "later", check=True)
    module_daemon.cli("send", "later", "--body", "deferred", check=True)
    client = RawClient(amqp_port(module_daemon), mechanism="ANONYMOUS")
    try:
        entry = receive_deferred(client, "later", receive_and_defer(client, "later"))
        message = codec.decode_message(entry["message"])
        token = message.delivery_annotations["x-opt-lock-token"]
        assert isinstance(token, uuid.UUID) and token == entry["lock-token"]
        assert b"".join(message.body) == b"deferred"
        assert message.message_annotations["x-opt-message-state"] == 1
    finally:
        client.close()


def test_a_session_receivers_requests_are_scoped_to_its_session_by_the_link_they_name(
    module_daemon: Any,
) -> None:
    """The Go SDK's session receiver sends receive-by-sequence-number without
    ``session-id``, naming its receiver link in ``associated-link-name``."""
    module_daemon.cli("queue", "create", "held", "--enable-session", check=True)
    module_daemon.cli("send", "held", "--body", "in-d", "--session-id", "D", check=True)
    client = RawClient(amqp_port(module_daemon), mechanism="ANONYMOUS")
    try:
        seq = receive_and_defer(client, "held", filter={SESSION_FILTER: "D"})
        link = f"link-{client.handles}"
        entry = receive_deferred(client, "held", seq, {"associated-link-name": link})
        message = codec.decode_message(entry["message"])
        assert b"".join(message.body) == b"in-d"
        assert message.properties.group_id == "D"
    finally:
        client.close()
