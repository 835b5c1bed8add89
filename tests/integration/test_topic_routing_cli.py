"""Topics, subscriptions and rules end to end through the CLI (cases first written by an
independent tester).

A real daemon (the ``daemon`` / ``daemon_factory`` fixtures) driven through the real
``sbctl`` CLI:

- fan-out (daemon/README.md §10): a topic whose subscriptions cover correlation filters, SQL filters
  of every operator family, rule actions, ``$Default``, no rules, filter exceptions and a
  session-enabled subscription gets exactly the copies §10 predicts, plain and
  partitioned, across a clean restart and a ``kill -9``;
- a hand-written Config.json in the official emulator's schema imports cleanly and
  export → import round-trips (README "Moving from the official emulator");
- malformed filters and configs fail with one line naming the position / JSON path,
  the daemon stays up and nothing is half-applied;
- every lifecycle feature on a subscription, the fan-out bench, credits, odd inputs.

The last section pins bugs found while testing (each fixed; each test failed before its
fix). The Python client reads back what the CLI did (bodies of partitioned
subscriptions).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import Counter
from typing import Any

from sbctl import Client
from sbctl.core.errors import SbctlError
from sbctl.core.records import Message

EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_BAD_REQUEST = 5
EXIT_QUOTA = 6
EXIT_LOCK = 7
NS = "sbemulatorns"


# ------------------------------------------------------------------------------ helpers


def ok(daemon: Any, *args: str, input: str | None = None) -> Any:
    """``sbctl -o json ARGS`` that must succeed with nothing on stderr."""
    result = daemon.cli("-o", "json", *args, input=input)
    assert result.code == 0, f"sbctl -o json {' '.join(args)} failed: {result}"
    assert result.stderr == "", result.stderr
    return result


def js(daemon: Any, *args: str, input: str | None = None) -> Any:
    return ok(daemon, *args, input=input).json()


def one_error_line(result: Any) -> str:
    """The failure contract: exit != 0, nothing on stdout, exactly one stderr line, no
    traceback."""
    assert result.code != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return str(lines[0])


def alive(daemon: Any) -> None:
    status = js(daemon, "daemon", "status")
    assert status["running"] is True


def counts(daemon: Any, topic: str, namespace: str = NS) -> dict[str, tuple[int, int]]:
    """{subscription: (active, dead-lettered)} from one ``subscription list``."""
    subs = js(daemon, "-n", namespace, "subscription", "list", topic)
    return {s["name"]: (s["active_message_count"], s["dead_letter_message_count"]) for s in subs}


def drain(daemon: Any, entity: str, session_id: str | None = None) -> list[Any]:
    """Receive-and-delete everything (all partitions) with the client: the read-back."""
    out: list[Any] = []
    with daemon.client() as c:
        token = None
        if session_id is not None:
            token = c.accept_session(entity, session_id)["session_lock_token"]
        while True:
            got = c.receive(entity, 250, mode="receive-and-delete", session_lock_token=token)
            if not got:
                return out
            out += got


def jsonl(*messages: dict[str, Any]) -> str:
    return "".join(json.dumps(m) + "\n" for m in messages)


# ------------------------------------------------------------------ fan-out (daemon/README.md §10)

TOPIC = "fan"


def sql_rule(name: str, sql: str, action: str | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"FilterType": "Sql", "SqlFilter": {"SqlExpression": sql}}
    if action is not None:
        props["Action"] = {"SqlExpression": action}
    return {"Name": name, "Properties": props}


def fanout_config(partitioned: bool) -> dict[str, Any]:
    """One topic; each subscription exercises one family of daemon/README.md §10."""
    subs: list[dict[str, Any]] = [
        {"Name": "def"},  # no Rules key: keeps $Default (1=1)
        {"Name": "none"},  # $Default deleted through the CLI below: no rules at all
        {
            "Name": "corr",
            "Rules": [
                {
                    "Name": "c",
                    "Properties": {
                        "FilterType": "Correlation",
                        "CorrelationFilter": {
                            "Label": "order",
                            "CorrelationId": "c1",
                            "Properties": {"vip": True},
                        },
                    },
                }
            ],
        },
        {
            "Name": "cmp",
            "Rules": [
                sql_rule(
                    "r", "amount >= 100 AND amount < 1000 AND region <> 'us' AND region != 'ap'"
                )
            ],
        },
        {
            "Name": "logic",
            "Rules": [sql_rule("r", "NOT (region = 'eu') OR (amount > 5000 AND vip = TRUE)")],
        },
        {
            "Name": "inlike",
            "Rules": [
                sql_rule(
                    "r",
                    "region IN ('eu', 'ap') AND name LIKE 'a!_%' ESCAPE '!' "
                    "AND code NOT IN (1, 2) AND name NOT LIKE '%z'",
                )
            ],
        },
        {
            "Name": "nul",
            "Rules": [
                sql_rule(
                    "r",
                    "missing IS NULL AND region IS NOT NULL "
                    "AND EXISTS(amount) AND NOT EXISTS(gone)",
                )
            ],
        },
        {
            "Name": "arith",
            "Rules": [
                sql_rule("r", "(amount * 2 + 1) % 7 = 3 OR amount / 3 = -2 OR -amount + 0.5 > 0")
            ],
        },
        {
            "Name": "sysp",
            "Rules": [
                sql_rule(
                    "r",
                    "sys.Label = 'order' AND sys.MessageId LIKE 'm%' AND sys.Size > 0 "
                    "AND sys.CorrelationId IS NULL",
                )
            ],
        },
        {
            "Name": "act",
            "Rules": [
                sql_rule("a1", "amount > 0", "SET tier = 'gold'; REMOVE region"),
                sql_rule("a2", "amount > 10", "SET sys.Label = 'x-' + region"),
                sql_rule("n1", "amount > 0"),
                {
                    "Name": "n2",
                    "Properties": {
                        "FilterType": "Correlation",
                        "CorrelationFilter": {"Properties": {"region": "eu"}},
                    },
                },
            ],
        },
        {"Name": "fx", "Rules": [sql_rule("r", "sys.Nope = 1")]},
        {
            "Name": "fxdrop",
            "Properties": {"DeadLetteringOnFilterEvaluationExceptions": False},
            "Rules": [sql_rule("r", "amount / 0 = 1")],
        },
        {"Name": "fxdiv", "Rules": [sql_rule("r", "amount / 0 = 1")]},
        {"Name": "sess", "Properties": {"RequiresSession": True}},
    ]
    return {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": NS,
                    "Topics": [
                        {
                            "Name": TOPIC,
                            "Properties": {"EnablePartitioning": partitioned},
                            "Subscriptions": subs,
                        }
                    ],
                }
            ]
        }
    }


MESSAGES = [
    {
        "body": "m1",
        "message_id": "m1",
        "subject": "order",
        "correlation_id": "c1",
        "application_properties": {
            "amount": 500,
            "region": "eu",
            "name": "a_b",
            "code": 3,
            "vip": True,
        },
    },
    {
        "body": "m2",
        "message_id": "x2",
        "application_properties": {"amount": -6, "region": "us", "name": "zz", "code": 1},
    },
    {
        "body": "m3",
        "message_id": "m3",
        "subject": "order",
        "application_properties": {"amount": 2, "region": "eu", "gone": 1},
    },
    {"body": "m4", "session_id": "S", "application_properties": {"amount": -0.25, "region": "ap"}},
    {"body": "m5", "message_id": "m5", "subject": "order", "correlation_id": "c1"},
]
M6 = {
    "body": "m6",
    "message_id": "m6",
    "subject": "order",
    "application_properties": {"amount": 20, "region": "eu"},
}

# What daemon/README.md §10 predicts: active bodies (copies) and dead-lettered bodies per
# subscription.
EXPECTED_ACTIVE = {
    "def": ["m1", "m2", "m3", "m4", "m5"],
    "none": [],
    "corr": ["m1"],
    "cmp": ["m1"],
    "logic": ["m2", "m4"],
    "inlike": ["m1"],
    "nul": ["m1", "m2", "m4"],
    "arith": ["m2", "m4"],
    "sysp": ["m3"],
    # m1: a1 copy + a2 copy + one copy for n1/n2; m3: a1 copy + one copy for n1/n2
    "act": ["m1", "m1", "m1", "m3", "m3"],
    "fx": [],
    "fxdrop": [],
    "fxdiv": [],
    "sess": ["m4"],
}
EXPECTED_DLQ = {
    "fx": ["m1", "m2", "m3", "m4", "m5"],  # FilterException: sys.Nope does not exist
    "fxdiv": ["m1", "m2", "m3"],  # Int64 / 0; m4 is a Double (-inf), m5 has no amount
    "sess": ["m1", "m2", "m3", "m5"],  # Session ID is null
}
M6_ACTIVE = {"def": 1, "nul": 1, "sysp": 1, "act": 3}
M6_DLQ = {"fx": 1, "fxdiv": 1, "sess": 1}


def expected_counts(with_m6: bool) -> dict[str, tuple[int, int]]:
    out = {}
    for sub, bodies in EXPECTED_ACTIVE.items():
        active, dead = len(bodies), len(EXPECTED_DLQ.get(sub, []))
        if with_m6:
            active += M6_ACTIVE.get(sub, 0)
            dead += M6_DLQ.get(sub, 0)
        out[sub] = (active, dead)
    return out


def test_fanout_copies_match_spec_through_restart_and_kill9(daemon: Any, partitioned: bool) -> None:
    ok(daemon, "import-config", "-", input=json.dumps(fanout_config(partitioned)))
    ok(daemon, "rule", "delete", TOPIC, "none", "$Default")
    sent = js(daemon, "send", TOPIC, "--input", "-", input=jsonl(*MESSAGES))
    assert sent["sent"] == 5
    if partitioned:  # daemon/README.md §0.1.7: the partition id in the top 16 bits
        assert any(n >> 48 for n in sent["sequence_numbers"])
    assert counts(daemon, TOPIC) == expected_counts(False)

    daemon.stop()
    daemon.start()
    assert counts(daemon, TOPIC) == expected_counts(False)
    assert [r["name"] for r in js(daemon, "rule", "list", TOPIC, "act")] == ["a1", "a2", "n1", "n2"]
    assert js(daemon, "rule", "list", TOPIC, "none") == []

    # An acknowledged send survives kill -9 (filters are evaluated from the reloaded rules).
    assert js(daemon, "send", TOPIC, "--input", "-", input=jsonl(M6))["sent"] == 1
    daemon.kill()
    daemon.start()
    assert counts(daemon, TOPIC) == expected_counts(True)

    # The copies themselves.
    got = {
        sub: drain(daemon, f"{TOPIC}/subscriptions/{sub}", "S" if sub == "sess" else None)
        for sub in EXPECTED_ACTIVE
    }
    for sub, bodies in EXPECTED_ACTIVE.items():
        want = bodies + ["m6"] * M6_ACTIVE.get(sub, 0)
        assert sorted(m.body.decode() for m in got[sub]) == sorted(want), sub
    # Same sequence number for one message in every subscription (daemon/README.md §10 / README).
    seq = {m.body: m.sequence_number for m in got["def"]}
    for sub in ("corr", "cmp", "logic", "inlike", "nul", "arith", "sysp", "sess"):
        for m in got[sub]:
            assert m.sequence_number == seq[m.body], (sub, m.body)
    # Rule actions: each action copy has its RuleName and its own edits only.
    act = [m for m in got["act"] if m.body == b"m1"]
    by_rule = {m.application_properties.get("RuleName"): m for m in act}
    assert set(by_rule) == {"a1", "a2", None}
    assert by_rule["a1"].application_properties["tier"] == "gold"
    assert "region" not in by_rule["a1"].application_properties
    assert by_rule["a1"].message.subject == "order"
    assert by_rule["a2"].message.subject == "x-eu"
    assert "tier" not in by_rule["a2"].application_properties
    plain = by_rule[None]
    assert plain.application_properties == MESSAGES[0]["application_properties"]
    assert plain.sequence_number == seq[b"m1"]
    # Dead letters with the reasons daemon/README.md §4.4 / §10.7 names.
    for sub, bodies in EXPECTED_DLQ.items():
        dead = drain(daemon, f"{TOPIC}/subscriptions/{sub}/$deadletterqueue")
        assert sorted(m.body.decode() for m in dead) == sorted([*bodies, "m6"]), sub
        reasons = {m.application_properties["DeadLetterReason"] for m in dead}
        assert (
            reasons
            == {
                "fx": {"FilterException"},
                "fxdiv": {"DivideByZeroException"},
                "sess": {"Session ID is null"},
            }[sub]
        )


def test_spec_example_two_action_rules_three_plain_rules_give_three_copies(daemon: Any) -> None:
    """daemon/README.md §10.3's own arithmetic, built with ``rule create`` flags (correlation and
    SQL)."""
    ok(daemon, "topic", "create", "ex")
    ok(daemon, "subscription", "create", "ex", "s")
    ok(daemon, "rule", "create", "ex", "s", "act1", "--filter-sql-expression", "n = 5",
       "--action-sql-expression", "SET which = 'one'")  # fmt: skip
    ok(daemon, "rule", "create", "ex", "s", "act2", "--correlation-filter-property", "n=5",
       "--action-sql-expression", "SET which = 'two'; SET sys.CorrelationId = 'x'")  # fmt: skip
    ok(daemon, "rule", "create", "ex", "s", "plain1", "--label", "L")
    ok(daemon, "rule", "create", "ex", "s", "plain2", "--correlation-filter-property", "n=5")
    # $Default is the third rule without an action.
    ok(daemon, "send", "ex", "--body", "hit", "--subject", "L", "-p", "n=5")
    # n = 5.0 matches SQL (numeric promotion) but not the correlation filter (typed, exact)
    ok(daemon, "send", "ex", "--body", "double", "-p", "n=5.0")
    # n = "5" (a string) matches neither: '5' = 5 is FALSE
    ok(daemon, "send", "ex", "--body", "string", "-p", 'n="5"')
    msgs = [
        json.loads(line)
        for line in ok(daemon, "receive", "ex/subscriptions/s", "--count", "20").stdout.splitlines()
    ]
    got = Counter((m["body"], m["application_properties"].get("RuleName")) for m in msgs)
    assert got == Counter(
        {
            ("hit", "act1"): 1,
            ("hit", "act2"): 1,
            ("hit", None): 1,
            ("double", "act1"): 1,
            ("double", None): 1,
            ("string", None): 1,
        }
    )
    act2 = next(m for m in msgs if m["application_properties"].get("RuleName") == "act2")
    assert act2["correlation_id"] == "x" and act2["application_properties"]["which"] == "two"


# ------------------------------------------------------- official emulator Config.json

BIG_SQL = "total > 250.0 AND sys.Label IN ('paid', 'refund') AND [customer tier] <> 'staff'"
BIG_ACTION = "SET flagged = TRUE; SET sys.To = 'review'"
# Written by hand in the style of Microsoft's Service Bus emulator Config.json.
OFFICIAL_STYLE = {
    "UserConfig": {
        "Namespaces": [
            {
                "Name": "shopns",
                "Queues": [
                    {
                        "Name": "billing.in",
                        "Properties": {
                            "DeadLetteringOnMessageExpiration": True,
                            "DefaultMessageTimeToLive": "P1DT2H30M",
                            "DuplicateDetectionHistoryTimeWindow": "PT45S",
                            "ForwardDeadLetteredMessagesTo": "",
                            "ForwardTo": "",
                            "LockDuration": "PT45.5S",
                            "MaxDeliveryCount": 7,
                            "RequiresDuplicateDetection": True,
                            "RequiresSession": False,
                        },
                    },
                    {
                        "Name": "audit-sink",
                        "Properties": {
                            "DeadLetteringOnMessageExpiration": False,
                            "DefaultMessageTimeToLive": "PT2H",
                            "DuplicateDetectionHistoryTimeWindow": "PT1M",
                            "ForwardDeadLetteredMessagesTo": "",
                            "ForwardTo": "",
                            "LockDuration": "PT1M",
                            "MaxDeliveryCount": 3,
                            "RequiresDuplicateDetection": False,
                            "RequiresSession": False,
                        },
                    },
                ],
                "Topics": [
                    {
                        "Name": "orders",
                        "Properties": {
                            "DefaultMessageTimeToLive": "P14D",
                            "DuplicateDetectionHistoryTimeWindow": "PT10M",
                            "RequiresDuplicateDetection": False,
                        },
                        "Subscriptions": [
                            {
                                "Name": "to-billing",
                                "Properties": {
                                    "DeadLetteringOnMessageExpiration": False,
                                    "DefaultMessageTimeToLive": "PT12H",
                                    "LockDuration": "PT30S",
                                    "MaxDeliveryCount": 5,
                                    "ForwardDeadLetteredMessagesTo": "audit-sink",
                                    "ForwardTo": "billing.in",
                                    "RequiresSession": False,
                                },
                                "Rules": [
                                    {
                                        "Name": "paid",
                                        "Properties": {
                                            "FilterType": "Correlation",
                                            "CorrelationFilter": {
                                                "ContentType": "application/json",
                                                "CorrelationId": "",
                                                "Label": "paid",
                                                "MessageId": "",
                                                "ReplyTo": "",
                                                "ReplyToSessionId": "",
                                                "SessionId": "",
                                                "To": "",
                                                "Properties": {"channel": "web"},
                                            },
                                        },
                                    }
                                ],
                            },
                            {
                                "Name": "big-spenders",
                                "Properties": {
                                    "DeadLetteringOnMessageExpiration": True,
                                    "DefaultMessageTimeToLive": "PT1H",
                                    "LockDuration": "PT1M",
                                    "MaxDeliveryCount": 10,
                                    "ForwardDeadLetteredMessagesTo": "",
                                    "ForwardTo": "",
                                    "RequiresSession": False,
                                },
                                "Rules": [
                                    {
                                        "Name": "sql-big",
                                        "Properties": {
                                            "FilterType": "Sql",
                                            "SqlFilter": {"SqlExpression": BIG_SQL},
                                            "Action": {"SqlExpression": BIG_ACTION},
                                        },
                                    },
                                    {
                                        "Name": "vip-customers",
                                        "Properties": {
                                            "FilterType": "Sql",
                                            "SqlFilter": {"SqlExpression": "customer LIKE 'vip-%'"},
                                        },
                                    },
                                ],
                            },
                            {
                                "Name": "everything",
                                "Properties": {
                                    "DeadLetteringOnMessageExpiration": False,
                                    "DefaultMessageTimeToLive": "P10675199DT2H48M5.4775807S",
                                    "LockDuration": "PT5M",
                                    "MaxDeliveryCount": 2147483647,
                                    "ForwardDeadLetteredMessagesTo": "",
                                    "ForwardTo": "",
                                    "RequiresSession": False,
                                },
                            },
                            {
                                "Name": "per-customer",
                                "Properties": {
                                    "DeadLetteringOnMessageExpiration": False,
                                    "DefaultMessageTimeToLive": "PT1H",
                                    "LockDuration": "PT1M",
                                    "MaxDeliveryCount": 3,
                                    "ForwardDeadLetteredMessagesTo": "",
                                    "ForwardTo": "",
                                    "RequiresSession": True,
                                },
                                "Rules": [],
                            },
                        ],
                    }
                ],
            },
            {
                "Name": "sbemulatorns",
                "Queues": [
                    {
                        "Name": "queue.1",
                        "Properties": {
                            "DeadLetteringOnMessageExpiration": False,
                            "DefaultMessageTimeToLive": "PT1H",
                            "DuplicateDetectionHistoryTimeWindow": "PT20S",
                            "ForwardDeadLetteredMessagesTo": "",
                            "ForwardTo": "",
                            "LockDuration": "PT1M",
                            "MaxDeliveryCount": 3,
                            "RequiresDuplicateDetection": False,
                            "RequiresSession": False,
                        },
                    }
                ],
            },
        ],
        "Logging": {"Type": "File"},
    }
}


def test_official_style_config_imports_routes_and_round_trips(daemon_factory: Any) -> None:
    first = daemon_factory()
    text = "\ufeff" + json.dumps(OFFICIAL_STYLE, indent=2)  # as saved by a Windows editor
    report = js(first, "import-config", "-", input=text)
    actions = Counter(r["action"] for r in report["results"])
    assert set(actions) == {"created", "deleted", "unchanged"}, report
    assert actions["deleted"] == 2  # $Default of the two subscriptions that list rules
    again = js(first, "import-config", "-", input=text)
    assert {r["action"] for r in again["results"]} == {"unchanged"}, again

    billing = js(first, "-n", "shopns", "queue", "show", "billing.in")
    assert (billing["lock_duration"], billing["default_message_time_to_live"]) == (
        "PT45.5S",
        "P1DT2H30M",
    )
    assert billing["max_delivery_count"] == 7 and billing["requires_duplicate_detection"] is True
    rules = js(first, "-n", "shopns", "rule", "list", "orders", "per-customer")
    assert [r["name"] for r in rules] == ["$Default"]  # "Rules": [] keeps $Default

    # Messages go where the rules say.
    sends = [
        {"body": "paid-web", "subject": "paid", "content_type": "application/json",
         "application_properties": {"channel": "web", "total": 300, "customer": "c1",
                                    "customer tier": "std"}},
        {"body": "vip", "subject": "other", "session_id": "c2",
         "application_properties": {"customer": "vip-1", "total": 1}},
        {"body": "staff", "subject": "refund", "session_id": "c3",
         "application_properties": {"total": 999.5, "customer tier": "staff", "customer": "s"}},
    ]  # fmt: skip
    ok(first, "-n", "shopns", "send", "orders", "--input", "-", input=jsonl(*sends))
    subs = counts(first, "orders", "shopns")
    assert subs["to-billing"] == (0, 0)  # forwarded
    assert js(first, "-n", "shopns", "queue", "show", "billing.in")["active_message_count"] == 1
    assert subs["big-spenders"] == (2, 0)  # sql-big copy of paid-web (action) + vip
    assert subs["everything"] == (3, 0)
    assert subs["per-customer"] == (2, 1)  # paid-web has no SessionId
    big = [
        json.loads(line)
        for line in ok(
            first, "-n", "shopns", "peek", "orders/subscriptions/big-spenders", "--count", "9"
        ).stdout.splitlines()
    ]
    flagged = next(m for m in big if m["body"] == "paid-web")
    assert flagged["to"] == "review" and flagged["application_properties"]["flagged"] is True
    assert flagged["application_properties"]["RuleName"] == "sql-big"

    # export -> import into a fresh data dir -> export gives the same file.
    exported = ok(first, "export-config").stdout
    second = daemon_factory()
    ok(second, "import-config", "-", input=exported)
    assert ok(second, "export-config").stdout == exported
    assert {r["action"] for r in js(second, "import-config", "-", input=exported)["results"]} == {
        "unchanged"
    }


# ------------------------------------------------------------------- malformed configs


def _ns(doc: dict[str, Any]) -> dict[str, Any]:
    ns: dict[str, Any] = doc["UserConfig"]["Namespaces"][0]
    return ns


def _sub(doc: dict[str, Any], i: int) -> dict[str, Any]:
    sub: dict[str, Any] = _ns(doc)["Topics"][0]["Subscriptions"][i]
    return sub


P = "UserConfig.Namespaces[0]"
S0 = f"{P}.Topics[0].Subscriptions[0]"
S1R = f"{P}.Topics[0].Subscriptions[1].Rules"


def _qprops(d: dict[str, Any], i: int) -> dict[str, Any]:
    props: dict[str, Any] = _ns(d)["Queues"][i]["Properties"]
    return props


def _rprops(d: dict[str, Any], sub: int, rule: int) -> dict[str, Any]:
    props: dict[str, Any] = _sub(d, sub)["Rules"][rule]["Properties"]
    return props


def _lower_case_key(d: dict[str, Any]) -> None:
    queue = _ns(d)["Queues"][0]
    queue["properties"] = queue.pop("Properties")


MALFORMED: list[tuple[str, Any, str]] = [
    ("typo", lambda d: _qprops(d, 0).update(LockDuraton="PT1M"),
     f'{P}.Queues[0].Properties.LockDuraton: unknown property; did you mean "LockDuration"?'),
    ("duration", lambda d: _qprops(d, 1).update(LockDuration="PT1X"),
     f"{P}.Queues[1].Properties.LockDuration: invalid duration"),
    ("filter type", lambda d: _rprops(d, 1, 1).update(FilterType="Foo"),
     f'{S1R}[1].Properties.FilterType: expected "Sql" or "Correlation", got "Foo"'),
    ("bool as string", lambda d: _qprops(d, 0).update(RequiresSession="false"),
     f"{P}.Queues[0].Properties.RequiresSession:"),
    ("empty correlation", lambda d: _rprops(d, 0, 0).update(CorrelationFilter={"Label": ""}),
     f"{S0}.Rules[0].Properties.CorrelationFilter:"),
    ("object value",
     lambda d: _rprops(d, 0, 0)["CorrelationFilter"]["Properties"].update(x={"a": 1}),
     f"{S0}.Rules[0].Properties.CorrelationFilter.Properties.x:"),
    ("duplicate subscription",
     lambda d: _ns(d)["Topics"][0]["Subscriptions"].append(copy.deepcopy(_sub(d, 2))),
     f"{P}.Topics[0].Subscriptions[4].Name:"),
    ("missing SqlFilter", lambda d: _rprops(d, 1, 1).pop("SqlFilter"),
     f"{S1R}[1].Properties.SqlFilter:"),
    ("lower-case key", _lower_case_key,
     f'{P}.Queues[0].properties: unknown property; did you mean "Properties"?'),
    ("immutable", lambda d: _sub(d, 3)["Properties"].update(RequiresSession=False),
     f"{P}.Topics[0].Subscriptions[3].Properties.RequiresSession:"),
]  # fmt: skip


def test_malformed_configs_name_the_json_path_and_change_nothing(daemon: Any) -> None:
    ok(daemon, "import-config", "-", input=json.dumps(OFFICIAL_STYLE))
    before = ok(daemon, "export-config").stdout
    for what, mutate, want in MALFORMED:
        doc = copy.deepcopy(OFFICIAL_STYLE)
        mutate(doc)
        result = daemon.cli("import-config", "-", input=json.dumps(doc))
        line = one_error_line(result)
        assert result.code == EXIT_BAD_REQUEST, (what, result)
        assert line.startswith(f"error: {want}"), (what, line)
    invalid = daemon.cli("import-config", "-", input='{"UserConfig": {\n  "Namespaces": [,]}}')
    assert "line 2 column" in one_error_line(invalid)
    assert ok(daemon, "export-config").stdout == before
    alive(daemon)


# --------------------------------------------------------------------- malformed filters

BAD_FILTERS = [
    ("(a = 1", 7),
    ("flag", 5),
    ("[open = 1", 1),
    ("a BETWEEN 1 AND 2", 3),
    ("a = 9223372036854775808", 5),
    ("(" * 65 + "a = 1" + ")" * 65, 65),
]


def test_malformed_sql_filters_and_actions_name_the_position(daemon: Any) -> None:
    ok(daemon, "topic", "create", "bad")
    ok(daemon, "subscription", "create", "bad", "s")
    for i, (sql, pos) in enumerate(BAD_FILTERS):
        result = daemon.cli("rule", "create", "bad", "s", f"r{i}", "--filter-sql-expression", sql)
        line = one_error_line(result)
        assert result.code == EXIT_BAD_REQUEST, (sql, result)
        assert f"position {pos}:" in line and line.startswith("error: sql_expression:"), (sql, line)
    for action, pos in [("REMOVE sys.MessageId", 8), ("SET a = 1 SET b =", 18)]:
        result = daemon.cli("rule", "create", "bad", "s", "a", "--action-sql-expression", action)
        line = one_error_line(result)
        assert result.code == EXIT_BAD_REQUEST, (action, result)
        assert line.startswith("error: action:") and f"position {pos}:" in line, (action, line)
    too_many = "; ".join(["SET a = 1"] * 33)
    assert "32" in one_error_line(
        daemon.cli("rule", "create", "bad", "s", "a", "--action-sql-expression", too_many)
    )
    assert [r["name"] for r in js(daemon, "rule", "list", "bad", "s")] == ["$Default"]
    alive(daemon)


def test_odd_but_valid_filters(daemon: Any) -> None:
    """Quoted identifiers, unicode property names, a 1,024-character expression."""
    ok(daemon, "topic", "create", "odd")
    ok(daemon, "subscription", "create", "odd", "q")
    ok(daemon, "rule", "delete", "odd", "q", "$Default")
    expr = (
        "\"a\"\"b\" = 1 AND [a]]b] = 2 AND [naïve] = 'ü' AND [Order Id] = 'x' "
        'AND "日本" = 3 AND ORDERID = 4'
    )
    ok(daemon, "rule", "create", "odd", "q", "r", "--filter-sql-expression", expr)
    long_ok = "a = '" + "é" * 1018 + "'"
    assert len(long_ok) == 1024
    ok(daemon, "rule", "create", "odd", "q", "long", "--filter-sql-expression", long_ok)
    too_long = daemon.cli(
        "rule", "create", "odd", "q", "longer", "--filter-sql-expression", long_ok + " "
    )
    assert too_long.code == EXIT_BAD_REQUEST and "1,024" in one_error_line(too_long)
    ok(daemon, "rule", "create", "odd", "q", "uni", "--correlation-filter-property", "ключ=1")
    props = [
        "-p",
        'a"b=1',
        "-p",
        "a]b=2",
        "-p",
        'naïve="ü"',
        "-p",
        "Order Id=x",
        "-p",
        "日本=3",
        "-p",
        "orderId=4",
    ]
    ok(daemon, "send", "odd", "--body", "hit", *props)
    ok(daemon, "send", "odd", "--body", "miss", *props[:-1], "orderId=5")
    ok(daemon, "send", "odd", "--body", "uni", "-p", "ключ=1")
    ok(daemon, "send", "odd", "--body", "long", "-p", "a=" + "é" * 1018)
    got = ok(daemon, "receive", "odd/subscriptions/q", "--count", "10").jsonl()
    assert sorted(m["body"] for m in got) == ["hit", "long", "uni"]


# ------------------------------------------------------------ lifecycle on a subscription


def test_subscription_lifecycle_through_the_cli(daemon: Any) -> None:
    # Scheduled sends go to their own topic, first, so that waiting for them costs nothing.
    ok(daemon, "topic", "create", "sch")
    ok(daemon, "subscription", "create", "sch", "s")
    at = ("--at", "+4s")
    first = js(daemon, "schedule", "sch", *at, "--body", "later")["sequence_numbers"][0]
    second = js(daemon, "schedule", "sch", *at, "--body", "cancelled")["sequence_numbers"][0]
    ok(daemon, "cancel-scheduled", "sch", str(second))
    assert js(daemon, "topic", "show", "sch")["scheduled_message_count"] == 1
    assert daemon.cli("cancel-scheduled", "sch", str(second)).code == EXIT_LOCK  # not found

    ok(daemon, "topic", "create", "lc")
    ok(daemon, "subscription", "create", "lc", "s", "--lock-duration", "5s",
       "--max-delivery-count", "2")  # fmt: skip
    ok(daemon, "subscription", "create", "lc", "ss", "--enable-session")
    ok(daemon, "subscription", "create", "lc", "ttl", "--default-message-time-to-live", "1s",
       "--enable-dead-lettering-on-message-expiration")  # fmt: skip
    sub = "lc/subscriptions/s"

    ok(daemon, "send", "lc", "--body", "one", "--message-id", "one")
    # peek-lock + abandon twice: MaxDeliveryCountExceeded on the 2nd (max delivery count 2)
    for _ in range(2):
        (m,) = ok(daemon, "receive", sub, "--settle", "none").jsonl()
        ok(daemon, "message", "abandon", sub, m["lock_token"])
    assert counts(daemon, "lc")["s"] == (0, 1)
    # the DLQ path, in the spellings daemon/README.md §4.2 gives
    for path in ("lc/subscriptions/s/$deadletterqueue", "lc/Subscriptions/s/$DeadLetterQueue"):
        (dead,) = ok(daemon, "peek", path).jsonl()
        assert dead["dead_letter_reason"] == "MaxDeliveryCountExceeded"
    assert "resubmitted 1" in daemon.cli("dlq", "resubmit", sub).stdout

    # defer, receive-deferred, dead-letter with a reason, complete, a used lock
    (m,) = ok(daemon, "receive", sub, "--settle", "defer").jsonl()
    seq = str(m["sequence_number"])
    (m2,) = ok(daemon, "receive-deferred", sub, seq, "--settle", "none").jsonl()
    token = m2["lock_token"]
    ok(daemon, "message", "dead-letter", sub, token, "--reason", "Bad", "--description", "d")
    (dead,) = ok(daemon, "receive", f"{sub}/$deadletterqueue", "--settle", "none").jsonl()
    assert (dead["dead_letter_reason"], dead["dead_letter_error_description"]) == ("Bad", "d")
    ok(daemon, "message", "complete", f"{sub}/$deadletterqueue", dead["lock_token"])
    again = daemon.cli("message", "complete", f"{sub}/$deadletterqueue", dead["lock_token"])
    assert again.code == EXIT_LOCK

    # sessions: the session-enabled subscription dead-lettered "one" (no SessionId)
    sessions = [{"body": "a1", "session_id": "A"}, {"body": "a2", "session_id": "A"},
                {"body": "b1", "session_id": "B"}]  # fmt: skip
    ok(daemon, "send", "lc", "--input", "-", input=jsonl(*sessions))
    sent_at = time.monotonic()
    assert counts(daemon, "lc")["ss"] == (3, 1)
    got = ok(daemon, "receive", "lc/subscriptions/ss", "--session-id", "A", "--count", "5").jsonl()
    assert [m["body"] for m in got] == ["a1", "a2"]
    ok(daemon, "session", "set-state", "lc/subscriptions/ss", "B", "--state", "st")
    assert daemon.cli("session", "get-state", "lc/subscriptions/ss", "B").stdout.strip() == "st"
    got = ok(daemon, "receive", "lc/subscriptions/ss", "--next-session", "--count", "5").jsonl()
    assert [m["body"] for m in got] == ["b1"]

    # the scheduled message, routed through the rules when it activated, a new number
    got = ok(daemon, "receive", "sch/subscriptions/s", "--max-wait", "10s").jsonl()
    assert [m["body"] for m in got] == ["later"] and got[0]["sequence_number"] != first

    # TTL: the subscription's 1 s default caps the message's; dead-lettered on expiry
    time.sleep(max(0.0, 1.1 - (time.monotonic() - sent_at)))
    assert ok(daemon, "receive", "lc/subscriptions/ttl", "--count", "9").stdout == ""
    dead = ok(daemon, "peek", "lc/subscriptions/ttl/$deadletterqueue", "--count", "9").jsonl()
    assert {m["dead_letter_reason"] for m in dead} == {"TTLExpiredException"} and len(dead) == 4


def test_deleting_the_topic_wakes_a_waiting_receiver(daemon: Any) -> None:
    ok(daemon, "topic", "create", "gone")
    ok(daemon, "subscription", "create", "gone", "s")
    out: dict[str, Any] = {}

    def wait() -> None:
        t0 = time.monotonic()
        out["result"] = daemon.cli("receive", "gone/subscriptions/s", "--max-wait", "30s")
        out["seconds"] = time.monotonic() - t0

    waiter = threading.Thread(target=wait)
    waiter.start()
    daemon.wait_parked()
    ok(daemon, "topic", "delete", "gone")
    waiter.join(40)
    assert out["result"].code == EXIT_NOT_FOUND and "gone" in one_error_line(out["result"])
    assert out["seconds"] < 10
    alive(daemon)


def test_missing_entities_and_bad_flags(daemon: Any) -> None:
    for args in (
        ("send", "nope", "--body", "x"),
        ("rule", "create", "nope", "s", "r"),
        ("peek", "nope/subscriptions/s/$deadletterqueue"),
    ):
        result = daemon.cli(*args)
        assert result.code == EXIT_NOT_FOUND, (args, result)
        one_error_line(result)
    ok(daemon, "topic", "create", "flags")
    ok(daemon, "subscription", "create", "flags", "s")
    for args in (
        ("rule", "create", "flags", "s", "r", "--filter-sql-expression", "a=1", "--label", "x"),
        ("rule", "create", "flags", "s", "r", "--correlation-filter-property", "no-equals"),
        ("subscription", "create", "flags", "t", "--lock-duration", "soon"),
    ):
        result = daemon.cli(*args)
        assert result.code in (EXIT_USAGE, EXIT_BAD_REQUEST), (args, result)
        assert "Traceback" not in result.stderr
    assert [s["rule_count"] for s in js(daemon, "subscription", "list", "flags")] == [1]


# -------------------------------------------------------------- credits and the bench


def test_credits_one_send_to_three_subscriptions_costs_one_plus_three(daemon: Any) -> None:
    ns = "nstwo2"  # "ns2" itself is refused: namespace names are 6-50 characters (§14.8)
    assert (
        daemon.cli("namespace", "create", "ns2", "--credits-per-second", "1000").code
        == EXIT_BAD_REQUEST
    )
    ok(daemon, "namespace", "create", ns, "--credits-per-second", "1000")
    ok(daemon, "-n", ns, "topic", "create", "t")
    for s in ("a", "b", "c"):
        ok(daemon, "-n", ns, "subscription", "create", "t", s)
    ok(daemon, "-n", ns, "send", "t", "--body", "x")
    credits = js(daemon, "-n", ns, "credits")
    spent = credits["consumed"]["since_start"]
    assert (spent["data"], spent["filter"]) == (1, 3), credits
    # 300 messages in one request cost 300 + 900 > 1000: refused at once (daemon/README.md §0.4.4)
    big = daemon.cli("-n", ns, "send", "t", "--body", "x", "--repeat", "300", "--batch-size", "300")
    assert big.code == EXIT_QUOTA and "1200" in one_error_line(big)
    assert counts(daemon, "t", ns) == {"a": (1, 0), "b": (1, 0), "c": (1, 0)}


def test_bench_topic_fanout(daemon: Any) -> None:
    out = js(
        daemon, "bench", "--topic", "--subscriptions", "10", "--batch", "100",
        "--messages", "20000", "--skip-raw", "--skip-start",
    )  # fmt: skip
    assert out["topic_subscriptions"] == 10 and out["messages"] == 20000
    assert out["fanout_copies"] > 20000  # checked by the bench against its filters
    assert [n["name"] for n in js(daemon, "namespace", "list")] == [NS]  # cleaned up


# ================================================= regressions: bugs found by independent testing


def test_like_with_many_wildcards_does_not_hang_the_daemon(daemon: Any) -> None:
    """A pattern a backtracking regex needs exponential time for (14 ``%a`` pieces against
    40 a's and no b) is evaluated in well under a second by the daemon, and correctly."""
    ok(daemon, "topic", "create", "redos")
    ok(daemon, "subscription", "create", "redos", "s")
    ok(daemon, "rule", "create", "redos", "s", "r", "--filter-sql-expression",
       "v LIKE '" + "%a" * 14 + "%b'")  # fmt: skip
    ok(daemon, "rule", "delete", "redos", "s", "$Default")
    with Client(daemon.socket, timeout=10, retry_total=0) as c:
        c.send("redos", [Message(b"warm-up", application_properties={"v": "x"})])
        timings = []
        for value in ("a" * 40, "a" * 13 + "b", "a" * 40 + "b"):  # no, no (13 a's), yes
            t0 = time.perf_counter()
            try:
                c.send("redos", [Message(value.encode(), application_properties={"v": value})])
            except SbctlError:  # the client's 10 s socket timeout
                daemon.kill()  # the daemon is stuck at 100% CPU; do not leave it behind
                raise AssertionError("send did not return within 10 s: the daemon hangs") from None
            timings.append(time.perf_counter() - t0)
        # One request round trip, filter evaluation included; a backtracking match of the
        # first value takes minutes.
        assert max(timings) < 1.0, timings
        got = c.receive("redos/subscriptions/s", count=10, mode="receive-and-delete")
    assert [m.body for m in got] == [b"a" * 40 + b"b"]


REFUSED_ON_APPLY = {
    "bad SQL": {"Rules": [sql_rule("r", "a = ")]},
    "out of range": {"Properties": {"LockDuration": "PT10M"}},
    "missing forward target": {"Properties": {"ForwardTo": "no-such-queue"}},
}


def test_a_refused_import_changes_nothing_and_dry_run_refuses_it_too(daemon: Any) -> None:
    problems = []
    for i, (what, sub) in enumerate(REFUSED_ON_APPLY.items()):
        doc = {"UserConfig": {"Namespaces": [{
            "Name": f"freshns{i}", "Queues": [{"Name": "q", "Properties": {}}],
            "Topics": [{"Name": "t", "Properties": {}, "Subscriptions": [{"Name": "s", **sub}]}],
        }]}}  # fmt: skip
        text = json.dumps(doc)
        real = daemon.cli("import-config", "-", input=text)
        line = one_error_line(real)
        assert line.startswith(f"error: {P}.Topics[0].Subscriptions[0]"), line
        dry = daemon.cli("import-config", "--dry-run", "-", input=text)
        if dry.code != real.code:
            problems.append(f"{what}: --dry-run accepted what the import refuses")
    leftovers = [n["name"] for n in js(daemon, "namespace", "list")]
    if leftovers != [NS]:
        problems.append(f"half-applied: namespaces {leftovers} were created")
        rules = js(daemon, "-n", "freshns0", "rule", "list", "t", "s")
        problems.append(f"bad SQL left rules {[r['name'] for r in rules]}")
    assert not problems, problems


def test_out_of_range_max_delivery_count_is_refused_naming_where(daemon: Any) -> None:
    for value in (2**31, 2**64):
        doc = {"UserConfig": {"Namespaces": [{"Name": NS, "Queues": [
            {"Name": "q", "Properties": {"MaxDeliveryCount": value}}]}]}}  # fmt: skip
        result = daemon.cli("import-config", "-", input=json.dumps(doc))
        line = one_error_line(result)
        assert result.code == EXIT_BAD_REQUEST, (value, result)
        assert line.startswith(f"error: {P}.Queues[0].Properties.MaxDeliveryCount:"), line
    ok(daemon, "topic", "create", "t")
    result = daemon.cli("subscription", "create", "t", "s", "--max-delivery-count", str(2**31))
    assert result.code in (EXIT_USAGE, EXIT_BAD_REQUEST), result


def test_an_action_cannot_store_a_copy_over_the_message_size_limit(daemon: Any) -> None:
    ok(daemon, "topic", "create", "grow")
    ok(daemon, "subscription", "create", "grow", "s")
    ok(daemon, "rule", "delete", "grow", "s", "$Default")
    ok(daemon, "rule", "create", "grow", "s", "r", "--action-sql-expression",
       "; ".join(["SET v = v + v"] * 20))  # fmt: skip
    ok(daemon, "send", "grow", "--body", "x", "-p", "v=x")  # a tiny message
    for m in ok(daemon, "peek", "grow/subscriptions/s", "--count", "5").jsonl():
        assert len(m["application_properties"]["v"]) <= 256 * 1024, "a 1 MiB copy was stored"


def test_later_peeks_continue_after_the_last_peeked(daemon: Any) -> None:
    ok(daemon, "topic", "create", "pk")
    ok(daemon, "subscription", "create", "pk", "s")
    ok(daemon, "send", "pk", "--input", "-", input=jsonl({"body": "1"}, {"body": "2"}))
    with daemon.client() as c:
        first = c.peek("pk/subscriptions/s", 1)
        second = c.peek("pk/subscriptions/s", 1)
    assert [m.body for m in first + second] == [b"1", b"2"]


def test_a_refused_rule_change_keeps_the_old_rule(daemon: Any) -> None:
    ok(daemon, "import-config", "-", input=json.dumps(OFFICIAL_STYLE))
    doc = copy.deepcopy(OFFICIAL_STYLE)
    _sub(doc, 1)["Rules"][1]["Properties"]["SqlFilter"]["SqlExpression"] = "customer LIKE 'v%' AND"
    result = daemon.cli("import-config", "-", input=json.dumps(doc))
    assert one_error_line(result).startswith(f"error: {S1R}[1]: sql_expression: syntax error")
    after = js(daemon, "-n", "shopns", "rule", "list", "orders", "big-spenders")
    assert [r["name"] for r in after] == ["sql-big", "vip-customers"]


def test_action_set_session_id_is_receivable_on_a_partitioned_topic(daemon: Any) -> None:
    ok(daemon, "topic", "create", "sact", "--enable-partitioning")
    ok(daemon, "subscription", "create", "sact", "s", "--enable-session")
    ok(daemon, "rule", "delete", "sact", "s", "$Default")
    ok(daemon, "rule", "create", "sact", "s", "r", "--action-sql-expression",
       "SET sys.SessionId = 'fromrule'")  # fmt: skip
    bodies = [{"body": str(i)} for i in range(4)]  # keyless: round-robin over partitions
    ok(daemon, "send", "sact", "--input", "-", input=jsonl(*bodies))
    (session,) = js(daemon, "session", "list", "sact/subscriptions/s")
    assert (session["session_id"], session["active_message_count"]) == ("fromrule", 4)
    got = ok(daemon, "receive", "sact/subscriptions/s", "--session-id", "fromrule",
             "--count", "10").jsonl()  # fmt: skip
    assert [m["body"] for m in got] == ["0", "1", "2", "3"]


def test_status_errors_name_the_right_kind_of_entity(daemon: Any) -> None:
    ok(daemon, "topic", "create", "st")
    ok(daemon, "subscription", "create", "st", "off", "--status", "ReceiveDisabled")
    line = one_error_line(daemon.cli("receive", "st/subscriptions/off"))
    assert "subscription" in line and "queue" not in line, line
    ok(daemon, "topic", "update", "st", "--status", "SendDisabled")
    line = one_error_line(daemon.cli("send", "st", "--body", "x"))
    assert "topic" in line and "queue" not in line, line
