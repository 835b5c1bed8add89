"""sbctl: a local, durable emulator of Azure Service Bus.

The public Python surface: :class:`Client`, :class:`AsyncClient`, :class:`Message`,
:class:`ReceivedMessage`, :func:`ServiceBusMessage` and the error tree in
:mod:`sbctl.core.errors`. They are imported lazily so that ``sbctl --help`` does not pay for
the client's imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sbctl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
