"""What the pairings (:mod:`sbctld.paired`) use of the broker: its state and two of its
concern objects, as protocols, so that they never import the broker that owns them.

Rule 1: public operations and state only, nothing private.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sbctl.core.message_form import Sendable
from sbctld.pairing import SenderId
from sbctld.results import QueueInfo

if TYPE_CHECKING:
    from sbctld.broker.namespace import Namespace
    from sbctld.clock import Clock
    from sbctld.faults import FaultRegistry
    from sbctld.queue import Queue
    from sbctld.storage.sync import Syncer


class PairingManagement(Protocol):
    """What the pairings use of the broker's management (its backlog queues)."""

    def queue_get(self, namespace: str, name: str) -> QueueInfo: ...

    def queue_create(self, namespace: str, name: str, options: dict[str, Any]) -> QueueInfo: ...


class PairingMessaging(Protocol):
    """What the pairings use of the broker's data plane: sends past the pairing."""

    def send(
        self,
        namespace: str,
        path: str,
        messages: Sequence[Sendable],
        sender: SenderId | None = None,
        *,
        direct: bool = False,
    ) -> list[int]: ...


class PairingHost(Protocol):
    """What the pairings use of the broker (:class:`sbctld.broker.Broker` is one): its
    state, and two of its concern objects, nothing private. The broker passes itself in;
    this module never imports it."""

    namespaces: dict[str, Namespace]  # read only: by key
    clock: Clock
    faults: FaultRegistry
    syncer: Syncer
    report: Callable[[str], None]

    @property
    def management(self) -> PairingManagement: ...

    @property
    def messaging(self) -> PairingMessaging: ...

    def namespace(self, name: str) -> Namespace: ...

    def now_in(self, ns_key: str) -> int: ...

    def resolve(self, namespace: str, path: str) -> tuple[Queue, str]: ...

    def wake(self, key: tuple[str, str]) -> None: ...
