"""The service layer: the broker API every front-end calls (sbctld.service.core).

Layers, outermost first: the entry point (sbctld.main) → front-ends (sbctld.frontends.*:
Unix socket, AMQP, HTTP) → this service → the domain (broker, queues, topics) → storage.
The service imports no front-end; a new front-end needs no change here. Front-ends import
only this package (:data:`SenderId` is the domain's name for a client connection, re-exported
so that they need not import the domain).
"""

from sbctld.pairing import SenderId
from sbctld.service.commit import Committer
from sbctld.service.core import Service, Step
from sbctld.service.operations import Reply, Request, replying
from sbctld.service.purgatory import DelayedOperation, Purgatory

__all__ = [
    "Committer",
    "DelayedOperation",
    "Purgatory",
    "Reply",
    "Request",
    "SenderId",
    "Service",
    "Step",
    "replying",
]
