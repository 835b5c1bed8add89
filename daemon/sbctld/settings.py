"""The daemon's settings: one typed object, built from the flags by sbctld.main (and by
`sbctl daemon start`, which runs the daemon in its own process), read by the entry point.

One commented line per setting. Rules kept here: settings are plain data (no I/O, no
defaults read from the environment: the flags' parsers do that); a listener that is off is
absent from ``listeners``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MB = 1024 * 1024
DEFAULT_REPLY_BUFFER_BYTES = 64 * MB


@dataclass(frozen=True)
class UnixListener:
    """The Unix socket of the daemon's own protocol (the CLI, the Python client)."""

    socket_path: Path  # created mode 0600; a stale file there is replaced


@dataclass(frozen=True)
class AmqpListener:
    """AMQP 1.0 for the Azure SDKs (and HTTP on the same port, sniffed)."""

    host: str = "127.0.0.1"  # the address the main port binds
    port: int = 5672  # the default namespace's port (0: any free port)


@dataclass(frozen=True)
class HttpListener:
    """The management API, the REST data plane and health."""

    host: str = "127.0.0.1"  # the address it binds
    port: int = 5300  # 0: any free port


Listener = UnixListener | AmqpListener | HttpListener


@dataclass(frozen=True)
class DaemonSettings:
    data_dir: Path  # owned (locked) for the daemon's life
    listeners: tuple[Listener, ...]  # what it serves on; the Unix socket is always there
    durability: str = "fsync"  # "fsync": acknowledged writes survive power loss; "os": a crash
    default_credits_per_second: int | None = None  # for new namespaces (None: 1000; 0: no limit)
    reply_buffer_bytes: int = DEFAULT_REPLY_BUFFER_BYTES  # a connection's unread replies, at most

    @classmethod
    def from_flags(
        cls,
        data_dir: Path,
        socket_path: Path,
        durability: str = "fsync",
        *,
        default_credits_per_second: int | None = None,
        reply_buffer_bytes: int | None = None,
        amqp: tuple[bool, str, int] = (True, "127.0.0.1", 5672),
        http: tuple[bool, str, int] = (True, "127.0.0.1", 5300),
    ) -> DaemonSettings:
        """From the command line's values; ``amqp``/``http``: (on, host, port)."""
        listeners: list[Listener] = [UnixListener(socket_path)]
        if amqp[0]:
            listeners.append(AmqpListener(amqp[1], amqp[2]))
        if http[0]:
            listeners.append(HttpListener(http[1], http[2]))
        return cls(
            data_dir,
            tuple(listeners),
            durability,
            default_credits_per_second,
            reply_buffer_bytes or DEFAULT_REPLY_BUFFER_BYTES,
        )

    @property
    def unix(self) -> UnixListener:
        return next(x for x in self.listeners if isinstance(x, UnixListener))

    @property
    def amqp(self) -> AmqpListener | None:
        return next((x for x in self.listeners if isinstance(x, AmqpListener)), None)

    @property
    def http(self) -> HttpListener | None:
        return next((x for x in self.listeners if isinstance(x, HttpListener)), None)
