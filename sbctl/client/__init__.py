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
"""

from __future__ import annotations

from sbctl.client._async import AsyncClient
from sbctl.client._calls import ADOPT_TIMEOUT, DEFAULT_NAMESPACE, Call, Transaction
from sbctl.client._sync import Client

__all__ = ["ADOPT_TIMEOUT", "DEFAULT_NAMESPACE", "AsyncClient", "Call", "Client", "Transaction"]
