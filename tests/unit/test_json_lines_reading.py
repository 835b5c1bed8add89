"""A JSON Lines line is read as `send --input` reads its object (sbctl.core.messages):
message_from_line, which reads the usual text-only line without building the object, gives
the message (or the error) message_from_json gives."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from sbctl.core.errors import SbctlError
from sbctl.core.messages import INPUT_FIELDS, message_from_json, message_from_line

NOW = 1_700_000_000_000
values = st.one_of(
    st.text(max_size=6),
    st.none(),
    st.integers(-5, 5),
    st.booleans(),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2),
)
names = st.one_of(st.sampled_from(sorted(INPUT_FIELDS)), st.sampled_from(["body", "x", "Body"]))


def outcome(read: Any, arg: Any) -> Any:
    try:
        return read(arg, NOW)
    except SbctlError as exc:
        return ("error", type(exc).__name__, exc.message)
    except (ValueError, TypeError, OverflowError) as exc:
        return ("error", type(exc).__name__, str(exc))


@given(st.lists(st.tuples(names, values), max_size=6))
def test_a_line_reads_as_its_object(pairs: list[tuple[str, Any]]) -> None:
    text = "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"
    obj = json.loads(text)  # (a repeated key: the last one counts, in both)
    assert outcome(message_from_line, text.encode()) == outcome(message_from_json, obj)


def test_text_lines_and_others() -> None:
    line = b'{"body": "hi", "message_id": "m", "partition_key": "k", "to": "t"}'
    m = message_from_line(line, NOW)
    assert m == message_from_json(json.loads(line), NOW)
    assert m.body == b"hi" and m.partition_key == "k"
    assert message_from_line(b'{"body": null}', NOW).body == b"null"  # (as send reads it)
    assert message_from_line(b'{"body": {"a": 1}, "time_to_live": 5}', NOW).time_to_live_ms == 5000
    try:
        message_from_line(b"{nope", NOW)
    except msgspec.DecodeError:
        pass
    else:
        raise AssertionError("not JSON must raise")
