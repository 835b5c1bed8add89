"""What the AMQP request handlers need of the connection they arrive on.

The ``$management`` node (sbctld.frontends.amqp.management and .rules), settlement and
transactions are called by the transport (sbctld.frontends.amqp.server) and answer through
the connection that called them. They see that connection through the protocols here, which
:class:`~sbctld.frontends.amqp.server.AmqpConnection` satisfies, and never import the
transport: the imports run one way, server → handlers → this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from sbctl.core.errors import SbctlError
from sbctld.frontends.amqp.errors import condition_of, status_of
from sbctld.service import replying

if TYPE_CHECKING:
    from sbctld.frontends.amqp.connection import Connection
    from sbctld.service import SenderId, Service

# A ``$management`` answer: status code, description, body, error condition.
Respond = Callable[[int, str, Any, "str | None"], None]


class Frontend(Protocol):
    """The AMQP front-end (sbctld.frontends.amqp.server.AmqpFrontend)."""

    service: Service


class Host(Protocol):
    """One AMQP connection (sbctld.frontends.amqp.server.AmqpConnection)."""

    namespace: str
    closed: bool
    sender: SenderId  # a paired primary's backlog key (Service.new_sender)

    @property
    def frontend(self) -> Frontend: ...

    @property
    def conn(self) -> Connection: ...

    def flush(self) -> None: ...

    def flush_soon(self) -> None: ...

    def session_token(self, path: str, session_id: str | None) -> str: ...


class Receiving(Protocol):
    """A link the connection sends messages on (sbctld.frontends.amqp.server.ReceiveState)."""

    entity: str
    key: tuple[str, str] | None
    deliveries: dict[int, str]  # delivery id → lock token
    paused: bool


def run(conn: Host, name: str, args: Any, respond: Respond, ok: Callable[[Any], None]) -> None:
    """Run the declared operation ``name`` for a ``$management`` request: ``ok(result)``
    answers it (and may raise an SbctlError), an error is answered with its status and
    condition (:meth:`sbctld.service.Service.run`: durable, woken and delayed as declared)."""
    conn.frontend.service.run(name, args, answering(respond, ok), sender=conn.sender)


def answering(respond: Respond, ok: Callable[[Any], None]) -> Callable[[Any], None]:
    """The reply of a ``$management`` operation: ``ok(result)``, or the error answered."""

    def failed(err: SbctlError) -> None:
        condition, text = condition_of(err)
        respond(status_of(err), text, None, condition)

    return replying(ok, failed)
