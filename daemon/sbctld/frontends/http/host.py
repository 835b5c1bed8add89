"""What the HTTP routes need of the front-end that serves them.

The management API (sbctld.frontends.http.management) and the REST data plane
(sbctld.frontends.http.dataplane) are called by the transport (sbctld.frontends.http.server)
and reach the service and the waiting receivers through the protocol here, which
:class:`~sbctld.frontends.http.server.HttpFrontend` satisfies. They never import the
transport: the imports run one way, server → routes → this module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sbctld.service import Service

# A parked receive's retry: ``attempt(final)`` answers and returns True, or returns False
# to keep waiting (``final``: time is up, answer whatever there is).
Attempt = Callable[[bool], bool]


class HttpHost(Protocol):
    """The HTTP front-end (sbctld.frontends.http.server.HttpFrontend)."""

    service: Service
    data_dir: Path

    def wait(self, key: tuple[str, str], attempt: Attempt, timeout_s: float) -> None: ...

    def wake(self, namespace: str, path: str) -> None: ...
