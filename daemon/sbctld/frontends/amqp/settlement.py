"""Settling received messages from AMQP dispositions.

A disposition settles a range ``first..last`` of deliveries with one outcome (AMQP 1.0
§2.7.6; a batching client completes a whole batch with one frame). Outside a transaction
the range becomes one ``settle`` operation of the service (one journal record per
partition, one group commit wait) and one answer per contiguous run of deliveries that
share a result, sent once the group commit holding the settlement is on disk
(daemon/README.md §3.4: a complete is acknowledged only when durable).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from sbctl.core import typed
from sbctl.core.amqp.types import (
    Accepted,
    Error,
    Modified,
    Rejected,
    Released,
    Symbol,
)
from sbctl.core.errors import SbctlError
from sbctl.core.protocol import Settle
from sbctld.frontends.amqp.errors import condition_of
from sbctld.results import SettleFailed

if TYPE_CHECKING:
    from sbctld.frontends.amqp.connection import Link
    from sbctld.frontends.amqp.host import Host, Receiving


def lock_tag(token: str) -> bytes:
    """A lock token (a UUID's text) as the delivery tag the SDKs read it from: the UUID's
    bytes in .NET order (``uuid.UUID(token).bytes_le``, without building the UUID)."""
    raw = bytes.fromhex(token.replace("-", ""))
    if len(raw) != 16:
        raise ValueError(f"not a lock token: {token!r}")
    return _GUID_LE.pack(*_GUID_BE.unpack(raw))


def lock_tags(tokens: list[str]) -> list[bytes]:
    """:func:`lock_tag` of each token (all converted at once)."""
    raw = bytes.fromhex("".join(tokens).replace("-", ""))
    if len(raw) != 16 * len(tokens):
        return [lock_tag(token) for token in tokens]  # (raises, naming the bad one)
    swapped = struct.pack(
        "<" + "IHH8s" * len(tokens), *struct.unpack(">" + "IHH8s" * len(tokens), raw)
    )
    return [swapped[i : i + 16] for i in range(0, len(swapped), 16)]


_GUID_BE = struct.Struct(">IHH8s")  # the first three fields big-endian as written...
_GUID_LE = struct.Struct("<IHH8s")  # ...and little-endian in .NET's byte order


def _str(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Settlement:
    """The broker operation an outcome asks for (§2.7.6 outcomes → complete, abandon,
    defer, dead-letter), with its properties to modify and dead-letter reason."""

    __slots__ = ("description", "error", "op", "pause", "props", "reason")

    def __init__(self, outcome: Any) -> None:
        self.op, self.props, self.reason, self.description = "abandon", None, None, None
        self.pause = False
        # A property to modify of a type sbctl cannot store refuses the settlement (the
        # disposition is answered rejected), not the connection.
        self.error: SbctlError | None = None
        raw: dict[Any, Any] = {}
        if isinstance(outcome, Accepted):
            self.op = "complete"
        elif isinstance(outcome, Modified):
            self.op = "defer" if outcome.undeliverable_here else "abandon"
            raw = dict(outcome.message_annotations or {})
        elif isinstance(outcome, Rejected):
            self.op = "dead-letter"
            err = outcome.error
            raw = dict(err.info or {}) if err is not None else {}
            self.reason = _str(raw.pop("DeadLetterReason", None))
            self.description = _str(raw.pop("DeadLetterErrorDescription", None))
        elif isinstance(outcome, Released):
            self.pause = True
        try:
            # typed values (an unsigned int, a timestamp, ...) stored as the management
            # path stores them (daemon/README.md §29)
            props = {str(k): typed.property_value(v, "property to modify") for k, v in raw.items()}
        except SbctlError as err:
            self.error, props = err, {}
        self.props = props or None


def settle_range(
    owner: Host,
    link: Link,
    state: Receiving,
    ids: list[int],
    settled: bool,
    outcome: Any,
    how: Settlement,
) -> None:
    """Settle the deliveries ``ids`` of ``link`` (not transactional) with ``outcome``, which
    asks for ``how`` (``Settlement(outcome)``): one ``settle`` operation for them all."""
    pop = state.deliveries.pop
    tokens = [(i, token) for i in ids if (token := pop(i, None)) is not None]
    if not tokens:
        return
    if how.pause:
        state.paused = True
    echo = type(outcome)() if outcome is not None else Accepted()

    def answer(results: Any) -> None:
        # settled: no one waits for the answer (the settlement is synced within the
        # group-commit window all the same)
        if settled or owner.closed:
            return
        if isinstance(results, SbctlError):
            errors = {delivery_id: results for delivery_id, _ in tokens}
        else:
            errors = {
                delivery_id: result.error
                for (delivery_id, _), result in zip(tokens, results, strict=True)
                if isinstance(result, SettleFailed)
            }
        answer_runs(owner, link, [d for d, _ in tokens], errors, echo)
        owner.flush_soon()

    if how.error is not None:
        answer(how.error)
        return
    settle = Settle(
        owner.namespace,
        state.entity,
        how.op,
        [token for _, token in tokens],
        how.props,
        how.reason,
        how.description,
    )
    owner.frontend.service.run("settle", settle, answer, sender=owner.sender)


def answer_runs(
    owner: Host, link: Link, ids: list[int], errors: dict[int, SbctlError], echo: Any
) -> None:
    """One disposition per run of consecutive delivery ids with the same answer (``ids``
    ascending, as a disposition's range gives them)."""
    if not errors and ids[-1] - ids[0] == len(ids) - 1:
        last = ids[-1]
        owner.conn.disposition(link, ids[0], echo, last=None if last == ids[0] else last)
        return  # (the usual: the whole range settled, one run)
    runs: list[tuple[int, int, Any]] = []
    for delivery_id in ids:
        failure = errors.get(delivery_id)
        if failure is not None:
            condition, text = condition_of(failure)
            reply: Any = Rejected(Error(Symbol(condition), text))
        else:
            reply = echo
        if runs and runs[-1][1] == delivery_id - 1 and runs[-1][2] is reply:
            runs[-1] = (runs[-1][0], delivery_id, reply)
        else:
            runs.append((delivery_id, delivery_id, reply))
    for first, last, reply in runs:
        owner.conn.disposition(link, first, reply, last=None if last == first else last)
