"""SQL filter and action parameters (``@name``): part of the rule, evaluated by the filter
engine as the literal they stand for, kept and shown as sent; a data dir's old side file
(``http/sql_parameters.json``) moves into its rules once (daemon/README.md §10.5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core import layout
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.filters import MessageView, compile_action, compile_filter, normalize_filter
from sbctld.frontends.http import sqlparams

SCALARS = st.one_of(
    st.integers(-(2**63) + 1, 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.booleans(),
)


def literal(value: Any) -> str:
    """``value`` written in SQL."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def view(**props: Any) -> MessageView:
    m = Message(b"", application_properties=props)
    return MessageView(m, sequence_number=1, enqueued_time_ms=0, size=1)


@settings(max_examples=200, deadline=None)
@given(SCALARS, SCALARS, st.sampled_from(["=", "<>", "<", ">="]))
def test_a_parameter_is_the_literal_it_stands_for(value: Any, prop: Any, op: str) -> None:
    with_param = {"type": "sql", "sql_expression": f"a {op} @p", "parameters": {"@p": value}}
    written = {"type": "sql", "sql_expression": f"a {op} {literal(value)}"}
    assert compile_filter(with_param).matches(view(a=prop)) is compile_filter(written).matches(
        view(a=prop)
    )


def test_the_rule_keeps_its_parameters_as_sent() -> None:
    spec = {"type": "sql", "sql_expression": "a = @P AND b = @q", "parameters": {"@p": 1, "q": "x"}}
    assert normalize_filter(spec) == spec  # names as sent; they match case-insensitively
    assert compile_filter(spec).matches(view(a=1, b="x"))
    assert not compile_filter(spec).matches(view(a=1, b="y"))
    assert normalize_filter({"type": "sql", "sql_expression": "1=1", "parameters": {}}) == {
        "type": "sql",
        "sql_expression": "1=1",
    }


def test_an_action_takes_parameters() -> None:
    action = compile_action("SET x = @v; SET y = @n + 1", {"@v": "it's", "@n": 41})
    assert action is not None
    result = action.apply(view(a=1))
    assert result.application_properties == {"a": 1, "x": "it's", "y": 42}


def test_a_rule_with_parameters_routes_and_survives_a_restart(broker: Broker) -> None:
    ns = DEFAULT_NAMESPACE
    broker.management.topic_create(ns, "t", {})
    broker.management.subscription_create(ns, "t", "s", {})
    broker.management.rule_delete(ns, "t", "s", "$Default")
    spec = {"type": "sql", "sql_expression": "color = @c", "parameters": {"@c": "red"}}
    broker.management.rule_create(ns, "t", "s", "red", spec, "SET seen = @by", {"@by": "rule"})
    from sbctl.core.message_form import encode as encode_message

    for color in ("blue", "red"):
        m = Message(color.encode(), application_properties={"color": color})
        broker.messaging.send(ns, "t", [encode_message(m)])
    (got,) = broker.messaging.peek(ns, "t/subscriptions/s", 10, None)
    from sbctl.core.messages import ReceivedMessage

    msg = ReceivedMessage.from_wire(got)
    assert (msg.body, msg.application_properties["seen"]) == (b"red", "rule")
    rule = broker.management.rule_get(ns, "t", "s", "red")
    assert (rule.filter, rule.action_parameters) == (spec, {"@by": "rule"})


def _old_style_data_dir(broker: Broker, data_dir: Path) -> int:
    """What a release before parameters were part of a rule left: the rules with their
    parameters replaced, and the expressions as sent in the HTTP front-end's side file."""
    ns = DEFAULT_NAMESPACE
    broker.management.topic_create(ns, "Orders/EU", {})
    broker.management.subscription_create(ns, "Orders/EU", "Big", {})
    broker.management.rule_create(
        ns, "Orders/EU", "Big", "R1", {"type": "sql", "sql_expression": "n > 5"}, "SET x = 'y'"
    )
    broker.management.rule_create(
        ns, "Orders/EU", "Big", "Stale", {"type": "sql", "sql_expression": "n > 9"}, None
    )
    created = broker.management.rule_get(ns, "Orders/EU", "Big", "R1").created_at_ms
    side = {
        f"{DEFAULT_NAMESPACE}/orders/eu/big/r1": {
            "filter": ["n > @min", {"@min": 5}, "n > 5"],
            "action": ["SET x = @v", {"@v": "y"}, "SET x = 'y'"],
        },
        # changed since (by AMQP or the CLI): the side file's text is no longer the rule's
        f"{DEFAULT_NAMESPACE}/orders/eu/big/stale": {"filter": ["n > @m", {"@m": 7}, "n > 7"]},
        f"{DEFAULT_NAMESPACE}/orders/eu/big/gone": {"filter": ["n > @m", {"@m": 1}, "n > 1"]},
    }
    path = layout.sql_parameters_file(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(side))
    return created


def test_the_old_side_file_moves_into_the_rules_once(broker: Broker, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    created = _old_style_data_dir(broker, data_dir)
    reports: list[str] = []
    moved = sqlparams.migrate(
        data_dir, broker.management.rule_get, broker.management.rule_restore, reports.append
    )
    assert moved == 1 and not layout.sql_parameters_file(data_dir).exists()
    assert len(reports) == 1 and "orders/eu/big/gone' left as stored" in reports[0]
    ns = DEFAULT_NAMESPACE
    rule = broker.management.rule_get(ns, "Orders/EU", "Big", "R1")
    assert rule.filter == {"type": "sql", "sql_expression": "n > @min", "parameters": {"@min": 5}}
    assert (rule.action, rule.action_parameters, rule.created_at_ms) == (
        "SET x = @v",
        {"@v": "y"},
        created,
    )
    assert [r.name for r in broker.management.rule_list(ns, "Orders/EU", "Big")] == [
        "$Default",
        "R1",
        "Stale",
    ]
    stale = broker.management.rule_get(ns, "Orders/EU", "Big", "Stale")
    assert stale.filter == {"type": "sql", "sql_expression": "n > 9"}
    assert (
        sqlparams.migrate(
            data_dir, broker.management.rule_get, broker.management.rule_restore, reports.append
        )
        == 0
    )


def test_the_moved_rules_are_stored(tmp_path: Path, clock: Any) -> None:
    from sbctld.storage.sync import Syncer

    data_dir = tmp_path / "data"
    b = Broker(data_dir, clock, Syncer("fsync"), default_credits_per_second=0)
    try:
        _old_style_data_dir(b, data_dir)
        sqlparams.migrate(
            data_dir, b.management.rule_get, b.management.rule_restore, lambda _: None
        )
    finally:
        b.housekeeping.close()
    b = Broker(data_dir, clock, Syncer("fsync"), default_credits_per_second=0)
    try:
        rule = b.management.rule_get(DEFAULT_NAMESPACE, "Orders/EU", "Big", "R1")
        assert rule.filter["parameters"] == {"@min": 5}
    finally:
        b.housekeeping.close()


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"@p": {"x": 1}}, "parameter '@p' must be a string, number, boolean or null"),
        ([1], "'parameters' must be an object"),
    ],
)
def test_bad_action_parameters_are_refused(params: Any, fragment: str) -> None:
    from sbctl.core.errors import BadRequest

    with pytest.raises(BadRequest, match=fragment):
        compile_action("SET x = @p", params)
