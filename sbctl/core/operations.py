"""The daemon's operations, each declared once: the Unix-socket protocol's, and what the AMQP
and HTTP front-ends run.

One :class:`Operation` per operation, in the manner of Kafka's RPC declarations (one entry
per request, with its "about"): its name, its arguments (a Struct of :mod:`sbctl.core.protocol`),
whether its answer waits until what it wrote is on disk, which entities it wakes, how the
client reads its result, and one line about it. Both sides are driven by this table:

- the daemon's service (``sbctld.service``) runs ``op_<name>`` for every front-end, answers
  once durable when the declaration says so, and then wakes what the declaration names; the
  Unix front-end decodes a request's arguments with :func:`decode_args`, AMQP
  ``$management``, AMQP links and HTTP routes build the same arguments from their own
  requests;
- the client (:mod:`sbctl.client`) builds a request with :meth:`Operation.call` and reads
  the answer with the declaration's reader;
- ``python -m sbctl.core.operations`` prints the table as Markdown (sbctl/core/PROTOCOL.md).

Rules kept here: the wire format is the arguments' Structs and the results the daemon sends;
nothing here changes it. ``durable`` and ``wakes`` see the decoded arguments and the result
the service answers, and nothing else: they are pure.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from sbctl.core.delivered import Delivered
from sbctl.core.errors import BadRequest
from sbctl.core.messages import ReceivedMessage
from sbctl.core.protocol import (
    PROTOCOL_VERSION,
    ClockAdvance,
    ClockSet,
    DeleteMessages,
    Empty,
    EntityCreate,
    EntityPath,
    EntityRef,
    FaultAdd,
    FaultClear,
    FaultList,
    LoadAdopt,
    LoadRef,
    NamespaceCreate,
    NamespacePair,
    NamespaceRef,
    NamespaceScope,
    NamespaceSetKey,
    NamespaceUpdate,
    Peek,
    Receive,
    ReceiveDeferred,
    Request,
    Resubmit,
    RuleCreate,
    RuleRef,
    Send,
    SendEncoded,
    SequenceNumbers,
    SessionAccept,
    SessionRef,
    SessionState,
    SessionToken,
    Settle,
    SubscriptionCreate,
    SubscriptionRef,
    TopicScope,
    Transact,
    TransactEncoded,
    decode_envelope,
    decode_result,
)

# (namespace, entity) whose parked requests a write completes; entity None: every entity of
# the namespace (a store fault added or cleared changes what each of them would answer).
Wake = tuple[str, str | None]
Reader = Callable[[msgspec.Raw], Any]
# A request as the client sends it: (op, args, how to read the result).
Call = tuple[str, msgspec.Struct, Reader]


# -- How the client reads a result ---------------------------------------------------------


def plain(raw: msgspec.Raw) -> Any:
    """The result as MessagePack decodes it (dicts, lists, numbers, strings)."""
    return decode_result(raw)


def delivered(raw: msgspec.Raw) -> list[ReceivedMessage]:
    """Peeked or received messages (:class:`sbctl.core.delivered.Delivered`) as the client's
    :class:`sbctl.core.messages.ReceivedMessage`."""
    return [ReceivedMessage.from_wire(d) for d in decode_result(raw, list[Delivered])]


def session_state(raw: msgspec.Raw) -> bytes | None:
    """The ``state`` of ``{"session_id", "state"}``: the session's state bytes, or None."""
    state = decode_result(raw)["state"]
    return bytes(state) if state is not None else None


# -- What an operation wakes and when it is durable -----------------------------------------


def redelivers(op: str) -> bool:
    """A settlement that makes its messages receivable again, in the entity or in its
    dead-letter queue (abandon, dead-letter): every front-end wakes the entity after it."""
    return op in ("abandon", "dead-letter")


def deletes_on_receive(mode: str) -> bool:
    """A receive mode that removes what it answers (receive-and-delete): every front-end
    answers it once durable, like a settlement."""
    return mode == "receive-and-delete"


def _field(result: Any, name: str) -> Any:
    """A field of a result: a wire dict, or a typed result with that attribute."""
    return result[name] if isinstance(result, dict) else getattr(result, name)


def _the_entity(a: Any, _result: Any) -> Sequence[Wake]:
    """The entity (what it sent, or the session it freed, is there for a parked request)."""
    return ((a.namespace, a.entity),)


def _redelivered(a: Settle, _result: Any) -> Sequence[Wake]:
    """The entity, on abandon or dead-letter (the messages are receivable again, there or
    in its dead-letter queue)."""
    return ((a.namespace, a.entity),) if redelivers(a.op) else ()


def _transacted(a: TransactEncoded, _result: Any) -> Sequence[Wake]:
    """The entity, when it sends, abandons or dead-letters."""
    if a.messages or any(redelivers(s.op) for s in a.settlements):
        return ((a.namespace, a.entity),)
    return ()


def _resubmitted(a: Resubmit, result: Any) -> Sequence[Wake]:
    """The entity moved to, when it moved any."""
    return ((a.namespace, a.to or a.entity),) if _field(result, "resubmitted") else ()


def _faulted_namespace(a: FaultAdd, _result: Any) -> Sequence[Wake]:
    """Every entity of the namespace (receives parked on a store that went down fail)."""
    return ((a.namespace, None),)


def _travelled(a: ClockAdvance | ClockSet, _result: Any) -> Sequence[Wake]:
    """Every entity of the namespace (scheduled messages came due, locks ran out)."""
    return ((a.namespace, None),)


def _cleared_namespaces(_a: FaultClear, result: Any) -> Sequence[Wake]:
    """Every entity of each namespace cleared (what the stores held is there again)."""
    names = (_field(f, "namespace") for f in _field(result, "cleared"))
    return tuple((name, None) for name in dict.fromkeys(names))


def _deletes(a: Receive | ReceiveDeferred, result: Any) -> bool:
    """In receive-and-delete mode, when it received any (it removes what it answers, like a
    settlement; nothing received wrote nothing)."""
    return deletes_on_receive(a.mode) and bool(result)


# -- The declaration -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation: see the module docstring."""

    name: str
    args: type[msgspec.Struct]  # what the daemon decodes (strictly: an unknown field is refused)
    about: str  # one line: what it does, for the protocol's reference
    # answered once what it wrote is durable (daemon/README.md §21); or a predicate on the args
    # and the result
    durable: bool | Callable[[Any, Any], bool] = False
    # the entities (or namespaces) it writes: parked requests on them are completed after it
    wakes: Callable[[Any, Any], Sequence[Wake]] | None = None
    reads: Reader = plain  # how the client reads the result
    sends: type[msgspec.Struct] | None = None  # what the client encodes, when not ``args``

    def is_durable(self, args: Any, result: Any) -> bool:
        return self.durable(args, result) if callable(self.durable) else self.durable

    def woken(self, args: Any, result: Any) -> Sequence[Wake]:
        return () if self.wakes is None else self.wakes(args, result)

    def call(self, *fields: Any, reads: Reader | None = None, **named: Any) -> Call:
        """The client's request: the arguments built from ``fields``, read by ``reads``
        (default: the declared reader)."""
        struct = self.sends or self.args
        return self.name, struct(*fields, **named), reads or self.reads


_DECLARED = (
    # -- the daemon
    Operation("ping", Empty, "Check that the daemon answers: its version and process id."),
    Operation("status", Empty, "The daemon's settings, storage, requests and process figures."),
    Operation("shutdown", Empty, "Stop the daemon after what it has accepted is on disk."),
    # -- namespaces
    Operation(
        "namespace_create",
        NamespaceCreate,
        "Create a namespace with its tier, partitions, capacity and throttling.",
        durable=True,
    ),
    Operation(
        "namespace_get", NamespaceRef, "A namespace's tier, capacity, throttling and entities."
    ),
    Operation(
        "amqp_endpoint",
        NamespaceRef,
        "The AMQP port serving a namespace, and its SAS key name and key.",
    ),
    Operation(
        "namespace_set_key",
        NamespaceSetKey,
        "Set a namespace's SAS key name and key; new tokens are checked against it at once.",
        durable=True,
    ),
    Operation("namespace_list", Empty, "Every namespace."),
    Operation(
        "namespace_delete",
        NamespaceRef,
        "Delete a namespace and everything in it; requests parked on it fail.",
        durable=True,
    ),
    Operation(
        "namespace_update",
        NamespaceUpdate,
        "Change a namespace's throttling at runtime; capacity scales a premium namespace.",
        durable=True,
    ),
    Operation(
        "namespace_credits",
        NamespaceRef,
        "Throttling state: credits left, consumption by kind, throttled requests.",
    ),
    Operation(
        "namespace_metrics",
        NamespaceRef,
        "Throttled and served requests, and the daemon's CPU and memory.",
    ),
    Operation(
        "overview",
        NamespaceRef,
        "A namespace at a glance (sbctl top): credits, entities, partitions, faults, "
        "pairing; charged no credits.",
    ),
    Operation(
        "namespace_pair",
        NamespacePair,
        "Pair a primary namespace with a secondary for send availability; creates the "
        "backlog queues.",
        durable=True,
    ),
    Operation(
        "namespace_unpair",
        NamespaceRef,
        "Stop failing a primary's sends over; the backlog queues stay.",
        durable=True,
    ),
    Operation(
        "namespace_pair_status",
        NamespaceRef,
        "A pairing's state, failed-over entities, backlog queues and counters.",
    ),
    # -- queues
    Operation("queue_create", EntityCreate, "Create a queue.", durable=True),
    Operation("queue_update", EntityCreate, "Change a queue's settings.", durable=True),
    Operation("queue_get", EntityRef, "A queue's settings and message counts."),
    Operation("queue_list", NamespaceScope, "Every queue of a namespace."),
    Operation(
        "queue_delete",
        EntityRef,
        "Delete a queue and its messages; requests parked on it fail.",
        durable=True,
    ),
    # -- topics, subscriptions and rules
    Operation("topic_create", EntityCreate, "Create a topic.", durable=True),
    Operation("topic_update", EntityCreate, "Change a topic's settings.", durable=True),
    Operation("topic_get", EntityRef, "A topic's settings and counts."),
    Operation("topic_list", NamespaceScope, "Every topic of a namespace."),
    Operation(
        "topic_delete",
        EntityRef,
        "Delete a topic and its subscriptions; requests parked on them fail.",
        durable=True,
    ),
    Operation(
        "subscription_create",
        SubscriptionCreate,
        "Create a subscription (with the default rule, which takes every message).",
        durable=True,
    ),
    Operation(
        "subscription_update",
        SubscriptionCreate,
        "Change a subscription's settings.",
        durable=True,
    ),
    Operation("subscription_get", SubscriptionRef, "A subscription's settings and counts."),
    Operation("subscription_list", TopicScope, "Every subscription of a topic."),
    Operation(
        "subscription_delete",
        SubscriptionRef,
        "Delete a subscription and its messages; requests parked on it fail.",
        durable=True,
    ),
    Operation(
        "rule_create",
        RuleCreate,
        "Add a rule (SQL, correlation, true or false filter; optional SQL action) to a "
        "subscription.",
        durable=True,
    ),
    Operation("rule_get", RuleRef, "A rule's filter and action."),
    Operation("rule_list", SubscriptionRef, "Every rule of a subscription."),
    Operation("rule_delete", RuleRef, "Delete a rule.", durable=True),
    # -- messages
    Operation(
        "send",
        SendEncoded,
        "Send a batch, stored atomically: its sequence numbers (or, with report, where a "
        "paired primary diverted it).",
        durable=True,
        wakes=_the_entity,
        sends=Send,
    ),
    Operation(
        "peek",
        Peek,
        "Browse messages without locking them, from a sequence number on.",
        reads=delivered,
    ),
    Operation(
        "receive",
        Receive,
        "Receive messages (peek-lock or receive-and-delete), waiting up to max_wait_ms "
        "for the first.",
        durable=_deletes,
        reads=delivered,
    ),
    Operation(
        "settle",
        Settle,
        "Complete, abandon, defer, dead-letter or renew the lock of locked messages: one "
        "result per lock token.",
        durable=True,
        wakes=_redelivered,
    ),
    Operation(
        "load_adopt",
        LoadAdopt,
        "Make staged batch files an entity's messages, atomically (spark-load).",
        durable=True,
        wakes=_the_entity,
    ),
    Operation("load_status", LoadRef, "Whether a load committed (with its result) or is unknown."),
    Operation(
        "receive_deferred",
        ReceiveDeferred,
        "Receive deferred messages by sequence number.",
        durable=_deletes,
        reads=delivered,
    ),
    Operation(
        "transact",
        TransactEncoded,
        "Commit sends and settlements on one entity at once, all or nothing.",
        durable=True,
        wakes=_transacted,
        sends=Transact,
    ),
    # -- sessions
    Operation(
        "session_accept",
        SessionAccept,
        "Lock a session (or the next one with messages, waiting up to max_wait_ms for one): "
        "its id, lock token and lock expiry.",
    ),
    Operation("session_renew", SessionToken, "Renew a session's lock."),
    Operation(
        "session_close",
        SessionToken,
        "Release a session's lock.",
        wakes=_the_entity,
    ),
    Operation("session_list", EntityPath, "The sessions of an entity that hold messages or state."),
    Operation("session_get_state", SessionRef, "A session's state.", reads=session_state),
    Operation(
        "session_set_state",
        SessionState,
        "Set (or, with none, clear) a session's state.",
        durable=True,
    ),
    # -- maintenance
    Operation(
        "cancel_scheduled",
        SequenceNumbers,
        "Cancel scheduled messages by sequence number.",
        durable=True,
    ),
    Operation(
        "delete_messages",
        DeleteMessages,
        "Delete the oldest unlocked messages (of a session, enqueued before an instant) "
        "without receiving them.",
        durable=True,
    ),
    Operation(
        "purge",
        EntityPath,
        "Delete every message of a queue, subscription or dead-letter queue.",
        durable=True,
    ),
    Operation(
        "dlq_resubmit",
        Resubmit,
        "Move dead-lettered messages back to their entity (or to another).",
        durable=True,
        wakes=_resubmitted,
    ),
    # -- faults (test tooling)
    Operation(
        "fault_add",
        FaultAdd,
        "Make a namespace's stores, an entity's or some partitions' unavailable or slow.",
        wakes=_faulted_namespace,
    ),
    Operation("fault_list", FaultList, "The faults of a namespace, or of every namespace."),
    Operation(
        "fault_clear",
        FaultClear,
        "Clear faults by id, or every fault of a namespace, or every fault.",
        wakes=_cleared_namespaces,
    ),
    # -- time travel (test tooling)
    Operation("clock_show", NamespaceRef, "A namespace's time and its offset from the clock."),
    Operation(
        "clock_advance",
        ClockAdvance,
        "Move a namespace's time forward; every timer up to the new time runs at once.",
        durable=True,
        wakes=_travelled,
    ),
    Operation(
        "clock_set",
        ClockSet,
        "Move a namespace's time forward to an instant (not before its time now).",
        durable=True,
        wakes=_travelled,
    ),
)

OPERATIONS: dict[str, Operation] = {op.name: op for op in _DECLARED}
# Each operation's arguments as the daemon decodes them.
OPS: dict[str, type[msgspec.Struct]] = {name: op.args for name, op in OPERATIONS.items()}

_arg_decoders = {name: msgspec.msgpack.Decoder(t) for name, t in OPS.items()}


def decode_args(req: Request) -> Any:
    """The op's typed arguments; raises BadRequest naming the op and the field."""
    if req.v != PROTOCOL_VERSION:
        raise BadRequest(f"protocol version {req.v} is not supported (daemon speaks 1)")
    decoder = _arg_decoders.get(req.op)
    if decoder is None:
        raise BadRequest(f"unknown operation {req.op!r}")
    try:
        return decoder.decode(req.args)
    except (msgspec.DecodeError, ValueError) as exc:
        raise BadRequest(f"bad arguments for {req.op}: {exc}") from None
    except RecursionError:
        raise BadRequest(f"bad arguments for {req.op}: nested too deeply") from None


def decode_request(body: bytes | memoryview) -> tuple[int, str, Any]:
    """Envelope and arguments at once (for tools and tests)."""
    req = decode_envelope(body)
    return req.id, req.op, decode_args(req)


# -- The reference ---------------------------------------------------------------------------


def _first_sentence(fn: Callable[..., Any]) -> str:
    doc = " ".join((fn.__doc__ or "").split())
    return doc.split(" (")[0].rstrip(".")


def reference() -> str:
    """The table as Markdown: one row per operation (``python -m sbctl.core.operations``)."""
    lines = [
        "# The Unix-socket protocol's operations",
        "",
        "Generated from `sbctl/core/operations.py` by `python -m sbctl.core.operations --write`;",
        "do not edit. Framing and envelopes: `sbctl/core/protocol.py`. *Durable*: answered once",
        "what the request wrote is on disk. *Wakes*: requests parked on what it writes are",
        "completed after it.",
        "",
        "| Operation | Arguments | Durable | Wakes | About |",
        "| --- | --- | --- | --- | --- |",
    ]
    for op in _DECLARED:
        fields = ", ".join(f"`{f}`" for f in op.args.__struct_fields__) or "none"
        if callable(op.durable):
            durable = _first_sentence(op.durable)
        else:
            durable = "yes" if op.durable else "no"
        wakes = "" if op.wakes is None else _first_sentence(op.wakes)
        lines.append(f"| `{op.name}` | {fields} | {durable} | {wakes} | {op.about} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    from pathlib import Path

    text = reference()
    if "--write" in argv:
        (Path(__file__).parent / "PROTOCOL.md").write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
