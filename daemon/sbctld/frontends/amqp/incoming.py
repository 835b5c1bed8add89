"""Incoming transfers to an entity, stored per read (daemon/README.md §29.14).

A client with many transfers in flight (the SDKs' senders, 100 at a time) has many of them
arrive in one read of the socket. Each used to be its own send request, its own segment
write and its own reply; now the transfers of one read that go to the same entity, in the
order they came, are one send request of up to :data:`COALESCED_MESSAGES` messages. Each
transfer is still answered on its own (its own disposition, once the request is durable),
and a run the service refuses (nothing of it is stored: a send is all or nothing) is sent
again transfer by transfer, so that each gets the answer it would have got alone: one bad
message never takes its neighbours down with it. Any other frame of the read (a flow, a
settlement, a management request, an attach or detach) stores what is pending first, so that
it sees the transfers that came before it.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable
from functools import partial
from typing import Any, Protocol

from sbctl.core.errors import SbctlError
from sbctl.core.protocol import SendEncoded
from sbctld.frontends.amqp.connection import Delivery, Link
from sbctld.service import SenderId, Service

log = logging.getLogger("sbctld")

# A transfer to store: (its link, the entity, the delivery, its messages).
PendingSend = tuple[Link, str, Delivery, list[Any]]
# The most messages one send request of coalesced transfers takes.
COALESCED_MESSAGES = 100


class Owner(Protocol):
    """What a connection gives :class:`Sends` (sbctld.frontends.amqp.server.AmqpConnection)."""

    namespace: str
    service: Service
    sender: SenderId

    def settle_send(self, link: Link, delivery: Delivery, result: Any) -> None: ...

    def reject(self, link: Link, delivery: Delivery, condition: str, text: str) -> None: ...

    def accept_sends(self, run: Iterable[tuple[Link, Delivery]]) -> None: ...


class Sends:
    """The transfers of one read of ``owner``'s socket, waiting to be stored."""

    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self.pending: list[PendingSend] = []

    def in_order(self) -> None:
        """Store what is pending before anything else of the same read is acted on (a
        flow, a settlement, a management request, an attach or detach), so that whatever
        came after a transfer sees it stored."""
        if self.pending:
            self.store()

    def store(self) -> None:
        """One send request per run of transfers to the same entity."""
        sends, self.pending = self.pending, []
        start = 0
        while start < len(sends):
            path = sends[start][1]
            end, size = start + 1, len(sends[start][3])
            while (
                end < len(sends)
                and sends[end][1] == path
                and size + len(sends[end][3]) <= COALESCED_MESSAGES
            ):
                size += len(sends[end][3])
                end += 1
            try:
                self._store_run(sends[start:end])
            except Exception:  # a bug, not the peer's error: those transfers fail alone
                log.error("AMQP transfer failed:\n%s", traceback.format_exc())
                for link, _path, delivery, _messages in sends[start:end]:
                    self.owner.reject(link, delivery, "amqp:internal-error", "internal error")
            start = end

    def _store_run(self, run: list[PendingSend]) -> None:
        owner = self.owner
        if len(run) == 1:
            link, path, delivery, messages = run[0]
            send = SendEncoded(owner.namespace, path, messages)  # stored as they are
            answer = partial(owner.settle_send, link, delivery)
            owner.service.run("send", send, answer, sender=owner.sender)
            return

        def done(result: Any) -> None:
            if isinstance(result, SbctlError):
                for one in run:  # nothing of the run was stored: each on its own
                    self._store_run([one])
                return
            owner.accept_sends((link, delivery) for link, _path, delivery, _messages in run)

        batch = [m for _link, _path, _delivery, messages in run for m in messages]
        send = SendEncoded(owner.namespace, run[0][1], batch)
        owner.service.run("send", send, done, sender=owner.sender)
