"""`sbctl daemon start`, `status` and `cert` say what they found, all of it at once.

- Ports another process holds are all named in one error, before anything starts.
- `daemon start` on a running daemon is fine when the flags given match it, and an error
  (exit 1) naming each difference when they do not (the flags are not silently ignored).
- With the data dir's daemon listening on another socket, `status` and `start` name both the
  socket asked for and the daemon that holds the dir, with the socket it listens on.
- `daemon cert --socket S` is the certificate of the daemon on S, in its data dir, not one
  made in the default data dir.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import CliResult, run_cli

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBCTL_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "daemon")]),
        XDG_DATA_HOME=str(tmp / "xdg"),  # the default data dir, which nothing may touch
        SBCTL_DEFAULT_CREDITS_PER_SECOND="0",
    )
    return env


def sbctl(env: dict[str, str], *args: str) -> CliResult:
    return run_cli(list(args), env)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A daemon on free ports whose socket is not the data dir's default one."""
    tmp = tmp_path_factory.mktemp("settings")
    env = _env(tmp)
    where = ["--data-dir", str(tmp / "data"), "--socket", str(tmp / "elsewhere.sock")]
    started = sbctl(env, "daemon", "start", *where, "--amqp-port", "0", "--http-port", "0")
    assert started.code == 0, started.stderr
    status = json.loads(sbctl(env, "-o", "json", "daemon", "status", *where).stdout)
    try:
        yield {"env": env, "tmp": tmp, "where": where, "status": status}
    finally:
        sbctl(env, "daemon", "stop", *where)


def _one_error_line(result: CliResult) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_taken_ports_are_all_named_at_once(running: dict[str, Any], tmp_path: Path) -> None:
    amqp, http = running["status"]["amqp_port"], running["status"]["http_port"]
    other = ["--data-dir", str(tmp_path / "other"), "--socket", str(tmp_path / "o.sock")]
    ports = ["--amqp-port", str(amqp), "--http-port", str(http)]
    result = sbctl(running["env"], "daemon", "start", *other, *ports)
    assert result.code == 1
    line = _one_error_line(result)
    assert f"AMQP port {amqp}" in line and f"HTTP port {http}" in line, line
    assert "--amqp-port" in line and "--http-port" in line, line
    assert not (tmp_path / "o.sock").exists()


def test_a_running_daemon_with_other_settings_is_an_error(running: dict[str, Any]) -> None:
    env, where, amqp = running["env"], running["where"], running["status"]["amqp_port"]
    for same in ([], ["--amqp-port", str(amqp)], ["--amqp-port", "0"]):
        again = sbctl(env, "daemon", "start", *where, *same)
        assert again.code == 0 and "already running" in again.stdout, again
    other = 1 if amqp != 1 else 2
    moved = sbctl(env, "daemon", "start", *where, "--amqp-port", str(other))
    assert moved.code == 1
    line = _one_error_line(moved)
    assert "already running with other settings" in line, line
    assert f"AMQP port {amqp} (asked: --amqp-port {other})" in line, line
    off = sbctl(env, "daemon", "start", *where, "--no-http")
    assert off.code == 1 and "(asked: --no-http)" in off.stderr, off


def test_status_and_start_name_the_socket_and_the_daemon_holding_the_dir(
    running: dict[str, Any],
) -> None:
    env = dict(running["env"], SBCTL_DATA_DIR=str(running["tmp"] / "data"))  # no SBCTL_SOCKET
    pid, listening = running["status"]["pid"], str(running["tmp"] / "elsewhere.sock")
    status = sbctl(env, "daemon", "status")
    start = sbctl(env, "daemon", "start")
    for result, code in ((status, 9), (start, 1)):
        assert result.code == code, result
        line = _one_error_line(result)
        asked = str(running["tmp"] / "data" / "sbctld.sock")
        assert asked in line and f"held by pid {pid}" in line and listening in line, line


def test_cert_is_the_one_of_the_daemon_on_the_socket(running: dict[str, Any]) -> None:
    socket = running["where"][3]
    result = sbctl(running["env"], "--socket", socket, "daemon", "cert")
    assert result.code == 0, result.stderr
    assert result.stdout.strip() == running["status"]["https_certificate"]
    assert Path(result.stdout.strip()).is_file()
    assert not (running["tmp"] / "xdg").exists(), "a certificate made in the default data dir"
