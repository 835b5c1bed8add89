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

if TYPE_CHECKING:
    from sbctld.broker import Broker
    from sbctld.frontends.amqp.connection import Connection
    from sbctld.pairing import SenderId
    from sbctld.service import Service

# A ``$management`` answer: status code, description, body, error condition.
Respond = Callable[[int, str, Any, "str | None"], None]


class Frontend(Protocol):
    """The AMQP front-end (sbctld.frontends.amqp.server.AmqpFrontend)."""

    service: Service

    def wake(self, namespace: str, path: str) -> None: ...


class Host(Protocol):
    """One AMQP connection (sbctld.frontends.amqp.server.AmqpConnection)."""

    namespace: str
    closed: bool
    sender: SenderId  # a paired primary's backlog key (Service.new_sender)

    @property
    def frontend(self) -> Frontend: ...

    @property
    def broker(self) -> Broker: ...

    @property
    def conn(self) -> Connection: ...

    def flush(self) -> None: ...

    def session_token(self, path: str, session_id: str | None) -> str: ...


class Receiving(Protocol):
    """A link the connection sends messages on (sbctld.frontends.amqp.server.ReceiveState)."""

    entity: str
    key: tuple[str, str] | None
    deliveries: dict[int, str]  # delivery id → lock token
    paused: bool


def ok_when_durable(conn: Host, respond: Respond, body: Any) -> None:
    """Answer 200 with ``body`` once the write before it is on disk (or the error)."""

    def done(error: SbctlError | None) -> None:
        if error is not None:
            condition, text = condition_of(error)
            respond(status_of(error), text, None, condition)
        else:
            respond(200, "OK", body, None)

    conn.frontend.service.after_durable(done)
