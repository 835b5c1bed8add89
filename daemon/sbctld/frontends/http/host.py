"""What the HTTP routes need of the front-end that serves them.

The management API (sbctld.frontends.http.management) and the REST data plane
(sbctld.frontends.http.dataplane) are called by the transport (sbctld.frontends.http.server)
and reach the service through the protocol here, which
:class:`~sbctld.frontends.http.server.HttpFrontend` satisfies. They never import the
transport: the imports run one way, server → routes → this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sbctld.service import DelayedOperation, Service


class HttpHost(Protocol):
    """The HTTP front-end (sbctld.frontends.http.server.HttpFrontend)."""

    service: Service
    data_dir: Path
    waiting: set[DelayedOperation]  # its receives parked in the service (cancelled at stop)
