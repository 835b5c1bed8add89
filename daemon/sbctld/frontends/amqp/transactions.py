"""Local transactions through the coordinator link (AMQP 1.0 §4; used by .NET and Java).

``declare`` opens a transaction and answers ``declared{txn-id}``. Sends and settlements
whose delivery state is ``transactional-state{txn-id}`` are held, not applied; they are
answered with a transactional state carrying the outcome. ``discharge{txn-id,
fail=false}`` applies what the transaction holds, one all-or-nothing broker transaction
per entity (daemon/README.md §12), and is accepted once that is durable;
``fail=true``, an unknown id or a closed coordinator link drops it.

Differences from Azure: a transaction spanning several entities commits entity by
entity, so a failure on the second leaves the first committed (the rejection says so).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from sbctl.core.amqp import codec
from sbctl.core.amqp.types import Declare, Declared, Discharge, Error, Rejected, Symbol
from sbctl.core.errors import SbctlError
from sbctl.core.message_form import Sent
from sbctl.core.protocol import TransactEncoded, TxSettle

if TYPE_CHECKING:
    from sbctld.frontends.amqp.connection import Delivery, Link
    from sbctld.frontends.amqp.host import Host
    from sbctld.service import Step


class Transaction:
    __slots__ = ("by_entity", "later", "link")

    def __init__(self, link: Link) -> None:
        self.link = link  # the coordinator link that declared it
        self.by_entity: dict[str, tuple[list[Sent], list[TxSettle]]] = {}
        # $management writes held until the commit, applied after the entities' sends and
        # settlements (daemon/README.md §29.7): (operation, arguments)
        self.later: list[tuple[str, Any]] = []

    def entity(self, path: str) -> tuple[list[Sent], list[TxSettle]]:
        return self.by_entity.setdefault(path, ([], []))


class Coordinator:
    """The transactions of one connection."""

    def __init__(self, conn: Host) -> None:
        self.conn = conn
        self.open: dict[bytes, Transaction] = {}

    def get(self, txn_id: Any) -> Transaction:
        txn = self.open.get(bytes(txn_id or b""))
        if txn is None:
            raise SbctlError(f"unknown transaction {bytes(txn_id or b'').hex()}")
        return txn

    def on_transfer(self, link: Link, delivery: Delivery) -> None:
        body = codec.decode_message(delivery.payload).body
        if isinstance(body, Declare):
            txn_id = uuid.uuid4().bytes
            self.open[txn_id] = Transaction(link)
            self.conn.conn.disposition(link, delivery.id, Declared(txn_id))
        elif isinstance(body, Discharge):
            self.discharge(link, delivery, body)
        else:
            self._reject(link, delivery, "amqp:not-implemented", "expected declare or discharge")

    def _reject(self, link: Link, delivery: Delivery, condition: str, text: str) -> None:
        self.conn.conn.disposition(link, delivery.id, Rejected(Error(Symbol(condition), text)))

    def discharge(self, link: Link, delivery: Delivery, body: Any) -> None:
        txn = self.open.pop(bytes(body.txn_id or b""), None)
        if txn is None:
            self._reject(link, delivery, "amqp:transaction:unknown-id", "unknown transaction")
            return
        if body.fail:
            self.conn.conn.disposition(link, delivery.id, codec_accepted())
            return
        namespace = self.conn.namespace
        done: list[str] = []  # the entities committed
        applied = []  # [True] once every step ran (a later error: making it durable failed)

        def commit(step: Step) -> None:
            for path, (messages, settlements) in txn.by_entity.items():
                held: Any = messages  # stored as they are (sbctld.service.operations)
                step("transact", TransactEncoded(namespace, path, held, settlements))
                done.append(path)
            for name, args in txn.later:
                step(name, args)
            applied.append(True)

        def answer(result: Any) -> None:
            if self.conn.closed:
                return
            if isinstance(result, SbctlError):
                text = result.message
                if done and not applied:
                    text += f" (already committed on {', '.join(done)})"
                self._reject(link, delivery, "amqp:transaction:rollback", text)
            else:
                self.conn.conn.disposition(link, delivery.id, codec_accepted())
            self.conn.flush()

        self.conn.frontend.service.run_steps(commit, answer, sender=self.conn.sender)

    def drop_link(self, link: Link) -> None:
        """A coordinator link went away: roll back what it left open."""
        for txn_id in [k for k, txn in self.open.items() if txn.link is link]:
            del self.open[txn_id]


def codec_accepted() -> Any:
    from sbctl.core.amqp.types import Accepted

    return Accepted()
