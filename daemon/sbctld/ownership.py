"""Claiming a data dir and a socket before the daemon serves.

- The data dir is owned by whoever holds an exclusive ``flock`` on ``<data>/sbctld.lock``
  (and on the data dir itself, so deleting the lock file frees nothing). The kernel drops
  both when the process dies, even by SIGKILL. ``sbctld.pid`` is information only: it is
  rewritten by each daemon and nothing trusts it.
- The socket is never taken over from a live daemon: an existing socket file is probed by
  connecting to it, and only a socket nobody listens on (a crashed daemon's) is replaced.
- Everything the daemon creates is owner-only (umask 077: directories 0700, files 0600); an
  existing data dir with anything readable by others is tightened, with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from sbctl.core import layout, paths, protocol
from sbctl.core.errors import BadRequest, SbctlError

OWNER_ONLY_UMASK = 0o077
PROBE_TIMEOUT = 2.0
MAX_STATUS_BYTES = 1 << 20  # a status reply is a few hundred bytes


class DataDirBusy(SbctlError):
    code = "DataDirBusy"


class SocketBusy(SbctlError):
    code = "SocketBusy"


@dataclass
class Claim:
    """What a starting daemon holds: keep ``lock_fds`` open for the daemon's life."""

    data_dir: Path
    socket_path: Path
    lock_fds: list[int]
    notes: list[str] = field(default_factory=list)  # warnings for the log and the starter

    def release(self) -> None:
        """Forget the pid (while still holding the lock, so no successor's is removed)."""
        if not self.lock_fds:
            return
        with contextlib.suppress(OSError):
            os.unlink(layout.pid_file(self.data_dir))
        with contextlib.suppress(OSError):
            os.ftruncate(self.lock_fds[0], 0)
        for fd in self.lock_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.lock_fds = []


def claim(data_dir: Path, socket_path: Path) -> Claim:
    """Take the data dir and check the socket; raises a one-line SbctlError when refused."""
    os.umask(OWNER_ONLY_UMASK)
    paths.check_socket_path(socket_path)
    notes = prepare_data_dir(data_dir)
    fds, stale = lock_data_dir(data_dir)
    try:
        check_socket_free(socket_path, data_dir)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    if stale:
        notes.append(stale)
    return Claim(data_dir, socket_path, fds, notes)


def prepare_data_dir(data_dir: Path) -> list[str]:
    """Create (0700) or check a data dir this user can own; returns warnings."""
    if data_dir.exists() and not data_dir.is_dir():
        raise BadRequest(f"data dir {data_dir} is not a directory")
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise BadRequest(f"cannot create data dir {data_dir}: {exc.strerror}") from None
    if not data_dir.is_dir():
        raise BadRequest(f"data dir {data_dir} is not a directory")
    st = data_dir.stat()
    if st.st_uid != os.getuid():
        raise BadRequest(
            f"data dir {data_dir} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
        )
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise BadRequest(f"data dir {data_dir} is not writable")
    tightened = tighten_permissions(data_dir)
    if not tightened:
        return []
    shown = ", ".join(tightened[:3]) + (
        f" and {len(tightened) - 3} more" if len(tightened) > 3 else ""
    )
    return [
        f"data dir {data_dir} was readable by other users: permissions tightened to owner-only "
        f"(directories 0700, files 0600) on {len(tightened)} "
        f"{'entry' if len(tightened) == 1 else 'entries'} ({shown})"
    ]


def tighten_permissions(root: Path) -> list[str]:
    """chmod go-rwx everything under ``root`` (itself included) that is not owner-only.

    Symbolic links are not followed; entries of other users are left alone. Returns the
    paths changed, relative to ``root`` (``.`` for the root).
    """
    changed: list[str] = []

    def fix(path: str, st: os.stat_result) -> None:
        if st.st_mode & 0o077 and st.st_uid == os.getuid():
            os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)  # never a link (lstat below)
            changed.append(os.path.relpath(path, root))

    fix(str(root), os.stat(root))  # the data dir itself may be a symbolic link
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            fix(path, st)
    return changed


def _read_pid(fd: int) -> str:
    return os.pread(fd, 64, 0).decode(errors="replace").strip()


def lock_data_dir(data_dir: Path) -> tuple[list[int], str | None]:
    """Take the data dir: (fds to keep open, note about a stale pidfile or None)."""
    path = layout.lock_file(data_dir)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    held = [fd]
    try:
        owner = _read_pid(fd)
        if not owner:  # a lock file deleted under a running daemon: its pid file may say
            with contextlib.suppress(OSError):
                owner = layout.pid_file(data_dir).read_text().strip()[:20]
        _flock_or_refuse(fd, data_dir, owner)
        # The directory too: a deleted lock file must not let a second daemon in.
        dir_fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
        held.append(dir_fd)
        _flock_or_refuse(dir_fd, data_dir, owner, tolerant=True)
    except BaseException:
        for f in held:
            os.close(f)
        raise
    pidfile = layout.pid_file(data_dir)
    old = ""
    with contextlib.suppress(OSError):
        old = pidfile.read_text().strip()
    old = old or owner
    me = f"{os.getpid()}\n".encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, me, 0)
    with open(pidfile, "wb") as fh:  # information only: the lock is what counts
        fh.write(me)
    note = None
    if old:
        note = f"stale pidfile {pidfile} (pid {old} is not running) taken over; recovering"
    return held, note


def _flock_or_refuse(fd: int, data_dir: Path, owner: str, *, tolerant: bool = False) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            raise DataDirBusy(
                f"data dir {data_dir} is in use by another sbctl daemon (pid {owner or '?'}); "
                f"stop it first (`sbctl daemon stop --data-dir {data_dir}`)"
            ) from None
        if not tolerant:  # a file system without flock on directories keeps the file lock
            raise


def lock_owner(data_dir: Path) -> int | None:
    """The pid holding the data dir's lock (-1 if unknown), or None when nobody holds it."""
    try:
        fd = os.open(layout.lock_file(data_dir), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                text = _read_pid(fd)
                return int(text) if text.isdigit() else -1
            raise
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def check_socket_free(socket_path: Path, data_dir: Path) -> None:
    """Refuse a socket a live daemon listens on; remove a stale one (nobody listening)."""
    try:
        st = os.lstat(socket_path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketBusy(
            f"socket path {socket_path} exists and is not a socket; remove it or choose "
            f"another --socket"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT)
    try:
        probe.connect(str(socket_path))
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)  # a dead daemon's socket
        return
    except OSError as exc:
        raise SocketBusy(f"socket {socket_path} cannot be checked: {exc.strerror}") from None
    finally:
        probe.close()
    raise SocketBusy(
        f"socket {socket_path} is in use by another live sbctl daemon{_describe(socket_path)}; "
        f"this daemon (data dir {data_dir}) will not take it over: choose another --socket"
    )


def _describe(socket_path: Path) -> str:
    """Who listens on ``socket_path``: one ``status`` request in the Unix wire protocol."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(PROBE_TIMEOUT)
            sock.connect(str(socket_path))
            sock.sendall(protocol.encode_request(1, "status", protocol.Empty()))
            (length,) = protocol.LENGTH.unpack(_read(sock, protocol.LENGTH.size))
            if length > MAX_STATUS_BYTES:
                return ""
            reply = protocol.decode_reply(_read(sock, length))
            info = protocol.decode_result(reply.result) if reply.ok else None
    except (OSError, ValueError, msgspec.DecodeError):
        return ""
    if not isinstance(info, dict):
        return ""
    return f" (pid {info.get('pid')}, data dir {info.get('data_dir')})"


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        data += chunk
    return data
