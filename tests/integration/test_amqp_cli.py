"""The AMQP endpoint's command line: ports, the taken-port error, --no-amqp, connection
strings, and namespace ports kept across restarts."""

from __future__ import annotations

import re
import socket
from typing import Any

CONN_RE = re.compile(
    r"Endpoint=sb://localhost:(\d+);SharedAccessKeyName=RootManageSharedAccessKey;"
    r"SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
)


def status(daemon: Any) -> dict[str, Any]:
    info: dict[str, Any] = daemon.cli("-o", "json", "daemon", "status", check=True).json()
    return info


def test_status_and_connection_string_name_the_bound_port(daemon: Any) -> None:
    port = status(daemon)["amqp_port"]
    assert isinstance(port, int) and port > 0
    text = daemon.cli("namespace", "connection-string", check=True).stdout.strip()
    match = CONN_RE.fullmatch(text)
    assert match and int(match.group(1)) == port
    as_json = daemon.cli("-o", "json", "namespace", "connection-string", check=True).json()
    assert as_json == {"connection_string": text}
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"AMQP\x03\x01\x00\x00")
        assert sock.recv(8) == b"AMQP\x03\x01\x00\x00"


def test_a_taken_port_fails_the_start_with_one_line(daemon_factory: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        d = daemon_factory(start=False)
        result = d.cli("daemon", "start", "--amqp-port", str(port))
    assert result.code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(port) in lines[0] and "--amqp-port" in lines[0] and "--no-amqp" in lines[0]
    assert d.cli("daemon", "status").code != 0  # nothing left running


def test_no_amqp_serves_only_the_unix_socket(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    d.cli("daemon", "start", "--no-amqp", check=True)
    assert status(d)["amqp_port"] is None
    result = d.cli("namespace", "connection-string")
    assert result.code != 0 and "--no-amqp" in result.stderr


def test_beyond_loopback_warns(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    result = d.cli("daemon", "start", "--amqp-host", "0.0.0.0", check=True)
    assert "no TLS" in result.stderr


def test_every_namespace_keeps_its_port_across_restarts(daemon: Any) -> None:
    daemon.cli("namespace", "create", "other-ns", check=True)
    first = daemon.cli("namespace", "connection-string", "other-ns", check=True).stdout
    main = daemon.cli("namespace", "connection-string", check=True).stdout
    assert first != main
    daemon.stop()
    daemon.start()
    assert daemon.cli("namespace", "connection-string", "other-ns", check=True).stdout == first
    missing = daemon.cli("namespace", "connection-string", "no-such-ns")
    assert missing.code == 3 and "does not exist" in missing.stderr
