"""Where the daemon keeps its data and listens (one rule, used by the CLI and the daemon).

- data dir: ``--data-dir``, else ``$SBCTL_DATA_DIR``, else ``$XDG_DATA_HOME/sbctl``
  (``~/.local/share/sbctl``);
- socket: ``--socket``, else ``$SBCTL_SOCKET``, else the socket in the data dir when that
  path fits a Unix socket address, else one in ``$XDG_RUNTIME_DIR`` (or the temp dir) named
  after the uid and a hash of the data dir (the names: :mod:`sbctl.core.layout`).
"""

from __future__ import annotations

import os
from pathlib import Path

from sbctl.core import layout
from sbctl.core.errors import BadRequest

MAX_SOCKET_PATH = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


def default_data_dir() -> Path:
    env = os.environ.get("SBCTL_DATA_DIR")
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg).expanduser().absolute() / "sbctl"


def resolve_data_dir(value: str | os.PathLike[str] | None) -> Path:
    return Path(value).expanduser().absolute() if value else default_data_dir()


def default_socket(data_dir: Path | None = None) -> Path:
    env = os.environ.get("SBCTL_SOCKET")
    if env:
        return Path(env).expanduser().absolute()
    data_dir = data_dir or default_data_dir()
    candidate = layout.socket_in(data_dir)
    if len(os.fsencode(candidate)) <= MAX_SOCKET_PATH:
        return candidate
    # Imported here: every CLI command resolves its socket, few need the long-path case
    # (hashlib loads OpenSSL, ~3 ms).
    import hashlib
    import tempfile

    runtime = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    digest = hashlib.sha256(os.fsencode(data_dir)).hexdigest()[:12]
    return layout.runtime_socket(runtime, os.getuid(), digest)


def resolve_socket(value: str | os.PathLike[str] | None, data_dir: Path | None = None) -> Path:
    path = Path(value).expanduser().absolute() if value else default_socket(data_dir)
    check_socket_path(path)
    return path


def check_socket_path(path: Path) -> None:
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH:
        raise BadRequest(
            f"socket path is too long ({size} bytes; Unix sockets allow {MAX_SOCKET_PATH}): "
            f"{path}; choose a shorter --socket"
        )
