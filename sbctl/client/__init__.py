"""The Python client: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

Both build requests with the same I/O-free :class:`_Calls`, which builds each request from
its operation's declaration (:mod:`sbctl.core.operations`), and differ only in how they move
frames; their public method names mirror each other (``close``/``aclose``).
The CLI uses :class:`Client`; tests and scripts embed either::

    from sbctl import Client
    with Client() as sb:
        sb.queue_create("orders", enable_partitioning=True)
        sb.send("orders", [Message(body=b"hi", partition_key="customer-7")])
        for msg in sb.receive("orders", count=10):
            sb.complete("orders", [msg.lock_token])

Module map: :mod:`sbctl.client._calls` (the shared I/O-free part),
:mod:`sbctl.client._sync` (:class:`Client`), :mod:`sbctl.client._async`
(:class:`AsyncClient`). Import from here: ``from sbctl.client import Client``.

The names are imported on first use, so that ``Client`` (every CLI command) never imports
asyncio: importing :mod:`sbctl.client._sync` runs this file first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbctl.lazy import lazy_exports

if TYPE_CHECKING:
    from sbctl.client._async import AsyncClient
    from sbctl.client._calls import ADOPT_TIMEOUT, DEFAULT_NAMESPACE, Call, Transaction
    from sbctl.client._sync import Client

__all__ = ["ADOPT_TIMEOUT", "DEFAULT_NAMESPACE", "AsyncClient", "Call", "Client", "Transaction"]

_EXPORTS = {
    "ADOPT_TIMEOUT": "sbctl.client._calls",
    "DEFAULT_NAMESPACE": "sbctl.client._calls",
    "AsyncClient": "sbctl.client._async",
    "Call": "sbctl.client._calls",
    "Client": "sbctl.client._sync",
    "Transaction": "sbctl.client._calls",
}


__getattr__ = lazy_exports("sbctl.client", _EXPORTS, globals())
