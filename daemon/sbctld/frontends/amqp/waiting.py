"""The AMQP front-end's parked receiver links, as operations of the service's purgatory.

A receiver link with credit and no message waits as a :class:`LinkWatch` on its entity
(no time-out: it waits as long as it has credit). Any write to the entity, through any
front-end, retries it (sbctld.service.purgatory). (A next-available session receiver waits
in the service: a ``session_accept`` with a ``max_wait_ms``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sbctl.core.errors import SbctlError
from sbctld.frontends.amqp.connection import Link
from sbctld.service import DelayedOperation


class Owner(Protocol):
    """What a parked link needs of its connection (sbctld.frontends.amqp.server)."""

    closed: bool

    def pump(self, link: Link) -> None: ...

    def flush(self) -> None: ...


class LinkWatch(DelayedOperation):
    """A receiver link waiting for a message: retrying it pumps the link (which parks a new
    watch when there is still nothing)."""

    kind = "link"

    def __init__(self, owner: Owner, link: Link, forget: Callable[[Link], object]) -> None:
        super().__init__()
        self.owner = owner
        self.link = link
        self.forget = forget  # drops it from the front-end's table

    def alive(self) -> bool:
        return not self.owner.closed and not self.link.detached

    def try_complete(self) -> bool:
        self.forget(self.link)
        self.owner.pump(self.link)
        self.owner.flush()
        return True

    def on_fail(self, error: SbctlError) -> None:
        self.try_complete()  # the receive fails and detaches the link

    def on_cancel(self) -> None:
        self.forget(self.link)
