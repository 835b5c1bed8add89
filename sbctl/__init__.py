"""sbctl: a local, durable emulator of Azure Service Bus.

The public Python surface: :class:`Client`, :class:`AsyncClient`, :class:`Message`,
:class:`ReceivedMessage`, :func:`ServiceBusMessage` and the error tree in
:mod:`sbctl.errors`. They are imported lazily so that ``sbctl --help`` does not pay for
the client's imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sbctl.client import AsyncClient, Client
    from sbctl.codec import Message
    from sbctl.convert import ServiceBusMessage
    from sbctl.messages import ReceivedMessage

__version__ = "0.1.0"
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
    "Message": "sbctl.codec",
    "ReceivedMessage": "sbctl.messages",
    "ServiceBusMessage": "sbctl.convert",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sbctl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
