"""The CLI without a daemon: flag parsing, input validation, errors and exit codes, output.

Commands run in-process through :func:`sbctl.cli.app.main`; where a command would talk to
the daemon, :func:`sbctl.cli.options.connect` is replaced by :class:`FakeClient`, which
records the calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sbctl import client
from sbctl.cli import app, cmd_messages, options
from sbctl.core import limits
from sbctl.core.messages import ReceivedMessage
from sbctl.core.records import Message

TOKEN = "00000000-0000-0001-0000-000000000007"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def jsonl(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines()]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("SBCTL_NAMESPACE", "SBCTL_SOCKET", "SBCTL_DATA_DIR", "SBCTL_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def sbctl(capsys: pytest.CaptureFixture[str]) -> Any:
    def run(*argv: str) -> Result:
        with pytest.raises(SystemExit) as exit_info:
            app.main(list(argv))
        captured = capsys.readouterr()
        code = exit_info.value.code
        return Result(code if isinstance(code, int) else 0, captured.out, captured.err)

    return run


def received(seq: int, body: bytes = b"hello", token: str | None = TOKEN) -> ReceivedMessage:
    return ReceivedMessage(
        sequence_number=seq,
        enqueued_time_utc=1_700_000_000_000,
        delivery_count=1,
        lock_token=token,
        locked_until_utc=1_700_000_060_000 if token else None,
        expires_at_utc=1_800_000_000_000,
        partition_id=None,
        state="active",
        message=Message(body=body, message_id=f"m-{seq}"),
    )


class FakeClient:
    """Stands in for sbctl.client.Client; records (method, args) in ``calls``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.namespace: str | None = None
        self.to_receive: list[ReceivedMessage] = []
        self.settle_errors: dict[str, dict[str, str]] = {}
        self.fail_with: BaseException | None = None
        self._seq = 0

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _record(self, name: str, *args: Any) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.calls.append((name, args))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def queue_create(self, name: str, **settings: Any) -> dict[str, Any]:
        self._record("queue_create", name, settings)
        return {"name": name, **settings}

    def queue_update(self, name: str, **settings: Any) -> dict[str, Any]:
        self._record("queue_update", name, settings)
        return {"name": name, **settings}

    def queue_list(self) -> list[dict[str, Any]]:
        self._record("queue_list")
        return [{"name": "orders", "status": "Active", "active_message_count": 3}]

    def send(self, entity: str, messages: list[Message]) -> list[int]:
        self._record("send", entity, list(messages))
        numbers = list(range(self._seq + 1, self._seq + 1 + len(messages)))
        self._seq += len(messages)
        return numbers

    def send_report(self, entity: str, messages: list[Any]) -> dict[str, Any]:
        return {"sequence_numbers": self.send(entity, messages), "diverted_to": None}

    def peek(self, entity: str, count: int, from_sequence: int | None) -> list[ReceivedMessage]:
        self._record("peek", entity, count, from_sequence)
        return [received(1, token=None)]

    def receive(
        self,
        entity: str,
        count: int,
        max_wait: float,
        mode: str,
        session_lock_token: str | None = None,
    ) -> list[ReceivedMessage]:
        assert session_lock_token is None  # no --session-id in these tests
        self._record("receive", entity, count, max_wait, mode)
        return self.to_receive

    def settle(
        self,
        entity: str,
        op: str,
        tokens: list[str],
        properties: Any = None,
        reason: str | None = None,
        description: str | None = None,
    ) -> list[dict[str, Any]]:
        self._record("settle", entity, op, list(tokens), properties)
        return [
            {"lock_token": t, "error": self.settle_errors[t]}
            if t in self.settle_errors
            else {"lock_token": t, "ok": True}
            for t in tokens
        ]

    def complete(self, entity: str, tokens: list[str]) -> list[dict[str, Any]]:
        return self.settle(entity, "complete", tokens)

    def abandon(
        self, entity: str, tokens: list[str], properties: Any = None
    ) -> list[dict[str, Any]]:
        return self.settle(entity, "abandon", tokens, properties)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClient]:
    fake = FakeClient()

    def connect(ctx: Any) -> FakeClient:
        fake.namespace = options.state(ctx).namespace
        return fake

    monkeypatch.setattr(options, "connect", connect)
    yield fake


def one_error_line(result: Result) -> str:
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    return lines[0]


# -- constants repeated for speed stay equal to their source


def test_repeated_constants_match_their_source() -> None:
    assert options.DEFAULT_NAMESPACE == client.DEFAULT_NAMESPACE
    assert cmd_messages.MAX_PEEK == limits.MAX_PEEK


# -- help and version


def test_no_command_prints_help(sbctl: Any) -> None:
    result = sbctl()
    assert result.code == 0 and result.out.startswith("Usage: sbctl")
    group = sbctl("queue")
    assert group.code == 0 and "Usage: sbctl queue" in group.out and "create" in group.out


def test_version(sbctl: Any) -> None:
    result = sbctl("--version")
    assert result.code == 0 and result.out.startswith("sbctl ")


# -- bad command lines: one line, click's exit status 2


@pytest.mark.parametrize(
    "argv",
    [
        ["-o", "yaml", "queue", "list"],
        ["peek", "q", "--count", "0"],
        ["peek", "q", "--count", "251"],
        ["peek", "q", "--count", "many"],
        ["receive", "q", "--mode", "sometimes"],
        ["namespace", "create", "myspace", "--capacity", "3"],
        ["queue", "create", "q", "--status", "Paused"],
        ["queue", "create", "q", "--max-delivery-count", "0"],
        ["queu", "list"],
        ["send", "q"],
        ["send", "q", "--body", "a", "--input", "-"],
        ["send", "q", "--input", "-", "--repeat", "2"],
        ["receive", "q", "--mode", "receive-and-delete", "--settle", "complete"],
        ["queue", "update", "q"],
        ["message", "complete", "q"],
    ],
)
def test_bad_command_line_is_one_line_and_exit_2(
    sbctl: Any, fake: FakeClient, argv: list[str]
) -> None:
    result = sbctl(*argv)
    assert result.code == 2, result
    line = one_error_line(result)
    assert line.startswith("error: ") and "--help" in line
    assert result.out == ""
    assert fake.calls == []


def test_bad_command_line_with_json_output(sbctl: Any) -> None:
    result = sbctl("-o", "json", "peek", "q", "--count", "x")
    assert result.code == 2
    error = json.loads(one_error_line(result))["error"]
    assert error["code"] == "UsageError" and "--count" in error["message"]


# -- bad values that sbctl itself parses: usage errors, exit 2, naming the flag typed


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["queue", "create", "q", "--lock-duration", "abc"], "--lock-duration"),
        (["queue", "update", "q", "--auto-delete-on-idle", "P1Y"], "--auto-delete-on-idle"),
        (["send", "q", "--body", "x", "--time-to-live", "soon"], "--time-to-live"),
        (["send", "q", "--body", "x", "--scheduled-enqueue-time", "later"], "--scheduled"),
        (["send", "q", "--body", "x", "-p", "novalue"], "'-p'"),
        (["send", "q", "--body", "x", "--property", "novalue"], "'--property'"),
        (["receive", "q", "--max-wait", "long"], "--max-wait"),
        (["message", "abandon", "q", TOKEN, "-p", "=1"], "invalid property"),
        (["schedule", "q", "--body", "x", "--at", "someday"], "'--at'"),
        (["rule", "create", "t", "s", "r", "--correlation-filter-property", "x"], "'--corr"),
    ],
)
def test_bad_value_is_a_usage_error_naming_the_flag(
    sbctl: Any, fake: FakeClient, argv: list[str], needle: str
) -> None:
    result = sbctl(*argv)
    assert result.code == 2, result
    line = one_error_line(result)
    assert line.startswith("error: ") and needle in line
    assert "_" not in line.split(":")[1], line  # a flag, not a parameter name
    assert fake.calls == []


def test_bad_value_as_json(sbctl: Any) -> None:
    result = sbctl("-o", "json", "queue", "create", "q", "--lock-duration", "abc")
    assert result.code == 2
    error = json.loads(one_error_line(result))["error"]
    assert error["code"] == "UsageError" and "'--lock-duration'" in error["message"]


# -- no daemon behind the socket: ServiceCommunicationProblem, exit 9


def test_missing_socket_is_exit_9(sbctl: Any, tmp_path: Path) -> None:
    socket = str(tmp_path / "none.sock")
    result = sbctl("--socket", socket, "queue", "list")
    assert result.code == 9
    line = one_error_line(result)
    assert line.startswith("error: ") and socket in line and "not running" in line
    assert result.out == ""


def test_missing_socket_with_json_output(sbctl: Any, tmp_path: Path) -> None:
    result = sbctl("-o", "json", "--socket", str(tmp_path / "none.sock"), "peek", "q")
    assert result.code == 9
    assert json.loads(one_error_line(result))["error"]["code"] == "ServiceCommunicationProblem"


def test_socket_from_the_environment(
    sbctl: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    socket = str(tmp_path / "env.sock")
    monkeypatch.setenv("SBCTL_SOCKET", socket)
    result = sbctl("namespace", "list")
    assert result.code == 9 and socket in result.err


def test_daemon_status_when_not_running(sbctl: Any, tmp_path: Path) -> None:
    argv = ["--data-dir", str(tmp_path / "data"), "--socket", str(tmp_path / "s.sock")]
    table = sbctl(*argv, "daemon", "status")
    assert table.code == 9 and table.out == ""
    one_error_line(table)
    as_json = sbctl("-o", "json", *argv, "daemon", "status")
    assert as_json.code == 9
    status = json.loads(as_json.out)
    assert status["running"] is False and status["socket"] == str(tmp_path / "s.sock")
    assert json.loads(one_error_line(as_json))["error"]["code"] == "ServiceCommunicationProblem"


# -- send --input: JSON Lines, validated before anything is sent


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (['{"body": "a"}', "", '{"body": "b"', '{"body": "c"}'], "line 3: invalid JSON"),
        (['{"body": "a"}', '{"body": "b", "colour": "red"}'], "line 2: unknown message field"),
        (["[1, 2]"], "line 1: a message must be a JSON object"),
        (['{"body": "a", "time_to_live": "forever"}'], "line 1: invalid duration"),
        (['{"body": "a", "application_properties": {"x": [1]}}'], "line 1: application property"),
        (['{"body": "a"}', '{"message_id": 5}'], "line 2: message_id must be a string"),
        (['{"body": "a", "time_to_live": 1e400}'], "line 1:"),
    ],
)
def test_bad_jsonl_line_is_reported_and_nothing_is_sent(
    sbctl: Any, fake: FakeClient, tmp_path: Path, lines: list[str], expected: str
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = sbctl("send", "q", "--input", str(path))
    assert result.code == 5, result
    assert expected in one_error_line(result)
    assert fake.calls == []


def test_jsonl_that_is_not_utf8(sbctl: Any, fake: FakeClient, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"body": "a"}\n{"body": "\xff"}\n')
    result = sbctl("send", "q", "--input", str(path))
    assert result.code == 5 and "line 2: not valid UTF-8" in result.err
    assert fake.calls == []


def test_missing_input_file(sbctl: Any, fake: FakeClient, tmp_path: Path) -> None:
    result = sbctl("send", "q", "--input", str(tmp_path / "nope.jsonl"))
    assert result.code == 5 and "cannot read" in one_error_line(result)
    assert fake.calls == []


def test_flags_fill_in_what_jsonl_lines_lack(sbctl: Any, fake: FakeClient, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"body": "a"}\n'
        "\n"
        '{"body": "b", "subject": "own", "application_properties": {"k": "line"}}\n',
        encoding="utf-8",
    )
    result = sbctl(
        "-o", "json", "send", "q", "--input", str(path),
        "--subject", "default", "--time-to-live", "PT1M", "-p", "k=flag", "-p", "n=5",
    )  # fmt: skip
    assert result.code == 0, result
    assert json.loads(result.out) == {
        "sent": 2,
        "sequence_numbers": [1, 2],
        "diverted": 0,
        "diverted_to": None,
        "diverted_namespace": None,
    }
    [(_, (entity, messages))] = fake.calls
    assert entity == "q"
    first, second = messages
    assert (first.body, first.subject, first.time_to_live_ms) == (b"a", "default", 60_000)
    assert first.application_properties == {"k": "flag", "n": 5}
    assert (second.subject, second.application_properties) == ("own", {"k": "line", "n": 5})


def test_send_body_repeat_in_batches(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("send", "q", "--body", "x", "--repeat", "250", "--batch-size", "100")
    assert result.code == 0, result
    assert result.out == "sent 250 messages (seq 1..250)\n"
    assert [len(args[1]) for _, args in fake.calls] == [100, 100, 50]


def test_send_prints_each_sequence_number_up_to_twenty(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("send", "q", "--body", "x", "--repeat", "3", "--message-id", "m")
    assert result.out == "sent 3 messages: sequence numbers 1, 2, 3\n"
    assert all(m.message_id == "m" for m in fake.calls[0][1][1])


def test_send_body_file(sbctl: Any, fake: FakeClient, tmp_path: Path) -> None:
    path = tmp_path / "body.bin"
    path.write_bytes(b"\x00\x01binary")
    assert sbctl("send", "q", "--body-file", str(path)).code == 0
    assert fake.calls[0][1][1][0].body == b"\x00\x01binary"


def test_batches_split_by_body_bytes() -> None:
    big = Message(body=b"x" * (150 * 1024))
    small = Message(body=b"y")
    sizes = [len(b) for b in cmd_messages.batches([big, big, small, big], size=100)]
    assert sizes == [1, 2, 1]
    huge = Message(body=b"z" * (300 * 1024))
    assert [len(b) for b in cmd_messages.batches([huge, small], size=100)] == [1, 1]


def test_namespace_flag_reaches_the_client(sbctl: Any, fake: FakeClient) -> None:
    assert sbctl("-n", "otherns", "queue", "list").code == 0
    assert fake.namespace == "otherns"


# -- queues: az-style flags → option keys; update sends only what is given


def test_queue_create_maps_flags_to_option_keys(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl(
        "queue", "create", "orders", "--enable-partitioning", "--max-size", "2048",
        "--lock-duration", "PT30S", "--max-delivery-count", "5",
        "--default-message-time-to-live", "1h", "--enable-duplicate-detection",
        "--duplicate-detection-history-time-window", "10m", "--enable-session",
        "--forward-to", "other", "--forward-dead-lettered-messages-to", "dlq",
        "--enable-dead-lettering-on-message-expiration", "--auto-delete-on-idle", "P1D",
        "--status", "SendDisabled",
    )  # fmt: skip
    assert result.code == 0, result
    assert fake.calls == [
        (
            "queue_create",
            (
                "orders",
                {
                    "enable_partitioning": True,
                    "max_size_in_megabytes": 2048,
                    "lock_duration": 30_000,
                    "max_delivery_count": 5,
                    "default_message_time_to_live": 3_600_000,
                    "requires_duplicate_detection": True,
                    "duplicate_detection_history_time_window": 600_000,
                    "requires_session": True,
                    "forward_to": "other",
                    "forward_dead_lettered_messages_to": "dlq",
                    "dead_lettering_on_message_expiration": True,
                    "auto_delete_on_idle": 86_400_000,
                    "status": "SendDisabled",
                },
            ),
        )
    ]
    # A short confirmation; `queue show` prints the table.
    assert (
        result.out == "created queue orders (sessions, duplicate detection, status SendDisabled)\n"
    )


def test_queue_update_sends_only_the_options_given(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl(
        "-o", "json", "queue", "update", "orders", "--no-enable-batched-operations",
        "--max-size", "1024",
    )  # fmt: skip
    assert result.code == 0, result
    settings = {"enable_batched_operations": False, "max_size_in_megabytes": 1024}
    assert fake.calls == [("queue_update", ("orders", settings))]
    assert json.loads(result.out)["enable_batched_operations"] is False


def test_queue_create_without_flags_sends_no_options(sbctl: Any, fake: FakeClient) -> None:
    assert sbctl("queue", "create", "orders").code == 0
    assert fake.calls == [("queue_create", ("orders", {}))]


def test_long_nested_values_are_summarised_in_tables(
    sbctl: Any, fake: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    partitions = [{"partition_id": i, "active_message_count": 0} for i in range(16)]
    monkeypatch.setattr(
        fake, "queue_update", lambda name, **_: {"name": name, "partitions": partitions}
    )
    monkeypatch.setattr(
        fake, "queue_get", lambda name: {"name": name, "nested": list(range(100))}, raising=False
    )
    table = sbctl("queue", "show", "q")
    assert "(100 entries; -o json shows them)" in table.out
    as_json = sbctl("-o", "json", "queue", "update", "q", "--max-size", "1024")
    assert json.loads(as_json.out)["partitions"] == partitions
    table = sbctl("queue", "update", "q", "--max-size", "1024")  # partitions: a table
    rows = [line.split() for line in table.out.splitlines()]
    assert ["partition", "active"] in rows and ["15", "0"] in rows


def test_queue_list_table(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("queue", "list")
    assert result.code == 0
    assert "orders" in result.out and "active" in result.out


# -- receive, peek and settlement


def test_receive_prints_then_completes(sbctl: Any, fake: FakeClient) -> None:
    fake.to_receive = [received(1), received(2, token="00000000-0000-0002-0000-000000000001")]
    result = sbctl("-o", "json", "receive", "q", "--count", "2", "--max-wait", "5s")
    assert result.code == 0, result
    assert [m["sequence_number"] for m in result.jsonl()] == [1, 2]
    assert fake.names() == ["receive", "settle"]
    assert fake.calls[0][1] == ("q", 2, 5.0, "peek-lock")
    assert fake.calls[1][1][1] == "complete" and len(fake.calls[1][1][2]) == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["receive", "q", "--settle", "none"],
        ["receive", "q", "--mode", "receive-and-delete"],
        ["receive", "q", "--mode", "receive-and-delete", "--settle", "none"],
    ],
)
def test_receive_without_settling(sbctl: Any, fake: FakeClient, argv: list[str]) -> None:
    fake.to_receive = [received(1)]
    result = sbctl(*argv)
    assert result.code == 0, result
    assert fake.names() == ["receive"]


def test_receive_table_shows_lock_tokens_and_escapes_bodies(sbctl: Any, fake: FakeClient) -> None:
    fake.to_receive = [received(1, body=b"red\x1b[31m alert\nnext line" + b"z" * 100)]
    result = sbctl("receive", "q", "--settle", "none")
    assert result.code == 0
    assert TOKEN in result.out.replace("\n", "") or "lock token" in result.out
    assert "\x1b" not in result.out and "\\x1b" in result.out


def test_peek_json_lines(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("-o", "json", "peek", "q", "--count", "250", "--from-sequence", "7")
    assert result.code == 0, result
    [message] = result.jsonl()
    assert message["body"] == "hello" and message["lock_token"] is None
    assert fake.calls == [("peek", ("q", 250, 7))]


def test_settle_reports_every_token_then_fails(sbctl: Any, fake: FakeClient) -> None:
    bad = "00000000-0000-0002-0000-000000000009"
    fake.settle_errors[bad] = {"code": "MessageLockLost", "message": "the lock expired"}
    result = sbctl("message", "complete", "q", TOKEN, bad)
    assert result.code == 7
    assert result.out.splitlines() == [f"completed {TOKEN}"]  # failures: stderr only
    line = one_error_line(result)
    assert "1 of 2 messages" in line and bad in line and "the lock expired" in line
    as_json = sbctl("-o", "json", "message", "complete", "q", TOKEN, bad)
    assert as_json.code == 7 and as_json.jsonl() == [{"lock_token": TOKEN, "ok": True}]
    assert bad in json.loads(one_error_line(as_json))["error"]["message"]


def test_settle_of_only_bad_tokens_prints_nothing_on_stdout(sbctl: Any, fake: FakeClient) -> None:
    bad = "00000000-0000-0002-0000-000000000009"
    fake.settle_errors[bad] = {"code": "MessageLockLost", "message": "the lock expired"}
    result = sbctl("message", "complete", "q", bad)
    assert result.code == 7 and result.out == ""
    assert "could not complete 1 of 1 message (lock token " in one_error_line(result)


def test_abandon_with_property_changes(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("-o", "json", "message", "abandon", "q", TOKEN, "-p", "tries=2", "-p", "why=x")
    assert result.code == 0, result
    assert result.jsonl() == [{"lock_token": TOKEN, "ok": True}]
    assert fake.calls == [("settle", ("q", "abandon", [TOKEN], {"tries": 2, "why": "x"}))]


# -- everything else still ends in one line


def test_internal_error_is_one_line(sbctl: Any, fake: FakeClient) -> None:
    fake.fail_with = RuntimeError("boom")
    result = sbctl("queue", "list")
    assert result.code == 1
    assert "internal error: RuntimeError: boom" in one_error_line(result)


def test_keyboard_interrupt_exits_130_quietly(sbctl: Any, fake: FakeClient) -> None:
    fake.fail_with = KeyboardInterrupt()
    result = sbctl("queue", "list")
    assert result.code == 130 and result.err == ""


def test_error_messages_escape_control_characters(sbctl: Any, fake: FakeClient) -> None:
    from sbctl.core.errors import MessagingEntityNotFound

    fake.fail_with = MessagingEntityNotFound("no queue 'a\x1b[2Jb'")
    result = sbctl("queue", "list")
    assert result.code == 3
    assert "\x1b" not in result.err and "\\x1b" in one_error_line(result)


def test_global_data_dir_beats_the_environment_for_daemon_commands(tmp_path: Path) -> None:
    """Regression: `daemon start|stop|status` own --data-dir read SBCTL_DATA_DIR and so
    silently overrode an explicit global --data-dir."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "SBCTL_DATA_DIR": str(tmp_path / "from-env")}
    env.pop("SBCTL_SOCKET", None)
    explicit = tmp_path / "explicit"
    cmd = [sys.executable, "-m", "sbctl.cli.app", "-o", "json", "--data-dir", str(explicit)]
    proc = subprocess.run(
        [*cmd, "daemon", "status"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 9
    assert json.loads(proc.stdout)["data_dir"] == str(explicit)


@pytest.mark.parametrize(
    ("argv", "hoisted"),
    [
        (["queue", "show", "q", "-o", "json"], ["--output", "json", "queue", "show", "q"]),
        (
            ["queue", "list", "-n", "ns-one", "--output=json"],
            ["--namespace", "ns-one", "--output", "json", "queue", "list"],
        ),
        (["-o", "json", "queue", "list"], ["-o", "json", "queue", "list"]),
        (["send", "q", "--", "-o", "json"], ["send", "q", "--", "-o", "json"]),
    ],
)
def test_global_options_may_follow_the_command(argv: list[str], hoisted: list[str]) -> None:
    """README and the issue write `sbctl queue show orders -o json`."""
    from sbctl.cli.app import hoist_globals

    assert hoist_globals(argv) == hoisted


def test_an_empty_namespace_is_a_usage_error_not_the_default(sbctl: Any) -> None:
    """An empty $NS in a script must not silently act on sbemulatorns."""
    for argv in (("-n", "", "queue", "list"), ("queue", "list", "--namespace", " ")):
        result = sbctl(*argv)
        assert result.code == 2, result
        assert "'-n' / '--namespace': must not be empty" in result.err, result


def test_send_to_an_older_daemon_still_reports_a_diversion(
    sbctl: Any, fake: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sbctl.core.errors import BadRequest

    def old_daemon(entity: str, messages: list[Message]) -> dict[str, Any]:
        raise BadRequest("bad arguments for send: Object contains unknown field `report`")

    monkeypatch.setattr(fake, "send_report", old_daemon)
    monkeypatch.setattr(fake, "send", lambda entity, messages: [0] * len(messages))
    result = sbctl("send", "q", "--body", "x")
    assert result.code == 0, result
    assert result.out.startswith("diverted 1 message to a backlog queue")
    as_json = json.loads(sbctl("-o", "json", "send", "q", "--body", "x").out)
    assert as_json["diverted"] == 1 and as_json["diverted_to"] is None
