"""The service layer: the broker API every front-end calls (sbctld.service.core).

Layers, outermost first: the entry point (sbctld.main) → front-ends (sbctld.frontends.*:
Unix socket, AMQP, HTTP) → this service → the domain (broker, queues, topics) → storage.
The service imports no front-end; a new front-end needs no change here.
"""

from sbctld.service.commit import Committer
from sbctld.service.core import OperationCall, Request, Service
from sbctld.service.purgatory import DelayedOperation, Purgatory

__all__ = [
    "Committer",
    "DelayedOperation",
    "OperationCall",
    "Purgatory",
    "Request",
    "Service",
]
