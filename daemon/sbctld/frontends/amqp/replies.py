"""Answers of the ``$cbs`` and ``$management`` nodes on the client's reply link.

A reply is a message like any other on a link we send on (AMQP 1.0 §2.6.7): it goes out
only while the client's link credit lasts (the rest waits, in order, for the client's next
flow, and a drain with nothing waiting uses the credit up), and it is settled or not as the
client's attach asked (snd-settle-mode: unsettled when the client declared ``unsettled``, as
Service Bus does; settled for ``settled`` and ``mixed``). An unsettled reply the client
settles in mode ``second`` (an unsettled disposition) is then settled by us
(daemon/README.md §29).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbctld.frontends.amqp.connection import Connection, Link

UNSETTLED = 0  # snd-settle-mode unsettled


class Replies:
    """The replies waiting for credit, per reply link of one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.waiting: dict[Link, deque[bytes]] = {}

    def send(self, link: Link, payload: bytes) -> None:
        """Send ``payload`` on ``link`` now if it has credit, else when it gets some."""
        queue = self.waiting.setdefault(link, deque())
        queue.append(payload)
        self.on_flow(link)

    def on_flow(self, link: Link) -> None:
        """The client granted credit (or drains): send what waits, as far as it goes."""
        queue = self.waiting.get(link)
        while queue and link.credit > 0 and not link.detached:
            tag = link.delivery_count.to_bytes(4, "big")
            settled = link.snd_settle_mode != UNSETTLED
            self.conn.transfer(link, tag, queue.popleft(), settled=settled)
        if queue is not None and not queue:
            del self.waiting[link]
        if link.drain and link.credit > 0 and not queue:
            self.conn.drained(link)

    def on_disposition(self, link: Link, ids: list[int], settled: bool, state: Any) -> None:
        """The client settled replies: in mode second (``settled`` false) we settle them."""
        if settled or not ids:
            return
        for delivery_id in ids:
            link.session.unsettled.pop(delivery_id, None)
        self.conn.disposition(link, ids[0], state, settled=True, last=ids[-1])

    def drop(self, link: Link) -> None:
        self.waiting.pop(link, None)
