"""Incoming transfers to an entity and settlements of deliveries, acted on per read
(daemon/README.md §29.14).

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

Settlements the same way: a client that accepts each message with its own disposition
(pyamqp, the Python SDK's stack) has several arrive in one read; consecutive accepts on the
same link, all settled or all awaited, are one ``settle`` request
(sbctld.frontends.amqp.settlement.settle_range), and each delivery is still answered on its
own when the client waits for it. Transfers and settlements are acted on in the order they
came: either kind pending is done before the other is taken.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

from sbctl.core.amqp.types import Accepted
from sbctl.core.errors import SbctlError
from sbctl.core.protocol import SendEncoded
from sbctld.frontends.amqp.connection import Delivery, Link
from sbctld.service import SenderId, Service

log = logging.getLogger("sbctld")

# A transfer to store: (its link, the entity, the delivery, its messages).
PendingSend = tuple[Link, str, Delivery, list[Any]]
# A disposition to act on: (its link, the link's receive state, delivery ids, settled, its
# outcome, and the settlement that outcome asks for: read as it arrives, so that a peer's
# malformed outcome is refused where it was read).
PendingSettle = tuple[Link, Any, list[int], bool, Any, Any]
# The most messages one send request of coalesced transfers takes.
COALESCED_MESSAGES = 100


class Owner(Protocol):
    """What a connection gives :class:`Arrivals` (sbctld.frontends.amqp.server.AmqpConnection)."""

    namespace: str
    service: Service
    sender: SenderId

    def settle_sends(self, transfers: Sequence[tuple[Link, Delivery]], result: Any) -> None: ...

    def reject(self, link: Link, delivery: Delivery, condition: str, text: str) -> None: ...


class Arrivals:
    """The transfers and settlements of one read of ``owner``'s socket, waiting to be acted
    on; ``settle`` acts on one disposition's range (settlement.settle_range)."""

    def __init__(
        self, owner: Owner, settle: Callable[[Link, Any, list[int], bool, Any, Any], None]
    ):
        self.owner = owner
        self.settle = settle
        self.pending: list[PendingSend] = []
        self.settles: list[PendingSettle] = []

    def in_order(self) -> None:
        """Act on what is pending before anything else of the same read is (a flow, a
        management request, an attach or detach, a transactional settlement), so that
        whatever came after a transfer or a settlement sees it done."""
        if self.pending:
            self.store()
        if self.settles:
            self.settle_all()

    def send_later(self, pending: PendingSend) -> None:
        if self.settles:
            self.settle_all()
        self.pending.append(pending)

    def settle_later(self, pending: PendingSettle) -> None:
        if self.pending:
            self.store()
        self.settles.append(pending)

    def settle_all(self) -> None:
        """One settlement per run of accepts on the same link; any other outcome alone."""
        settles, self.settles = self.settles, []
        i = 0
        while i < len(settles):
            link, state, ids, settled, outcome, how = settles[i]
            j = i + 1
            if type(outcome) is Accepted:
                while (
                    j < len(settles)
                    and settles[j][0] is link
                    and settles[j][3] == settled
                    and type(settles[j][4]) is Accepted
                ):
                    j += 1
                if j > i + 1:  # (ascending, as one disposition's range is)
                    ids = sorted({d for one in settles[i:j] for d in one[2]})
            try:
                self.settle(link, state, ids, settled, outcome, how)
            except Exception:  # a bug, not the peer's error: the others are still made
                log.error("AMQP settlement failed:\n%s", traceback.format_exc())
            i = j

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
            answer = partial(owner.settle_sends, ((link, delivery),))
            owner.service.run("send", send, answer, sender=owner.sender)
            return

        def done(result: Any) -> None:
            if isinstance(result, SbctlError):
                for one in run:  # nothing of the run was stored: each on its own
                    self._store_run([one])
                return
            owner.settle_sends([(link, delivery) for link, _p, delivery, _m in run], result)

        batch = [m for _link, _path, _delivery, messages in run for m in messages]
        send = SendEncoded(owner.namespace, run[0][1], batch)
        owner.service.run("send", send, done, sender=owner.sender)
