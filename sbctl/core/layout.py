"""The data directory's layout: every file and folder name the daemon and the CLI use.

Rules this module keeps:

- it is the only module that spells a name of the data dir (``tests/unit/test_layout.py``
  fails on one spelled elsewhere); everything else asks it, by a function taking the folder
  the name lives in (``layout.partition_dir(entity_dir, 3)``) or by a constant;
- names never change: a data dir written by an earlier release must open as it is
  (``tests/unit/test_datadir_compat.py``); a new file gets a new name here;
- the client and the daemon both import it (the CLI finds the daemon's log, the Spark loader
  writes the staged files the daemon adopts), so it imports the standard library only.

The tree (``<20>`` is a 20-digit zero-padded number, so that a plain sort is numeric)::

    <data dir>/
    ├── sbctld.lock              ownership: an exclusive flock (sbctld.ownership)
    ├── sbctld.pid               the owner's pid, for messages
    ├── sbctld.log               the daemon's log
    ├── sbctld.sock              the Unix socket, when its path fits (sbctl.core.paths)
    ├── reserve.bin              space kept for settling on a full disk (sbctld.storage.space)
    ├── spark.log, spark.log.1   the JVM's output during `sbctl spark-load` (and the one before)
    ├── staging/                 Spark staging (sbctl.spark): load-<id>/p<NN>/t<task>-<k>.sbb,
    │                            load-<id>/rejects/t<task>.jsonl, rejects-<load id>.jsonl
    ├── http/                    cert.pem, key.pem (0600), .lock, explorer.token (0600, the
    │                            explorer page's token), and sql_parameters.json from older
    │                            releases, moved into the rules at start
    ├── amqp/                    keys.json (0600), ports.json
    └── namespaces/
        └── <namespace>/         namespace.toml, pairing.toml, syphon.ledger
            ├── queues/<queue>/  queue.toml, p<NN>/, dedup/, sessions/, loads/<digest>.load
            ├── topics/<topic>/  topic.toml, p<NN>/, dedup/,
            │   └── subscriptions/<subscription>/  subscription.toml, rules.json, sessions/
            └── @tmp-<hex>, @deleted-<hex>       half-made or half-removed (never loaded)

    p<NN>/ (a partition store)   <20>.log segments, <20>.jnl journals, <20>.jnm their
                                 mirrors, checkpoint.bin, checkpoint.prev.bin
    dedup/, sessions/            <20>.jnl (a keyed log)

Beside any file: ``<name>.seal`` (its sealed copy, sbctld.storage.files), ``.<name>.tmp``
(being written), ``<name>.corrupt`` (set aside by recovery), ``<segment>.adopting`` (being
copied in by a load).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

StrPath = str | os.PathLike[str]

# -- the data dir's own files -----------------------------------------------------------------

LOCK_FILE = "sbctld.lock"
PID_FILE = "sbctld.pid"
LOG_FILE = "sbctld.log"
SOCKET_NAME = "sbctld.sock"
RESERVE_FILE = "reserve.bin"
SPARK_LOG = "spark.log"
STAGING_DIR = "staging"
NAMESPACES_DIR = "namespaces"
HTTP_DIR = "http"
AMQP_DIR = "amqp"
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
CERT_LOCK = ".lock"
SQL_PARAMETERS_FILE = "sql_parameters.json"
EXPLORER_TOKEN_FILE = "explorer.token"
KEYS_FILE = "keys.json"
PORTS_FILE = "ports.json"


def lock_file(root: Path) -> Path:
    return root / LOCK_FILE


def pid_file(root: Path) -> Path:
    return root / PID_FILE


def log_file(root: Path) -> Path:
    return root / LOG_FILE


def socket_in(root: Path) -> Path:
    """The socket's path inside the data dir (used when it fits a socket address)."""
    return root / SOCKET_NAME


def runtime_socket(runtime_dir: StrPath, uid: int, digest: str) -> Path:
    """The socket's path outside a data dir whose path is too long for one."""
    return Path(runtime_dir) / f"sbctl-{uid}-{digest}.sock"


def reserve_file(root: Path) -> Path:
    return root / RESERVE_FILE


def spark_log(root: Path) -> Path:
    return root / SPARK_LOG


def staging_dir(root: Path) -> Path:
    return root / STAGING_DIR


def namespaces_dir(root: Path) -> Path:
    return root / NAMESPACES_DIR


def cert_files(root: Path) -> tuple[Path, Path]:
    """The HTTPS certificate and its key."""
    folder = root / HTTP_DIR
    return folder / CERT_FILE, folder / KEY_FILE


def cert_lock(root: Path) -> Path:
    """Taken while the certificate is made (the daemon and `sbctl daemon cert` may race)."""
    return root / HTTP_DIR / CERT_LOCK


def sql_parameters_file(root: Path) -> Path:
    return root / HTTP_DIR / SQL_PARAMETERS_FILE


def explorer_token_file(root: Path) -> Path:
    """The explorer page's token (0600; a new one at each daemon start)."""
    return root / HTTP_DIR / EXPLORER_TOKEN_FILE


def amqp_keys_file(root: Path) -> Path:
    """The namespaces' SAS keys (AMQP and HTTP check tokens against them)."""
    return root / AMQP_DIR / KEYS_FILE


def amqp_ports_file(root: Path) -> Path:
    return root / AMQP_DIR / PORTS_FILE


# -- namespaces and entities ------------------------------------------------------------------

NAMESPACE_FILE = "namespace.toml"
PAIRING_FILE = "pairing.toml"
LEDGER_FILE = "syphon.ledger"
QUEUES_DIR = "queues"
TOPICS_DIR = "topics"
SUBSCRIPTIONS_DIR = "subscriptions"
QUEUE_FILE = "queue.toml"
TOPIC_FILE = "topic.toml"
SUBSCRIPTION_FILE = "subscription.toml"
RULES_FILE = "rules.json"
DEDUP_DIR = "dedup"
SESSIONS_DIR = "sessions"
LOADS_DIR = "loads"
LOAD_SUFFIX = ".load"
# Folders being made or removed start with this (never a valid entity or namespace name):
# loading skips them and start-up removes them.
WORK_PREFIX = "@"


def namespace_file(ns_dir: Path) -> Path:
    return ns_dir / NAMESPACE_FILE


def pairing_file(ns_dir: Path) -> Path:
    return ns_dir / PAIRING_FILE


def ledger_file(ns_dir: Path) -> Path:
    return ns_dir / LEDGER_FILE


def queues_dir(ns_dir: Path) -> Path:
    return ns_dir / QUEUES_DIR


def topics_dir(ns_dir: Path) -> Path:
    return ns_dir / TOPICS_DIR


def subscriptions_dir(topic_dir: Path) -> Path:
    return topic_dir / SUBSCRIPTIONS_DIR


def queue_file(queue_dir: Path) -> Path:
    return queue_dir / QUEUE_FILE


def topic_file(topic_dir: Path) -> Path:
    return topic_dir / TOPIC_FILE


def subscription_file(subscription_dir: Path) -> Path:
    return subscription_dir / SUBSCRIPTION_FILE


def rules_file(subscription_dir: Path) -> Path:
    return subscription_dir / RULES_FILE


def partition_dir(entity_dir: Path, pid: int) -> Path:
    return entity_dir / partition_name(pid)


def partition_name(pid: int) -> str:
    return f"p{pid:02d}"


def dedup_dir(entity_dir: Path) -> Path:
    return entity_dir / DEDUP_DIR


def sessions_dir(entity_dir: Path) -> Path:
    return entity_dir / SESSIONS_DIR


def loads_dir(entity_dir: Path) -> Path:
    return entity_dir / LOADS_DIR


def load_manifest(entity_dir: Path, digest: str) -> Path:
    return loads_dir(entity_dir) / f"{digest}{LOAD_SUFFIX}"


def work_dir(parent: Path, kind: str) -> Path:
    """A fresh ``@<kind>-<hex>`` folder name in ``parent`` ("tmp": being made, "deleted":
    being removed)."""
    import uuid  # the CLI imports this module: keep its start-up lean

    return parent / f"{WORK_PREFIX}{kind}-{uuid.uuid4().hex}"


def is_work_dir(path: Path) -> bool:
    return path.name.startswith(WORK_PREFIX)


# -- a partition store ------------------------------------------------------------------------

SEGMENT_SUFFIX = ".log"
JOURNAL_SUFFIX = ".jnl"
MIRROR_SUFFIX = ".jnm"  # the journal's mirror (sbctld.storage.journal)
CHECKPOINT_FILE = "checkpoint.bin"
PREVIOUS_CHECKPOINT_FILE = "checkpoint.prev.bin"
NUMBER_DIGITS = 20


def segment_name(base_seq: int) -> str:
    return f"{base_seq:020d}{SEGMENT_SUFFIX}"


def journal_name(generation: int) -> str:
    return f"{generation:020d}{JOURNAL_SUFFIX}"


def mirror_name(generation: int) -> str:
    return f"{generation:020d}{MIRROR_SUFFIX}"


def numbered(directory: Path, suffix: str) -> list[tuple[int, Path]]:
    """The files ``<20 digits><suffix>`` of a folder, in numeric order."""
    found = []
    for entry in os.scandir(directory):
        name = entry.name
        if (
            name.endswith(suffix)
            and len(name) == NUMBER_DIGITS + len(suffix)
            and name[:NUMBER_DIGITS].isdigit()
        ):
            found.append((int(name[:NUMBER_DIGITS]), Path(entry.path)))
    found.sort()
    return found


def checkpoint_file(partition: Path) -> Path:
    return partition / CHECKPOINT_FILE


def previous_checkpoint_file(partition: Path) -> Path:
    return partition / PREVIOUS_CHECKPOINT_FILE


# -- beside any file --------------------------------------------------------------------------

SEAL_SUFFIX = ".seal"
CORRUPT_SUFFIX = ".corrupt"
ADOPTING_SUFFIX = ".adopting"
TEMP_SUFFIX = ".tmp"


def seal_path(path: Path) -> Path:
    """The sealed copy of a file written atomically (sbctld.storage.files)."""
    return path.with_name(path.name + SEAL_SUFFIX)


def temp_path(path: Path) -> Path:
    """Where ``path`` is written before it is renamed into place (a hidden ``.<name>.tmp``)."""
    return path.with_name(f".{path.name}{TEMP_SUFFIX}")


def temp_sibling(path: Path) -> Path:
    """The same, for the files that have always used ``<stem>.tmp`` (ports, certificates)."""
    return path.with_suffix(TEMP_SUFFIX)


def rotated_log(path: Path) -> Path:
    """Where a log grown past its size goes, replacing the one there (``spark.log.1``)."""
    return path.with_name(path.name + ".1")


def corrupt_path(path: Path) -> Path:
    """Where recovery sets a damaged file aside."""
    return path.with_name(path.name + CORRUPT_SUFFIX)


def adopting_path(path: Path) -> Path:
    """A staged segment being copied into a store from another file system."""
    return path.with_name(path.name + ADOPTING_SUFFIX)


# -- Spark staging (written by the loader, adopted by the daemon) ------------------------------

STAGED_SUFFIX = ".sbb"
REJECTS_DIR = "rejects"


def load_work_dir(staging: StrPath, token: str) -> Path:
    """One load's folder in the staging dir."""
    return Path(staging) / f"load-{token}"


def staged_partition_dir(work: StrPath, pid: int) -> Path:
    return Path(work) / partition_name(pid)


def staged_file(partition: StrPath, task: int, k: int) -> Path:
    """The ``k``-th file of record batches a Spark task stages for one partition."""
    return Path(partition) / f"t{task:05d}-{k:03d}{STAGED_SUFFIX}"


def task_rejects_dir(work: StrPath) -> Path:
    return Path(work) / REJECTS_DIR


def task_rejects_file(rejects: StrPath, task: int) -> Path:
    return Path(rejects) / f"t{task:05d}.jsonl"


def rejects_file(staging: StrPath, load_id: str) -> Path:
    """The rows a load refused, with their reasons (unless --rejects-file names another)."""
    return Path(staging) / f"rejects-{load_id}.jsonl"


def open_private(path: StrPath, *, append: bool = False) -> Any:
    """``path`` opened for writing (binary), created owner-only (0600) whatever the umask:
    every file of a data dir is (daemon/README.md §0); never created loose and tightened later."""
    return open(path, "ab" if append else "wb", opener=_owner_only)


def _owner_only(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)
