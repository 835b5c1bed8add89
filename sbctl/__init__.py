"""sbctl: a local, durable emulator of Azure Service Bus.

The public Python surface: :class:`Client`, :class:`AsyncClient`, :class:`Message`,
:class:`ReceivedMessage`, :func:`ServiceBusMessage` and the error tree in
:mod:`sbctl.core.errors`. They are imported lazily so that ``sbctl --help`` does not pay for
the client's imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbctl.lazy import lazy_exports

if TYPE_CHECKING:
    from sbctl.client import AsyncClient, Client
    from sbctl.convert import ServiceBusMessage
    from sbctl.core.messages import ReceivedMessage
    from sbctl.core.records import Message

from sbctl.core import __version__

__all__ = [
    "AsyncClient",
    "Client",
    "Message",
    "ReceivedMessage",
    "ServiceBusMessage",
    "__version__",
]

_EXPORTS = {
    "AsyncClient": "sbctl.client",
    "Client": "sbctl.client",
    "Message": "sbctl.core.records",
    "ReceivedMessage": "sbctl.core.messages",
    "ServiceBusMessage": "sbctl.convert",
}


__getattr__ = lazy_exports("sbctl", _EXPORTS, globals())
