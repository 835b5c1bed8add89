"""Paired namespaces applied to the broker (daemon/README.md §0.3, §0.4.5, §19).

:class:`PairedNamespaces` plays the legacy SDK's paired MessagingFactory for every send
that reaches a primary namespace: it routes the send through the primary's
:class:`~sbctld.pairing.Pairing` (failover to the secondary's backlog queues), pings failed
over entities, runs the syphon, faults a pairing whose other side is gone, and persists
the pairing in the primary's folder::

    <data>/namespaces/<primary>/pairing.toml     options, counters, fault (pairing.PairRecord)
    <data>/namespaces/<primary>/syphon.ledger    the syphon's last round (see below)

Unpaired namespaces never reach this module: the broker checks one dict first.

The syphon moves each message exactly once, even across a crash. A move is two writes in
two stores: the copy appended to the primary entity, then the backlog message completed.
Before a round, the ledger names the round's backlog messages and the next sequence number
of every partition of their destinations, durably. After a crash, a ledger entry whose
backlog message is still there is looked up in its destination from those marks on: found
(byte for byte, as :func:`~sbctld.pairing.restore_message` rebuilds it), the backlog
message is completed; not found, it is moved again. A round starts only once the previous
round's writes are durable, so one ledger (the last round's) is all recovery needs.
"""

from __future__ import annotations

import json
import random
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import tomli_w

from sbctl.core import layout, send_rules
from sbctl.core.errors import (
    BadRequest,
    MessageSizeExceeded,
    MessagingEntityAlreadyExists,
    MessagingEntityDisabled,
    MessagingEntityNotFound,
    QuotaExceeded,
    SbctlError,
    ServerBusy,
    ServiceCommunicationProblem,
)
from sbctl.core.message_form import Sendable, intake_batch
from sbctl.core.message_form import decode as decode_message
from sbctl.core.message_form import encode as encode_message
from sbctl.core.names import entity_key
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message
from sbctld.config import MB, NOT_ON_BASIC
from sbctld.credits import DATA_COST, MANAGEMENT_COST
from sbctld.paired_host import PairingHost
from sbctld.pairing import (
    BACKLOG_QUEUE_OPTIONS,
    FAILOVER_PROPERTIES,
    KEEPS_ROTATION,
    SYPHON_RETRY_MS,
    EntityState,
    Pairing,
    PairOptions,
    PairRecord,
    SenderId,
    backlog_name,
    check_options,
    counts_for_failover,
    divert_message,
    restore_message,
)
from sbctld.queue_state import DEAD_LETTER_DESCRIPTION, DEAD_LETTER_REASON
from sbctld.results import BacklogQueue, PairingStatus
from sbctld.storage.files import exists_verified, read_verified, remove_verified, write_atomic
from sbctld.storage.log import State
from sbctld.topic import Subscription

if TYPE_CHECKING:
    from sbctld.broker.namespace import Namespace
    from sbctld.partition import Partition
    from sbctld.queue import Queue

SAVE_EVERY_MS = 1000  # counters reach pairing.toml at most this late
SYPHON_BATCH = 200  # messages the syphon moves per tick, over every pairing
SYPHON_SCAN = 1000  # backlog messages it may look at per tick
SYPHON_POLL_MS = 15 * 60_000  # daemon/README.md §0.3.5: one 15-minute long-poll receive per queue
PING_BYTES = 64  # what an empty ping message adds to a store (for its quota check)
# Why a backlog message can never reach its destination: the syphon dead-letters it in
# the backlog queue (with this reason) instead of trying again forever.
UNDELIVERABLE = frozenset(
    {"MessagingEntityNotFound", "BadRequest", "InvalidOperation", "MessageSizeExceeded"}
)
NOT_SENDING = ("Disabled", "SendDisabled")
NOT_RECEIVING = ("Disabled", "ReceiveDisabled")


class _Pick(msgspec.Struct):
    """One backlog message the syphon moves this round."""

    queue: int  # backlog queue index
    partition: int
    seq: int
    path: str  # its destination (x-ms-path)
    message: Message  # as restored


class PairedNamespaces:
    """Every pairing of the daemon, by primary namespace key (``by_primary``, which the
    broker checks on each send)."""

    def __init__(self, broker: PairingHost, rng: random.Random | None = None) -> None:
        self.broker = broker
        self.rng = rng or random.Random()
        self.by_primary: dict[str, Pairing] = {}
        self._saved_at = 0
        self._ledgers: set[str] = set()  # primaries whose last syphon round may be unsynced

    # ------------------------------------------------------------ persistence

    def _folder(self, pairing: Pairing) -> Path | None:
        ns = self.broker.namespaces.get(entity_key(pairing.primary))
        return None if ns is None else ns.directory

    def load(self) -> None:
        """Reload every pairing, then finish the syphon rounds a crash interrupted."""
        for key, ns in self.broker.namespaces.items():
            path = layout.pairing_file(ns.directory)
            if not exists_verified(path):
                continue
            data = tomllib.loads(read_verified(path).decode())
            record = msgspec.convert(data, PairRecord)
            self.by_primary[key] = Pairing(record, random.Random(self.rng.getrandbits(64)))
        for key, pairing in self.by_primary.items():
            self._recover(key, pairing)

    def _save(self, pairing: Pairing) -> None:
        folder = self._folder(pairing)
        if folder is None:
            return
        data = _drop_none(msgspec.to_builtins(pairing.record()))
        write_atomic(layout.pairing_file(folder), tomli_w.dumps(data).encode())
        pairing.dirty = False

    def save_all(self) -> None:
        for pairing in self.by_primary.values():
            if pairing.dirty:
                self._save(pairing)

    def close(self) -> None:
        self.save_all()
        for key in list(self._ledgers):
            self._settle_ledger(key)

    # ------------------------------------------------------------ management

    def pair(
        self,
        primary: str,
        secondary: str,
        backlog_queue_count: int,
        failover_interval_ms: int,
        ping_primary_interval_ms: int,
        enable_syphon: bool,
    ) -> PairingStatus:
        """Pair ``primary`` with ``secondary`` (MessagingFactory.PairNamespaceAsync):
        create the backlog queues that are missing, then route the primary's sends."""
        broker = self.broker
        p_ns = broker.namespace(primary)
        s_ns = broker.namespace(secondary)
        options = PairOptions(
            primary=p_ns.name,
            secondary=s_ns.name,
            backlog_queue_count=backlog_queue_count,
            failover_interval_ms=failover_interval_ms,
            ping_primary_interval_ms=ping_primary_interval_ms,
            enable_syphon=enable_syphon,
            paired_at_ms=broker.now_in(entity_key(p_ns.name)),
        )
        check_options(options)
        down = broker.faults.namespace_down(entity_key(s_ns.name))
        if down is not None:  # daemon/README.md §0.3.6: it would fault the pairing at once
            raise ServiceCommunicationProblem(
                f"the stores of secondary namespace {s_ns.name!r} are unavailable "
                f"(injected fault {down.id})"
            )
        key = entity_key(p_ns.name)
        existing = self.by_primary.get(key)
        if existing is not None:
            raise MessagingEntityAlreadyExists(
                f"namespace {p_ns.name!r} is already paired with {existing.secondary!r}: "
                f"unpair it first (sbctl namespace unpair {p_ns.name})"
            )
        self._backlog_queues(options, s_ns)
        pairing = Pairing(PairRecord(options=options), random.Random(self.rng.getrandbits(64)))
        self.by_primary[key] = pairing
        self._save(pairing)
        broker.report(f"paired namespace {p_ns.name} with {s_ns.name}")
        return self.status(p_ns.name)

    def _backlog_queues(self, options: PairOptions, s_ns: Namespace) -> None:
        """daemon/README.md §0.3.1: each missing backlog queue is created; an existing one is used
        as
        it is (its reading is charged like a management read), extra ones are left alone."""
        wanted = dict(BACKLOG_QUEUE_OPTIONS)
        if s_ns.config.sku == "basic":
            for name in NOT_ON_BASIC:  # daemon/README.md §15.1: Basic keeps its own TTL rules
                wanted.pop(name, None)
        # All or nothing: the secondary's credits must cover every create and read first.
        now = self.broker.now_in(entity_key(s_ns.name))
        s_ns.meter.check(MANAGEMENT_COST * options.backlog_queue_count, now)
        for i in range(options.backlog_queue_count):
            name = backlog_name(options.primary, i)
            if entity_key(name) in s_ns.queues:
                self.broker.management.queue_get(s_ns.name, name)
            else:
                self.broker.management.queue_create(s_ns.name, name, wanted)

    def unpair(self, primary: str) -> dict[str, Any]:
        """Stop routing the primary's sends. The backlog queues and whatever they hold
        stay in the secondary (pair again with the syphon to bring it back)."""
        ns = self.broker.namespace(primary)
        pairing = self._pairing(ns.name)
        pending = self._pending(pairing)
        del self.by_primary[entity_key(ns.name)]
        self._drop_ledger(pairing)
        remove_verified(layout.pairing_file(ns.directory))
        self.broker.report(f"unpaired namespace {pairing.primary} from {pairing.secondary}")
        return {
            "unpaired": pairing.primary,
            "secondary": pairing.secondary,
            "pending": sum(n for n in pending.values() if n is not None),
        }

    def _pairing(self, primary: str) -> Pairing:
        self.broker.namespace(primary)  # an unknown namespace is not found, not "not paired"
        pairing = self.by_primary.get(entity_key(primary))
        if pairing is None:
            raise MessagingEntityNotFound(f"namespace {primary!r} is not paired")
        return pairing

    def namespace_deleted(self, ns_key: str, now: int) -> None:
        """daemon/README.md §0.3.6: deleting the primary takes its pairing with it; deleting the
        secondary faults the pairings it served."""
        gone = self.by_primary.pop(ns_key, None)
        if gone is not None:
            self._ledgers.discard(ns_key)
            self.broker.report(f"pairing of {gone.primary} with {gone.secondary} deleted with it")
        for pairing in self.by_primary.values():
            if entity_key(pairing.secondary) == ns_key:
                self._fault(pairing, f"secondary namespace {pairing.secondary!r} was deleted", now)

    def _fault(self, pairing: Pairing, reason: str, now: int) -> None:
        if pairing.faulted is None:
            pairing.fault(reason, now)
            self._save(pairing)
            self.broker.report(f"pairing of {pairing.primary} faulted: {reason}")

    # ------------------------------------------------------------ status

    def status(self, primary: str) -> PairingStatus:
        pairing = self._pairing(primary)
        opts = pairing.options
        c = pairing.counters
        pending = self._pending(pairing)
        s_ns = self.broker.namespaces.get(entity_key(pairing.secondary))
        queues = []
        unknown = False
        for i in range(opts.backlog_queue_count):
            name = backlog_name(opts.primary, i)
            queue = s_ns.queues.get(entity_key(name)) if s_ns else None
            unknown = unknown or (queue is not None and pending[i] is None)
            queues.append(
                BacklogQueue(
                    name=name,
                    status="Missing" if queue is None else queue.config.status,
                    in_rotation=i in pairing.rotation,
                    pending=pending[i],
                )
            )
        return PairingStatus(
            primary=opts.primary,
            secondary=opts.secondary,
            state=pairing.state,
            fault_reason=pairing.faulted,
            faulted_at_ms=pairing.faulted_at_ms,
            backlog_queue_count=opts.backlog_queue_count,
            failover_interval_ms=opts.failover_interval_ms,
            ping_primary_interval_ms=opts.ping_primary_interval_ms,
            enable_syphon=opts.enable_syphon,
            paired_at_ms=opts.paired_at_ms,
            entities=pairing.describe_entities(),
            backlog_queues=queues,
            # None when a backlog queue's stores are down: its messages are not counted.
            pending=None if unknown else sum(n for n in pending.values() if n is not None),
            diverted=c.diverted,
            moved=c.moved,
            dead_lettered=c.dead_lettered,
            pings_sent=c.pings_sent,
            pings_failed=c.pings_failed,
            failovers=c.failovers,
            rotation_removals=c.rotation_removals,
            last_error=c.last_error,
            last_error_at_ms=c.last_error_at_ms,
        )

    def _pending(self, pairing: Pairing) -> dict[int, int | None]:
        """Messages waiting in each backlog queue (None: the queue is missing, or some of
        its stores are down so the count is not known)."""
        s_ns = self.broker.namespaces.get(entity_key(pairing.secondary))
        out: dict[int, int | None] = {}
        for i in range(pairing.options.backlog_queue_count):
            queue = s_ns.queues.get(entity_key(backlog_name(pairing.primary, i))) if s_ns else None
            if queue is None or queue.availability_status != "Available":
                out[i] = None
            else:
                out[i] = queue.counts()["active_message_count"]
        return out

    # ------------------------------------------------------------ sending (daemon/README.md
    # §0.3.2-3)

    def send(
        self,
        pairing: Pairing,
        namespace: str,
        path: str,
        messages: Sequence[Sendable],
        sender: SenderId | None,
    ) -> list[int]:
        """A send to the primary: to the primary while the entity is healthy, to a
        backlog queue once it failed over."""
        broker = self.broker
        if pairing.faulted is not None:
            # daemon/README.md §0.3.6: a faulted messaging factory refuses every send.
            raise ServiceCommunicationProblem(
                f"the pairing of namespace {pairing.primary!r} with {pairing.secondary!r} "
                f"is faulted ({pairing.faulted}): unpair it to send to {pairing.primary!r} "
                "again"
            )
        # What the caller got wrong (no such entity, a bad path) fails as unpaired.
        entity, subqueue = broker.resolve(namespace, path)
        key = entity.key[1]
        now = broker.now_in(entity.key[0])
        st = pairing.failed_over(key)
        if st is None:
            try:
                seqs = broker.messaging.send(namespace, path, messages, direct=True)
            except SbctlError as err:
                if subqueue or not counts_for_failover(err):
                    raise
                st = pairing.send_failed(key, path, err, now)
                if st is None:
                    raise  # daemon/README.md §0.3.2: before FailoverInterval the caller sees it
                broker.report(
                    f"pairing {pairing.primary}: {path} failed over to {pairing.secondary} "
                    f"({err.message})"
                )
            else:
                pairing.send_succeeded(key)
                return seqs
        if subqueue or isinstance(entity, Subscription):
            # the broker's own send names the mistake
            return broker.messaging.send(namespace, path, messages, direct=True)
        return self._divert(pairing, st, entity, path, messages, sender, now)

    def backlog_of(self, namespace: str, path: str, sender: SenderId | None) -> str | None:
        """The backlog queue that takes ``sender``'s sends to ``path`` while the entity is
        failed over, or None. After a send answered with zeros (diverted), it names the
        queue that took them: sbctl send reports it."""
        pairing = self.by_primary.get(entity_key(namespace))
        if pairing is None:
            return None
        entity, _ = self.broker.resolve(namespace, path)
        st = pairing.failed_over(entity.key[1])
        index = None if st is None else st.senders.get(sender)
        return None if index is None else backlog_name(pairing.primary, index)

    def _divert(
        self,
        pairing: Pairing,
        st: EntityState,
        entity: Queue,
        path: str,
        messages: Sequence[Sendable],
        sender: SenderId | None,
        now: int,
    ) -> list[int]:
        decoded, payloads = intake_batch(messages)
        if not decoded:
            raise BadRequest("a send needs at least one message")
        for m, payload in zip(decoded, payloads, strict=True):
            _check_for_primary(entity, m, len(payload))
        copies = [divert_message(m, path) for m in decoded]
        while True:
            index = pairing.backlog_for(st, sender)
            name = backlog_name(pairing.primary, index)
            try:
                seqs = self.broker.messaging.send(pairing.secondary, name, copies, direct=True)
            except MessageSizeExceeded as err:
                # daemon/README.md §0.3.3: the added properties can push a message over the limit.
                raise MessageSizeExceeded(
                    f"{err.message} once failover added its properties "
                    f"({', '.join(FAILOVER_PROPERTIES)})"
                ) from None
            except SbctlError as err:
                if err.code in KEEPS_ROTATION:
                    raise
                if pairing.leave_rotation(index, err, now):
                    self.broker.report(
                        f"pairing {pairing.primary}: backlog queue {name} left the rotation "
                        f"({err.message})"
                    )
                    continue
                raise ServiceCommunicationProblem(
                    f"no backlog queue of namespace {pairing.secondary!r} took the message; "
                    f"the last one ({name}) failed: {err.message}"
                ) from None
            pairing.diverted(st, len(copies))
            backlog = self.broker.namespaces[entity_key(pairing.secondary)].queues.get(
                entity_key(name)
            )
            if backlog is not None:
                self.broker.wake(backlog.key)  # its receivers are woken
            # The numbers are the backlog queue's, meaningless in the primary (a schedule's
            # number there would cancel someone else's message): 0, which names nothing.
            return [0] * len(seqs)

    # ------------------------------------------------------------ time

    def tick(self, clock_now: int) -> list[tuple[str, str]]:
        """Propagate faults, ping, syphon, persist counters; returns the keys of entities
        the syphon filled (their receivers are woken). A pairing runs on its primary's time
        (daemon/README.md §31)."""
        woke: list[tuple[str, str]] = []
        faults = self.broker.faults
        for key in list(self._ledgers):
            self._settle_ledger(key)  # the last round's writes are durable from here on
        budget = SYPHON_BATCH
        for pairing in list(self.by_primary.values()):
            if pairing.faulted is not None:
                continue
            now = self.broker.now_in(entity_key(pairing.primary))
            s_key = entity_key(pairing.secondary)
            down = faults.namespace_down(s_key) if faults.faults else None
            if s_key not in self.broker.namespaces:
                self._fault(pairing, f"secondary namespace {pairing.secondary!r} was deleted", now)
                continue
            if down is not None:
                # daemon/README.md §0.3.6: the secondary's factory faulted; the primary's follows.
                self._fault(
                    pairing,
                    f"secondary namespace {pairing.secondary!r} faulted "
                    f"(injected fault {down.id}: every store unavailable)",
                    now,
                )
                continue
            for key, st in pairing.pings_due(now):
                self._ping(pairing, key, st, now)
            if pairing.options.enable_syphon and budget > 0 and now >= pairing.syphon_next_ms:
                try:
                    budget -= self._syphon(pairing, now, budget, woke)
                except OSError as exc:  # the ledger could not be written: try again later
                    pairing.syphon_next_ms = now + SYPHON_RETRY_MS
                    pairing.note_error(f"syphon: {exc}", now)
                    self.broker.report(f"pairing {pairing.primary}: syphon: {exc}")
        if clock_now - self._saved_at >= SAVE_EVERY_MS:
            self._saved_at = clock_now
            self.save_all()
        return woke

    def _ping(self, pairing: Pairing, key: str, st: EntityState, now: int) -> None:
        """daemon/README.md §0.3.4: an empty message (ContentType application/vnd.ms-servicebus-
        ping,
        TTL 1 s, a random SessionId) to the primary entity, charged like a send. A ping is
        never stored, so no receiver or peek can ever see one: it runs the checks a send
        of it would (entity status, the store its SessionId picks, the entity's quota)."""
        ns = self.broker.namespaces.get(entity_key(pairing.primary))
        entity = None if ns is None else ns.queues.get(key) or ns.topics.get(key)
        if ns is None or entity is None:
            # Nothing left to fail over for: sends to it fail as unpaired ones do.
            pairing.back_to_primary(key, now)
            return
        try:
            ns.meter.charge("data", DATA_COST, now)
        except (ServerBusy, QuotaExceeded):
            pairing.ping_throttled(st, now)  # daemon/README.md §0.3.2: throttling is no failure
            return
        session_id = f"{pairing.rng.getrandbits(128):032x}"
        try:
            _probe(entity, session_id)
        except SbctlError as err:
            pairing.ping_failed(st, err, now)
            return
        pairing.ping_succeeded(key, now)
        self.broker.report(f"pairing {pairing.primary}: {st.path} is back on the primary")

    # ------------------------------------------------------------ the syphon (daemon/README.md
    # §0.3.5)

    def _syphon(self, pairing: Pairing, now: int, budget: int, woke: list[tuple[str, str]]) -> int:
        """One bounded round; returns how many messages it took out of backlog queues."""
        broker = self.broker
        p_key = entity_key(pairing.primary)
        s_ns = broker.namespaces.get(entity_key(pairing.secondary))
        if s_ns is None or p_key not in broker.namespaces:
            return 0
        self._poll(pairing, s_ns, now)
        picks, idle = self._pick(pairing, s_ns, now, budget)
        if not picks:
            if idle:
                pairing.syphon_next_ms = now + SYPHON_RETRY_MS  # nothing movable: wait
            return 0
        try:
            s_ns.meter.check(DATA_COST * len(picks), now)  # receiving them from the backlog
        except (ServerBusy, QuotaExceeded):
            pairing.syphon_next_ms = now + SYPHON_RETRY_MS
            return 0
        self._write_ledger(p_key, pairing, picks)
        taken = 0
        for pick in picks:
            queue = s_ns.queues.get(entity_key(backlog_name(pairing.primary, pick.queue)))
            if queue is None:
                continue
            p = queue.partitions[pick.partition]
            if p.state_of(pick.seq) != State.ACTIVE or pick.seq in p.locks:
                continue
            target_key = entity_key(pick.path)
            if now < pairing.syphon_blocked.get(target_key, 0):
                continue
            try:
                broker.messaging.send(pairing.primary, pick.path, [pick.message], direct=True)
            except SbctlError as err:
                if err.code in UNDELIVERABLE:
                    self._dead_letter(pairing, p, pick.seq, err.code, err.message, now)
                    s_ns.meter.record("data", DATA_COST, now)
                    taken += 1
                else:  # the primary is not reachable yet: this destination waits
                    pairing.syphon_blocked[target_key] = now + SYPHON_RETRY_MS
                    pairing.note_error(f"syphon to {pick.path}: {err.message}", now)
                continue
            p.set_state(pick.seq, State.GONE)
            s_ns.meter.record("data", DATA_COST, now)
            pairing.counters.moved += 1
            pairing.dirty = True
            taken += 1
            entity = broker.namespaces[p_key].queues.get(target_key)
            if entity is not None:
                woke.append(entity.key)  # (a topic's subscriptions are woken by its send)
        return taken

    def _poll(self, pairing: Pairing, s_ns: Namespace, now: int) -> None:
        """The syphon's idle cost: a 15-minute long-poll receive per backlog queue
        (daemon/README.md §0.3.5: 40 receives an hour with 10 queues), charged to the secondary."""
        if now < pairing.syphon_poll_ms:
            return
        try:
            s_ns.meter.charge("data", DATA_COST * pairing.options.backlog_queue_count, now)
        except (ServerBusy, QuotaExceeded):
            return
        pairing.syphon_poll_ms = now + SYPHON_POLL_MS

    def _pick(
        self, pairing: Pairing, s_ns: Namespace, now: int, budget: int
    ) -> tuple[list[_Pick], bool]:
        """Up to ``budget`` movable backlog messages, scanning on from where the last round
        stopped (so messages that must wait never hide the others); also whether this was
        a whole pass that found nothing to move."""
        picks: list[_Pick] = []
        scanned = 0
        start_q, start_pid, start_seq = pairing.syphon_resume
        whole_pass = pairing.syphon_resume == (0, 0, 0)
        for i in range(start_q, pairing.options.backlog_queue_count):
            queue = s_ns.queues.get(entity_key(backlog_name(pairing.primary, i)))
            if queue is None or queue.config.status in NOT_RECEIVING:
                continue
            for p in queue.partitions:
                first = i == start_q and p.id == start_pid
                if (i == start_q and p.id < start_pid) or (p.fault is not None and p.fault.down):
                    continue  # daemon/README.md §0.1.6: the available partitions answer
                for seq in p.seqs_in(State.ACTIVE, start_seq if first and start_seq else None):
                    if scanned >= SYPHON_SCAN or len(picks) >= budget:
                        pairing.syphon_resume = (i, p.id, seq)
                        return picks, False
                    scanned += 1
                    if seq in p.locks:
                        continue  # someone is reading the backlog queue
                    pick = self._restore(pairing, p, i, seq, now)
                    if pick is None:
                        continue
                    target_key = entity_key(pick.path)
                    if pairing.failed_over(target_key) or now < pairing.syphon_blocked.get(
                        target_key, 0
                    ):
                        continue  # daemon/README.md §0.3.5: only once the primary is reachable
                    picks.append(pick)
        pairing.syphon_resume = (0, 0, 0)
        return picks, whole_pass and not picks

    def _restore(
        self, pairing: Pairing, p: Partition, index: int, seq: int, now: int
    ) -> _Pick | None:
        try:
            m = decode_message(p.read_payload(seq))
            path, restored = restore_message(m)
        except (msgspec.DecodeError, ValueError) as exc:
            self._dead_letter(pairing, p, seq, "InvalidBacklogMessage", str(exc), now)
            return None
        return _Pick(index, p.id, seq, path, restored)

    def _dead_letter(
        self, pairing: Pairing, p: Partition, seq: int, reason: str, why: str, now: int
    ) -> None:
        """A backlog message that can never reach its destination stays in the backlog
        queue's dead-letter queue, for its owner to look at."""
        p.set_state(
            seq,
            State.DEADLETTERED,
            {DEAD_LETTER_REASON: reason, DEAD_LETTER_DESCRIPTION: f"syphon: {why}"},
        )
        p.give_back(seq)
        pairing.counters.dead_lettered += 1
        pairing.note_error(f"syphon dead-lettered a backlog message: {why}", now)

    # ------------------------------------------------------------ the ledger

    def _write_ledger(self, p_key: str, pairing: Pairing, picks: list[_Pick]) -> None:
        """Name this round's moves and where their copies can land, durably, before any
        of them is made (module docstring)."""
        broker = self.broker
        marks: dict[str, list[int]] = {}
        for pick in picks:
            target_key = entity_key(pick.path)
            if target_key in marks:
                continue
            try:
                entity, _sub = broker.resolve(pairing.primary, pick.path)
            except SbctlError:
                continue  # the send will say why (and the message is dead-lettered)
            marks[target_key] = [p.next_seq for p in entity.partitions]
        data = {
            "moves": [[pk.queue, pk.partition, pk.seq] for pk in picks],
            "marks": marks,
        }
        folder = broker.namespaces[p_key].directory
        write_atomic(
            layout.ledger_file(folder), json.dumps(data).encode(), durable=broker.syncer.durable
        )
        self._ledgers.add(p_key)

    def _settle_ledger(self, p_key: str) -> None:
        """The last round is over: once its writes are durable, its ledger is not needed."""
        self.broker.syncer.sync_now()
        self._ledgers.discard(p_key)
        ns = self.broker.namespaces.get(p_key)
        if ns is not None:
            remove_verified(layout.ledger_file(ns.directory))

    def _drop_ledger(self, pairing: Pairing) -> None:
        key = entity_key(pairing.primary)
        if key in self._ledgers:
            self._settle_ledger(key)

    def _recover(self, p_key: str, pairing: Pairing) -> None:
        """Finish a round a crash interrupted (module docstring)."""
        broker = self.broker
        p_ns = broker.namespaces[p_key]
        path = layout.ledger_file(p_ns.directory)
        if not exists_verified(path):
            return
        try:
            data = json.loads(read_verified(path))
            moves = [(int(q), int(pid), int(seq)) for q, pid, seq in data["moves"]]
            marks = {str(k): [int(n) for n in v] for k, v in data["marks"].items()}
        except (ValueError, KeyError, TypeError) as exc:
            broker.report(
                f"recovery: pairing {pairing.primary}: unreadable {layout.LEDGER_FILE}: {exc}"
            )
            moves, marks = [], {}
        s_ns = broker.namespaces.get(entity_key(pairing.secondary))
        finished = 0
        for index, pid, seq in moves:
            queue = (
                None
                if s_ns is None
                else s_ns.queues.get(entity_key(backlog_name(pairing.primary, index)))
            )
            if queue is None or not 0 <= pid < len(queue.partitions):
                continue
            p = queue.partitions[pid]
            if p.state_of(seq) != State.ACTIVE:
                continue  # moved (or dead-lettered) before the crash, durably
            try:
                target_path, restored = restore_message(decode_message(p.read_payload(seq)))
            except (msgspec.DecodeError, ValueError):
                continue
            target = p_ns.queues.get(entity_key(target_path)) or p_ns.topics.get(
                entity_key(target_path)
            )
            mark = marks.get(entity_key(target_path))
            if target is None or mark is None:
                continue
            if _landed(target, mark, encode_message(restored)):
                p.set_state(seq, State.GONE)  # its copy is in the primary: done
                pairing.counters.moved += 1
                finished += 1
        if finished:
            pairing.dirty = True
            broker.report(
                f"recovery: pairing {pairing.primary}: {finished} syphoned message(s) had "
                "reached the primary before the crash; completed them in the backlog"
            )
        broker.syncer.sync_now()
        remove_verified(path)


def _landed(target: Queue, marks: list[int], payload: bytes) -> bool:
    """Is a record with exactly this payload in ``target`` at or after the marks?"""
    return any(
        p.has_payload_since(start, payload)
        for p, start in zip(target.partitions, marks, strict=False)
    )


def _check_for_primary(entity: Queue, m: Message, size: int) -> None:
    """What the primary entity would refuse a message for, checked before it is diverted
    (so the syphon never carries a message its destination cannot take)."""
    entity.check_message(m, size)  # ids, TTL, schedule, sessions, header size (send_rules)
    send_rules.check_not_broker_set(m)
    send_rules.check_size(size, entity.max_message_bytes)


def _probe(entity: Queue, session_id: str) -> None:
    """Would the primary store a ping with this SessionId? Raises what a send would."""
    cfg = entity.config
    if cfg.status in NOT_SENDING:
        raise MessagingEntityDisabled(f"{entity.name!r} is {cfg.status}: sends are refused")
    n = len(entity.partitions)
    p = entity.partitions[partition_for_key(session_id, n) if n > 1 else 0]
    if p.fault is not None and p.fault.down:
        raise p.fault.error()
    if p.live_bytes + PING_BYTES > cfg.max_size_in_megabytes * MB:
        raise QuotaExceeded(
            f"the maximum entity size has been reached or exceeded for {entity.name!r}"
        )


def _drop_none(value: Any) -> Any:
    """TOML has no null: leave unset fields out."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    return value
