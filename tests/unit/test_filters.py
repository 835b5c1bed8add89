"""Subscription-rule filters and actions (daemon/README.md §10.4-10.9; semantics in sbctld.filters'
docstring).

Example tables pin each operator family; hypothesis checks the compiled code against a small
reference interpreter over generated trees, LIKE against a reference matcher, and that any
text at all compiles or fails with BadRequest only.
"""

from __future__ import annotations

import math
import re
import uuid
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbctl.core.errors import BadRequest
from sbctl.core.message_form import encode as encode_message
from sbctl.core.records import Message
from sbctld.filters import (
    INT64_MAX,
    INT64_MIN,
    MAX_ACTION_STATEMENTS,
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING,
    FilterEvaluationError,
    MessageView,
    compile_action,
    compile_filter,
    format_double,
    normalize_filter,
    to_text,
)

PROPS: dict[str, Any] = {
    "i": 5,
    "f": 2.5,
    "s": "abc",
    "t": True,
    "n": None,
    "big": INT64_MAX,
    "small": INT64_MIN,
    "Mixed": "M",
    "zero": 0,
}


def view(
    props: dict[str, Any] | None = None,
    *,
    seq: int = 7,
    time: int = 1_700_000_000_000,
    size: int = 321,
    **fields: Any,
) -> MessageView:
    message = Message(application_properties=PROPS if props is None else props, **fields)
    return MessageView(message, sequence_number=seq, enqueued_time_ms=time, size=size)


def sql(expression: str) -> Any:
    return compile_filter({"type": "sql", "sql_expression": expression})


def match(expression: str, v: MessageView | None = None) -> bool:
    return bool(sql(expression).matches(view() if v is None else v))


def truth(expression: str, v: MessageView | None = None) -> str:
    """T, F or U: only TRUE selects, and NOT tells FALSE (selects) from unknown (does not)."""
    v = view() if v is None else v
    yes, no = match(expression, v), match(f"NOT ({expression})", v)
    assert not (yes and no)
    return "T" if yes else "F" if no else "U"


def runtime_error(expression: str, v: MessageView | None = None) -> FilterEvaluationError:
    with pytest.raises(FilterEvaluationError) as info:
        sql(expression).matches(view() if v is None else v)
    return info.value


def bad(expression: str) -> str:
    with pytest.raises(BadRequest) as info:
        sql(expression)
    return info.value.message


# -- Three-valued logic (the doc's tables) -------------------------------------------------

CONSTANT_TRUTH = {"T": "1 = 1", "F": "1 = 0", "U": "nothere = 1"}
RUNTIME_TRUTH = {"T": "i = 5", "F": "i = 6", "U": "n = 1"}
AND_TABLE = {"TT": "T", "TF": "F", "TU": "U", "FT": "F", "FF": "F", "FU": "F"}
AND_TABLE |= {"UT": "U", "UF": "F", "UU": "U"}
OR_TABLE = {"TT": "T", "TF": "T", "TU": "T", "FT": "T", "FF": "F", "FU": "U"}
OR_TABLE |= {"UT": "T", "UF": "U", "UU": "U"}


@pytest.mark.parametrize("operands", [CONSTANT_TRUTH, RUNTIME_TRUTH])
@pytest.mark.parametrize("pair", sorted(AND_TABLE))
def test_and_or_truth_tables(operands: dict[str, str], pair: str) -> None:
    left, right = operands[pair[0]], operands[pair[1]]
    assert truth(f"({left}) AND ({right})") == AND_TABLE[pair]
    assert truth(f"({left}) OR ({right})") == OR_TABLE[pair]


@pytest.mark.parametrize("operands", [CONSTANT_TRUTH, RUNTIME_TRUTH])
def test_not_and_only_true_selects(operands: dict[str, str]) -> None:
    assert [truth(operands[x]) for x in "TFU"] == ["T", "F", "U"]
    assert [truth(f"NOT ({operands[x]})") for x in "TFU"] == ["F", "T", "U"]
    assert truth(f"NOT NOT ({operands['U']})") == "U"


def test_long_and_or_chains_evaluate_each_operand() -> None:
    assert truth(" AND ".join(["i = 5"] * 40)) == "T"
    assert truth(" AND ".join(["i = 5"] * 39 + ["n = 1"])) == "U"
    assert truth(" OR ".join(["i = 6"] * 39 + ["s = 'abc'"])) == "T"
    assert truth("i = 5 AND (s = 'x' OR (n = 1 AND (t = TRUE OR f = 0)))") == "U"
    assert truth("i = 5 AND (s = 'abc' OR (n = 1 AND (t = TRUE OR f = 0)))") == "T"


def test_and_or_short_circuit_left_to_right() -> None:
    # the error in the right operand is never reached
    assert truth("i = 6 AND sys.Bogus = 1") == "F"
    assert match("i = 5 OR sys.Bogus = 1")
    assert runtime_error("n = 1 AND sys.Bogus = 1").type_name == "FilterException"
    assert runtime_error("i = 5 AND sys.Bogus = 1").type_name == "FilterException"


# -- Comparisons and types -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("i = 5", "T"),
        ("i <> 5", "F"),
        ("i != 5", "F"),
        ("i > 4", "T"),
        ("i >= 5", "T"),
        ("i < 5", "F"),
        ("i <= 5", "T"),
        ("4 < i", "T"),
        ("5 = i", "T"),
        ("f = 2.5", "T"),
        ("f > 2", "T"),
        ("i = 5.0", "T"),  # Int64 with Double promotes to Double
        ("i < 5.5", "T"),
        ("5.0 = i", "T"),
        ("f * 2 = i", "T"),
        ("big = 9223372036854775807", "T"),
        ("small = -9223372036854775808", "T"),
        ("s = 'abc'", "T"),
        ("s = 'ABC'", "F"),  # case-sensitive
        ("s < 'abd'", "T"),
        ("s > 'ab'", "T"),
        ("'B' < 'a'", "T"),  # ordinal
        ("s >= s", "T"),
        ("t = TRUE", "T"),
        ("t <> false", "T"),
        ("t = t", "T"),
        ("i = i", "T"),
        ("i <> f", "T"),
        ("i > f", "T"),
        ("s = s", "T"),
        # incompatible types: never equal; not ordered (unknown)
        ("s = 5", "F"),
        ("s <> 5", "T"),
        ("'5' = i", "F"),
        ("s = i", "F"),
        ("s <> i", "T"),
        ("t = 1", "F"),
        ("1 = TRUE", "F"),
        ("t <> 1", "T"),
        ("s > 1", "U"),
        ("i < s", "U"),
        ("i <= 'x'", "U"),
        ("t > FALSE", "U"),
        ("t < t", "U"),
        ("TRUE >= FALSE", "U"),
        # NULL, null values and missing properties are unknown
        ("n = 1", "U"),
        ("n <> 1", "U"),
        ("n = n", "U"),
        ("nothere = nothere", "U"),
        ("NULL = NULL", "U"),
        ("i = NULL", "U"),
        ("NULL <> s", "U"),
        ("'x' = NULL", "U"),
    ],
)
def test_comparisons(expression: str, expected: str) -> None:
    assert truth(expression) == expected


def test_nan_and_huge_numbers_compare_as_csharp_does() -> None:
    v = view({"nan": math.nan, "inf": math.inf, "huge": 2**53 + 1, "d": 9007199254740992.0})
    assert truth("nan = nan", v) == "F"
    assert truth("nan <> nan", v) == "T"
    assert truth("nan < 1", v) == "F"
    assert truth("inf > 1e308", v) == "T"
    # C# converts the Int64 to Double before comparing: 2^53 + 1 becomes 2^53
    assert truth("huge = d", v) == "T"
    assert truth("huge = 9007199254740992.0", v) == "T"
    assert truth("huge = 9007199254740992", v) == "F"


# -- IS NULL, EXISTS -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("n IS NULL", "T"),
        ("nothere IS NULL", "T"),
        ("i IS NULL", "F"),
        ("n IS NOT NULL", "F"),
        ("nothere is not null", "F"),
        ("s IS NOT NULL", "T"),
        ("sys.Label IS NULL", "T"),
        ("sys.MessageId IS NOT NULL", "T"),
        ("sys.SequenceNumber IS NOT NULL", "T"),
        ("sys.DeliveryCount IS NULL", "F"),
        ("EXISTS(n)", "T"),  # present with a null value
        ("EXISTS(i)", "T"),
        ("exists (nothere)", "F"),
        ("EXISTS(MIXED)", "T"),
        ("EXISTS(user.s)", "T"),
        ("EXISTS([s])", "T"),
        ("EXISTS(sys.MessageId)", "T"),
        ("EXISTS(sys.Label)", "F"),  # unset
        ("EXISTS(sys.Size)", "T"),
        ("EXISTS(sys.DeliveryCount)", "T"),
        ("EXISTS(sys.Bogus)", "F"),  # EXISTS is the test for existence: no error
        ("NOT EXISTS(nothere)", "T"),
    ],
)
def test_is_null_and_exists(expression: str, expected: str) -> None:
    assert truth(expression, view(message_id="id-1")) == expected


def test_is_null_on_a_nonexistent_system_property_is_an_error() -> None:
    assert runtime_error("sys.Bogus IS NULL").type_name == "FilterException"


# -- IN ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("s IN ('x', 'abc')", "T"),
        ("s IN ('x', 'ABC')", "F"),
        ("s NOT IN ('x', 'y')", "T"),
        ("s NOT IN ('abc')", "F"),
        ("i IN (1, 5)", "T"),
        ("i IN (5.0)", "T"),  # promotion
        ("f IN (2, 2.5)", "T"),
        ("i IN ('5', TRUE)", "F"),  # incompatible items are simply not equal
        ("t IN (1)", "F"),
        ("t IN (TRUE)", "T"),
        ("i IN (s, f, i)", "T"),  # items may be any expression
        ("s IN (Mixed, 'q')", "F"),
        ("i IN (i + 1, i - 1)", "F"),
        ("i IN (4 + 1)", "T"),
        ("n IN (1, 2)", "U"),  # unknown left operand: unknown
        ("nothere NOT IN ('a')", "U"),
        ("i IN (n, nothere)", "F"),  # unknown items: no match, not unknown
        ("i NOT IN (n, 7)", "T"),
        ("i IN (n, 5)", "T"),
        ("5 IN (1, 5)", "T"),
        ("'a' NOT IN ('b', 'c')", "T"),
        ("NULL IN (1)", "U"),
    ],
)
def test_in(expression: str, expected: str) -> None:
    assert truth(expression) == expected


def test_in_evaluates_every_item() -> None:
    assert runtime_error("i IN (5, sys.Bogus)").type_name == "FilterException"


# -- LIKE ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "pattern", "escape", "expected"),
    [
        ("abc", "abc", None, True),
        ("abc", "ab", None, False),
        ("abc", "a%", None, True),
        ("abc", "%c", None, True),
        ("abc", "%b%", None, True),
        ("abc", "%", None, True),
        ("", "%", None, True),
        ("", "_", None, False),
        ("abc", "a_c", None, True),
        ("abc", "___", None, True),
        ("abc", "__", None, False),
        ("abc", "%%%", None, True),
        ("abc", "A%", None, False),  # case-sensitive
        ("a\nc", "a_c", None, True),  # wildcards match newlines too
        ("a\nb\nc", "a%c", None, True),
        ("ABC%", "ABC\\%", "\\", True),  # the doc's example
        ("ABCD", "ABC\\%", "\\", False),
        ("a_b", "a!_b", "!", True),
        ("axb", "a!_b", "!", False),
        ("a!b", "a!!b", "!", True),
        ("50%", "%!%", "!", True),
        ("a%b", "a%%b", "%", True),  # the escape may itself be a wildcard character
        ("axb", "a%%b", "%", False),
        ("a.c", "a.c", None, True),  # regular-expression characters are literal
        ("abc", "a.c", None, False),
        ("a*c", "a*c", None, True),
        ("aac", "a*c", None, False),
        ("(x)+[y]{2}^$|\\", "(x)+[y]{2}^$|\\", None, True),
        ("[ab]", "[ab]", None, True),  # no character classes
        ("a", "[ab]", None, False),
        ("x.y?z", "%.y?%", None, True),
        ("xzy?z", "%.y?%", None, False),
        # several %: the pieces between them must match in order without overlapping
        ("abxx", "%ab%ab%", None, False),
        ("abab", "%ab%ab%", None, True),
        ("aab", "%ab%ab%", None, False),
        ("ab", "%a%a%", None, False),
        ("aa", "%a%a%", None, True),
        ("aba", "a%ba%a", None, False),
        ("abaa", "a%ba%a", None, True),
        ("xaxbxc", "%a%b%c%", None, True),
        ("xcxbxa", "%a%b%c%", None, False),
        ("abc", "%a%_%c", None, True),
        ("ac", "%a%_%c", None, False),
        ("a%b%", "%!%%!%", "!", True),
        ("a%b", "%!%%!%", "!", False),
    ],
)
def test_like(value: str, pattern: str, escape: str | None, expected: bool) -> None:
    v = view({"v": value, "p": pattern, "e": escape})
    quoted = pattern.replace("'", "''")
    esc = "" if escape is None else f" ESCAPE '{escape}'"
    esc_dynamic = "" if escape is None else " ESCAPE e"
    assert truth(f"v LIKE '{quoted}'{esc}", v) == "TF"[not expected]
    assert truth(f"v NOT LIKE '{quoted}'{esc}", v) == "FT"[not expected]
    assert truth(f"v LIKE p{esc_dynamic}", v) == "TF"[not expected]  # patterns from properties
    assert truth(f"v NOT LIKE p{esc_dynamic}", v) == "FT"[not expected]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("n LIKE '%'", "U"),
        ("nothere LIKE '%'", "U"),
        ("s LIKE NULL", "U"),
        ("s LIKE nothere", "U"),
        ("s LIKE 'a%' ESCAPE NULL", "U"),
        ("s LIKE 'a%' ESCAPE n", "U"),
        ("i LIKE '5'", "U"),  # not a string: unknown, like any incompatible comparison
        ("t NOT LIKE '%'", "U"),
        ("sys.MessageId LIKE 'id-%'", "T"),
        ("s LIKE 'a' + '%'", "T"),
        ("s + 'x' LIKE '%cx'", "T"),
    ],
)
def test_like_unknowns(expression: str, expected: str) -> None:
    assert truth(expression, view(PROPS | {}, message_id="id-1")) == expected


def test_like_runtime_errors_for_dynamic_patterns() -> None:
    v = view({"s": "abc", "num": 5, "bang": "ab!", "two": "!!"})
    assert runtime_error("s LIKE num", v).type_name == "ArgumentException"
    assert runtime_error("s LIKE 'a%' ESCAPE two", v).type_name == "ArgumentException"
    assert runtime_error("s LIKE 'a%' ESCAPE num", v).type_name == "ArgumentException"
    assert runtime_error("s LIKE bang ESCAPE '!'", v).type_name == "ArgumentException"


# -- Arithmetic ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("i + 1 = 6", "T"),
        ("i - 7 = -2", "T"),
        ("i * i = 25", "T"),
        ("i / 2 = 2", "T"),  # Int64 division truncates
        ("-i / 2 = -2", "T"),  # toward zero
        ("i / -2 = -2", "T"),
        ("i % 3 = 2", "T"),
        ("-i % 3 = -2", "T"),  # the dividend's sign (C#)
        ("i % -3 = 2", "T"),
        ("i / 2.0 = 2.5", "T"),
        ("f + 1 = 3.5", "T"),
        ("f * 2 = 5", "T"),
        ("f % 1 = 0.5", "T"),
        ("-f % 1 = -0.5", "T"),
        ("1.0 / 0 > 1e308", "T"),  # Double follows IEEE
        ("-1 / 0.0 < -1e308", "T"),
        ("0.0 / 0 = 0.0 / 0", "F"),  # NaN
        ("f % 0 = f % 0", "F"),
        ("1 + 2 * 3 = 7", "T"),  # precedence
        ("(1 + 2) * 3 = 9", "T"),
        ("10 - 4 - 3 = 3", "T"),  # left-associative
        ("100 / 10 / 5 = 2", "T"),
        ("2 * 3 % 4 = 2", "T"),
        ("- - 5 = 5", "T"),
        ("-(-(i)) = i", "T"),
        ("+i = 5", "T"),
        ("+f = 2.5", "T"),
        ("big - 1 + 1 = big", "T"),
        ("small + 1 > small", "T"),
        ("big + 1.0 > 0", "T"),  # Double arithmetic does not overflow
        ("s + 'd' = 'abcd'", "T"),  # concatenation
        ("s + i = 'abc5'", "T"),
        ("i + s = '5abc'", "T"),
        ("s + f = 'abc2.5'", "T"),
        ("s + t = 'abcTrue'", "T"),
        ("'' + 1e20 = '1E+20'", "T"),
        ("'x' + 2.0 = 'x2'", "T"),
        ("n + 1 = 1", "U"),
        ("nothere * 2 = 0", "U"),
        ("-n = 0", "U"),
        ("s + NULL = s", "U"),
        ("NULL / 0 = 1", "U"),  # unknown before the division
    ],
)
def test_arithmetic(expression: str, expected: str) -> None:
    assert truth(expression) == expected


@pytest.mark.parametrize(
    ("expression", "type_name"),
    [
        ("i / 0 = 1", "DivideByZeroException"),
        ("i % zero = 1", "DivideByZeroException"),
        ("big + 1 = 0", "OverflowException"),
        ("small - 1 = 0", "OverflowException"),
        ("big * 2 = 0", "OverflowException"),
        ("-small = 0", "OverflowException"),
        ("small / -1 = 0", "OverflowException"),
        ("s - 1 = 0", "InvalidOperationException"),
        ("s * s = 0", "InvalidOperationException"),
        ("t + 1 = 0", "InvalidOperationException"),
        ("t + t = 0", "InvalidOperationException"),
        ("-s = 0", "InvalidOperationException"),
        ("-t = 0", "InvalidOperationException"),
        ("+s = 0", "InvalidOperationException"),
        ("s / 2 = 0", "InvalidOperationException"),
        ("t % 2 = 0", "InvalidOperationException"),
    ],
)
def test_arithmetic_errors(expression: str, type_name: str) -> None:
    error = runtime_error(expression)
    assert error.type_name == type_name
    assert error.description


def test_error_descriptions_read_like_dotnet() -> None:
    assert runtime_error("s - t = 0").description == (
        "The binary operator Subtract is not defined for the types "
        "'System.String' and 'System.Boolean'."
    )
    assert runtime_error("sys.Nope = 1").description == (
        "The system property 'sys.Nope' does not exist."
    )


# -- Constants -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "1894.1204 > 1894",
        "2.0 = 2",
        "101.5E5 = 10150000",
        "0.5E-2 = 0.005",
        "1e3 = 1000",
        "1E+3 = 1000.0",
        ".5 = 0.5",
        "5. = 5",
        "'it''s' = 'it' + '''s'",
        "'' = ''",
        "'☃ ünïcødé' LIKE '☃%'",
        "TRUE = true",
        "FaLsE <> TrUe",
        "-9223372036854775808 < 0",
        "9223372036854775807 > 0",
        "- 9223372036854775808 = small",
        "1.7976931348623157e308 > 0",
    ],
)
def test_constants(expression: str) -> None:
    assert truth(expression) == "T"


# -- Names ---------------------------------------------------------------------------------


def test_identifiers_delimited_quoted_and_case_insensitive() -> None:
    v = view(
        {
            "Property With Space": 1,
            "HR-EmployeeID": 2,
            "a]b": 3,
            'say "hi"': 4,
            "http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName": "account",
            "and": 5,
            "Région_1": 6,
            "color": "red",
        }
    )
    assert match("[Property With Space] = 1", v)
    assert match("[property with space] = 1", v)
    assert match("user.[HR-EmployeeID] = 2", v)
    assert match("[a]]b] = 3", v)
    assert match('"say ""hi""" = 4', v)
    assert match(
        "\"http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName\" = 'account'", v
    )
    assert match('[and] = 5 AND "AND" = 5', v)  # keywords as delimited names
    assert match("région_1 = 6 AND RÉGION_1 = 6", v)  # Unicode letters, case-insensitive
    assert match("COLOR = 'red' AND user.Color = 'red' AND USER.color = 'red'", v)
    assert match("color = 'red' and not color = 'blue' Or 1 = 0", v)  # keywords any case
    assert match("sys.messageid IS NULL AND SYS.MESSAGEID IS NULL", v)
    assert match("user.sys = 1 OR sys IS NULL", v)  # 'sys' alone is a user property name


def test_exact_case_wins_then_first_in_message_order() -> None:
    v = view({"Key": 1, "key": 2, "KEY": 3})
    assert match("Key = 1 AND key = 2 AND KEY = 3", v)
    assert match("kEY = 1", v)  # no exact match: the first in message order
    assert match("EXISTS(kEy)", v)
    lazy = view({"a": 1})
    assert match("a = 1", lazy) and lazy._folded is None  # the table is built only on a miss
    assert match("A = 1", lazy) and lazy._folded == {"a": 1}


def test_sys_and_user_scopes_do_not_mix() -> None:
    v = view({"Label": "user-label", "MessageId": "user-id"}, subject="sys-label", message_id="m")
    assert match("Label = 'user-label' AND user.Label = 'user-label'", v)
    assert match("sys.Label = 'sys-label' AND sys.Subject = 'sys-label'", v)
    assert match("MessageId = 'user-id' AND sys.MessageId = 'm'", v)


def test_system_properties() -> None:
    message = Message(
        message_id="mid",
        correlation_id="cid",
        to="dest",
        reply_to="back",
        subject="subj",
        session_id="sess",
        reply_to_session_id="rsess",
        content_type="application/json",
        partition_key="sess",
        time_to_live_ms=60_000,
        scheduled_enqueue_time_ms=1_700_000_100_000,
        enqueued_sequence_number=42,
        dead_letter_source="q1",
        application_properties={},
    )
    v = MessageView(message, sequence_number=99, enqueued_time_ms=1_700_000_000_000, size=512)
    expected = {
        "MessageId": "'mid'",
        "CorrelationId": "'cid'",
        "To": "'dest'",
        "ReplyTo": "'back'",
        "Label": "'subj'",
        "Subject": "'subj'",
        "SessionId": "'sess'",
        "ReplyToSessionId": "'rsess'",
        "ContentType": "'application/json'",
        "PartitionKey": "'sess'",
        "TimeToLive": "60000",
        "ScheduledEnqueueTimeUtc": "1700000100000",
        "ScheduledEnqueueTime": "1700000100000",
        "EnqueuedSequenceNumber": "42",
        "DeadLetterSource": "'q1'",
        "SequenceNumber": "99",
        "EnqueuedTimeUtc": "1700000000000",
        "EnqueuedTime": "1700000000000",
        "Size": "512",
        "DeliveryCount": "0",
    }
    for name, literal in expected.items():
        assert match(f"sys.{name} = {literal}", v), name
        assert match(f"sys.{name.upper()} = {literal}", v), name
        assert match(f"property('sys.{name}') = {literal}", v), name
    unset = view({})
    for name in expected:
        if name not in (
            "SequenceNumber",
            "EnqueuedTimeUtc",
            "EnqueuedTime",
            "Size",
            "DeliveryCount",
        ):
            assert truth(f"sys.{name} = 1", unset) == "U", name
            assert match(f"sys.{name} IS NULL", unset), name


def test_nonexistent_system_property_compiles_then_fails_each_evaluation() -> None:
    compiled = sql("sys.ExpiresAtUtc > 0")
    for _ in range(2):
        with pytest.raises(FilterEvaluationError) as info:
            compiled.matches(view())
        assert info.value.type_name == "FilterException"
        assert "sys.ExpiresAtUtc" in info.value.description
    assert runtime_error("p('sys.Nope') = 1").type_name == "FilterException"


def test_functions() -> None:
    v = view({"name": "s", "upper": "S", "s": "abc", "num": 5})
    assert match("property('s') = 'abc' AND p('S') = 'abc' AND P('user.s') = 'abc'", v)
    assert match("property(name) = 'abc' AND p(upper) = 'abc'", v)
    assert match("p('s' + '') = 'abc'", v)
    assert truth("p('nothere') = 1", v) == "U"
    assert truth("p(n) = 1", v) == "U"
    assert runtime_error("p(num) = 1", v).type_name == "ArgumentException"
    assert match("newid() LIKE '________-____-____-____-____________'", v)
    assert match("newid() <> newid()", v)
    assert "applies to a property only" in bad("newid() IS NULL")


def test_newid_is_a_guid_string() -> None:
    compiled = compile_action("SET id = newid()")
    assert compiled is not None
    value = (compiled.apply(view({})).application_properties or {})["id"]
    assert isinstance(value, str) and str(uuid.UUID(value)) == value


# -- Syntax errors, limits -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "position", "fragment"),
    [
        ("a = 1 AND", 10, "expected an expression after 'AND'"),
        ("a = 1 AND  ", 12, "expected an expression after 'AND'"),
        ("a =", 4, "expected an expression after '='"),
        ("(a = 1", 7, "to close the '(' at position 1"),
        ("a = 'x", 5, "a string starting here is never closed"),
        ("[a = 1", 1, "never closed"),
        ('"a = 1', 1, "never closed"),
        ("a IS 1", 6, "expected NULL after 'IS'"),
        ("a + 1 IS NULL", 7, "IS [NOT] NULL applies to a property only"),
        ("a NOT 1", 7, "expected IN or LIKE after 'NOT'"),
        ("a IN 1", 6, "expected '(' after 'IN'"),
        ("a IN ()", 7, "expected an expression after '('"),
        ("a IN (1 2)", 9, "expected ',' or ')' in the IN list"),
        ("region 'eu'", 8, "expected a comparison"),
        ("a", 2, "expected a comparison (=, <>, !=, <, <=, >, >=), IS, IN or LIKE after 'a'"),
        ("TRUE", 5, "expected a comparison"),
        ("1 + 2", 6, "expected a comparison"),
        ("a = 1 AND b", 12, "expected a comparison"),
        ("a = 1 b = 2", 7, "expected AND, OR or the end of the expression, found 'b'"),
        ("a = b = c", 7, "expected AND, OR or the end"),
        ("a < > 1", 5, "expected an expression after '<', found '>'"),
        ("a # 1", 3, "unexpected character '#'"),
        ("a = 1 ! 2", 7, "unexpected character '!'"),
        ("@p = 1", 1, "no value given for @p (parameters given: none)"),
        ("a = @p", 5, "no value given for @p"),
        ("a = @", 5, "expected a parameter name after '@'"),
        ("foo.bar = 1", 1, "unknown scope 'foo'"),
        ("user.a.b = 1", 7, "must be delimited"),
        ("sys. = 1", 6, "expected a property name after 'sys.'"),
        ("frob(1) = 1", 1, "unknown function frob()"),
        ("newid(1) = 1", 7, "newid() takes no argument, found '1'"),
        ("p(1, 2) = 1", 4, "p() takes one argument, then ')', found ','"),
        ("EXISTS(1)", 8, "expected a property name inside EXISTS()"),
        ("EXISTS(a", 9, "expected ')'"),
        ("EXISTS a", 8, "expected '(' after 'EXISTS'"),
        ("(a = 1) + 1 = 2", 1, "expected a value here, found a condition"),
        ("a = (b = 1)", 5, "expected a value here, found a condition"),
        ("NOT 1", 6, "expected a comparison"),
        ("NOT", 4, "expected an expression after 'NOT'"),
        ("AND a = 1", 1, "expected an expression, found 'AND'"),
        ("a = 1 OR", 9, "expected an expression after 'OR'"),
        ("1abc = 1", 2, "unexpected character 'a' after a number"),
        ("a = 1e999", 5, "out of the Double range"),
        ("9223372036854775808 = 1", 1, "out of the Int64 range"),
        ("a - 9223372036854775808 = 1", 5, "out of the Int64 range"),
        ("-(-9223372036854775808) = 1", 1, "out of the Int64 range"),
        ("a LIKE 5", 8, "the LIKE pattern must be a string"),
        ("a LIKE 'x' ESCAPE 'ab'", 19, "exactly one character"),
        ("a LIKE b ESCAPE ''", 17, "exactly one character"),
        ("a LIKE 'x!' ESCAPE '!'", 8, "ends with its escape character"),
        ("a IN (1, 2", 11, "expected ',' or ')'"),
        ("_a = 1", 1, "unexpected character '_'"),
        ("a = [] ", 5, "a property name cannot be empty"),
    ],
)
def test_syntax_errors_name_the_position(expression: str, position: int, fragment: str) -> None:
    message = bad(expression)
    assert message.startswith("sql_expression: ")
    assert f"at position {position}: " in message
    assert fragment in message
    assert "\n" not in message


def test_expression_length_limit() -> None:
    ok = "a = '" + "x" * (MAX_EXPRESSION_LENGTH - 6) + "'"
    assert len(ok) == MAX_EXPRESSION_LENGTH
    assert sql(ok).kind == "sql"
    message = bad(ok + " ")
    assert "1,025 characters is over the limit of 1,024" in message
    with pytest.raises(BadRequest, match="over the limit of 1,024"):
        compile_action("SET a = '" + "x" * MAX_EXPRESSION_LENGTH + "'")


def test_nesting_limit_and_long_flat_chains() -> None:
    assert match("(" * MAX_NESTING + "i = 5" + ")" * MAX_NESTING)
    assert "nests more than 64 levels" in bad("(" * 65 + "i = 5" + ")" * 65)
    assert "nests more than 64 levels" in bad("NOT " * 65 + "i = 5")
    assert "nests more than 64 levels" in bad("i = " + "-" * 65 + "5")
    alternating = "i = 5"
    for depth in range(MAX_NESTING - 2):  # truth() wraps it in NOT (...): two levels more
        alternating = f"{'i = 5 AND' if depth % 2 else f'i = {depth} OR'} ({alternating})"
    assert len(alternating) < MAX_EXPRESSION_LENGTH
    assert truth(alternating) == "T"
    # flat chains are not nesting: 1+1+...+1 over the whole 1,024 characters
    terms = (MAX_EXPRESSION_LENGTH - 10) // 2
    assert match("+".join(["1"] * terms) + f" = {terms}")
    assert match(" OR ".join(["i = 6"] * 100 + ["i = 5"]))


def test_any_whitespace_separates_tokens() -> None:
    assert match("i\t=\n5\r\nAND\u00a0s='abc'")


# -- Filter specs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "normal"),
    [
        (None, {"type": "true"}),
        ({"type": "true"}, {"type": "true"}),
        ({"type": "TRUE"}, {"type": "true"}),
        ({"type": "false"}, {"type": "false"}),
        (
            {"type": "sql", "sql_expression": "  a = 1 "},
            {"type": "sql", "sql_expression": "  a = 1 "},
        ),
        (
            {"type": "correlation", "label": "red", "correlation_id": "high"},
            {"type": "correlation", "correlation_id": "high", "subject": "red"},
        ),
        (
            {"type": "correlation", "to": "x", "subject": None, "properties": {}},
            {"type": "correlation", "to": "x"},
        ),
        (
            {"type": "correlation", "properties": {"color": "Red", "n": 1, "b": False, "z": None}},
            {"type": "correlation", "properties": {"color": "Red", "n": 1, "b": False, "z": None}},
        ),
    ],
)
def test_normalize_filter(spec: dict[str, Any] | None, normal: dict[str, Any]) -> None:
    assert normalize_filter(spec) == normal
    assert normalize_filter(normal) == normal
    assert compile_filter(spec).spec == normal
    assert compile_filter(spec).kind == normal["type"]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("1=1", "must be an object"),
        ({}, "'type' must be one of sql, correlation, true, false"),
        ({"type": "regex"}, "not 'regex'"),
        ({"type": "true", "sql_expression": "1=1"}, "unknown key 'sql_expression' for a true"),
        ({"type": "sql"}, "needs a non-empty 'sql_expression'"),
        ({"type": "sql", "sql_expression": ""}, "non-empty"),
        ({"type": "sql", "sql_expression": "   "}, "non-empty"),
        ({"type": "sql", "sql_expression": 5}, "sql_expression: must be a string"),
        ({"type": "sql", "sql_expression": "1=1", "parameters": []}, "must be an object"),
        ({"type": "sql", "sql_expression": "a=@p", "parameters": {"@p": [1]}}, "not list"),
        ({"type": "sql", "sql_expression": "a=@p", "parameters": {"@": 1}}, "non-empty"),
        ({"type": "sql", "sql_expression": "a=@p", "parameters": {"@q": 1}}, "given: @q"),
        ({"type": "correlation"}, "needs at least one field or property"),
        ({"type": "correlation", "properties": {}}, "needs at least one"),
        ({"type": "correlation", "label": "a", "subject": "b"}, "not both"),
        ({"type": "correlation", "to": ""}, "'to' must be a non-empty string"),
        ({"type": "correlation", "to": 5}, "'to' must be a non-empty string"),
        ({"type": "correlation", "colour": "red"}, "unknown key 'colour'"),
        ({"type": "correlation", "properties": []}, "'properties' must be an object"),
        ({"type": "correlation", "properties": {"": 1}}, "non-empty strings"),
        ({"type": "correlation", "properties": {"a": [1]}}, "not list"),
        ({"type": "correlation", "properties": {"a": 2**64}}, "Int64"),
        ({"type": "sql", "sql_expression": "a ="}, "syntax error at position 4"),
    ],
)
def test_bad_filter_specs(spec: Any, fragment: str) -> None:
    for function in (compile_filter, normalize_filter):
        with pytest.raises(BadRequest) as info:
            function(spec)
        assert fragment in info.value.message


def test_true_and_false_filters() -> None:
    assert compile_filter(None).matches(view())
    assert compile_filter({"type": "true"}).matches(view({}))
    assert not compile_filter({"type": "false"}).matches(view())


# -- Correlation filters -------------------------------------------------------------------


def correlation(**spec: Any) -> Any:
    return compile_filter({"type": "correlation", **spec})


def test_correlation_system_fields_exact_and_anded() -> None:
    v = view(
        {},
        correlation_id="high",
        message_id="m",
        to="t",
        reply_to="r",
        subject="red",
        session_id="s",
        reply_to_session_id="rs",
        content_type="ct",
    )
    every = {
        "correlation_id": "high",
        "message_id": "m",
        "to": "t",
        "reply_to": "r",
        "subject": "red",
        "session_id": "s",
        "reply_to_session_id": "rs",
        "content_type": "ct",
    }
    assert correlation(**every).matches(v)
    for field, value in every.items():
        assert correlation(**{field: value}).matches(v)
        assert not correlation(**{field: value.upper()}).matches(v)  # case-sensitive values
        assert not correlation(**(every | {field: value + "x"})).matches(v)  # AND
        assert not correlation(**{field: value}).matches(view({}))  # unset never matches
    assert correlation(label="red").matches(v)


def test_correlation_properties_typed_equality() -> None:
    v = view({"version": 2, "ratio": 2.0, "flag": True, "name": "Red", "nul": None})
    assert correlation(properties={"version": 2}).matches(v)
    assert not correlation(properties={"version": "2"}).matches(v)  # 5 != "5"
    assert not correlation(properties={"version": 2.0}).matches(v)
    assert correlation(properties={"ratio": 2.0}).matches(v)
    assert not correlation(properties={"ratio": 2}).matches(v)
    assert correlation(properties={"flag": True}).matches(v)
    assert not correlation(properties={"flag": 1}).matches(v)  # True is not 1
    assert not correlation(properties={"version": True}).matches(view({"version": 1}))
    assert correlation(properties={"name": "Red"}).matches(v)
    assert not correlation(properties={"name": "red"}).matches(v)
    assert correlation(properties={"NAME": "Red"}).matches(v)  # names case-insensitive
    assert correlation(properties={"nul": None}).matches(v)  # present with null
    assert not correlation(properties={"missing": None}).matches(v)
    assert not correlation(properties={"name": None}).matches(v)
    assert not correlation(properties={"version": 2, "name": "Blue"}).matches(v)
    assert correlation(properties={"version": 2, "name": "Red"}, subject="x").matches(
        view({"version": 2, "name": "Red"}, subject="x")
    )
    nan = correlation(properties={"x": math.nan})
    assert not nan.matches(view({"x": math.nan}))


def test_correlation_and_sql_agree_on_their_common_ground() -> None:
    spec = {"correlation_id": "c", "properties": {"color": "Red", "qty": 3}}
    text = "sys.CorrelationId = 'c' AND color = 'Red' AND qty = 3"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"color": "Red", "qty": 3}, "c"),
        ({"color": "Red", "qty": 3}, "d"),
        ({"color": "red", "qty": 3}, "c"),
        ({"color": "Red"}, "c"),
        ({"COLOR": "Red", "QTY": 3}, "c"),
    ]
    for props, cid in cases:
        v = view(props, correlation_id=cid)
        assert correlation(**spec).matches(v) == match(text, v)


# -- Actions -------------------------------------------------------------------------------


def act(text: str, v: MessageView | None = None) -> Message:
    compiled = compile_action(text)
    assert compiled is not None
    return compiled.apply(view() if v is None else v)


def test_no_action() -> None:
    assert compile_action(None) is None
    assert compile_action("") is None
    assert compile_action("  \n ") is None


def test_action_set_and_remove_user_properties() -> None:
    out = act(
        "SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';",
        view({"quantity": 10, "priority": "high", "color": "red"}),
    )
    assert out.application_properties == {"quantity": 5, "color": "red"}
    assert out.correlation_id == "low"
    out = act("SET color = 'blue' SET new = 1 REMOVE nothere", view({"color": "red"}))
    assert out.application_properties == {"color": "blue", "new": 1}
    out = act("SET COLOR = 'x'; remove [Other]", view({"color": "red", "other": 1}))
    assert out.application_properties == {"color": "x"}  # names case-insensitive
    assert act("REMOVE a", view({"a": 1})).application_properties is None
    assert act("SET a = nothere", view({})).application_properties == {"a": None}
    assert act("SET a = NULL", view({"a": 1})).application_properties == {"a": None}
    out = act("SET d = 3; SET i = 2.5", view({"d": 1.5, "i": 1}))
    assert out.application_properties == {"d": 3.0, "i": 2.5}
    assert type((out.application_properties or {})["d"]) is float


def test_action_statements_run_in_order() -> None:
    out = act("SET a = 1; SET b = a + 1; SET a = b * 10; SET sys.Label = a", view({}))
    assert out.application_properties == {"a": 20, "b": 2}
    assert out.subject == "20"
    assert act("REMOVE x; SET y = x", view({"x": 1})).application_properties == {"y": None}


def test_action_system_properties_and_conversions() -> None:
    v = view({"n": 42, "f": 2.5, "t": True})
    assert act("SET sys.Label = n", v).subject == "42"
    assert act("SET sys.Subject = f * 2", v).subject == "5"
    assert act("SET sys.To = t", v).to == "True"
    assert act("SET sys.ContentType = 1e20", v).content_type == "1E+20"
    assert act("SET sys.MessageId = 'new'; SET sys.ReplyTo = 'r'", v).message_id == "new"
    assert act("SET sys.SessionId = 's'; SET sys.PartitionKey = 's'", v).partition_key == "s"
    assert act("SET sys.ReplyToSessionId = n", v).reply_to_session_id == "42"
    assert act("SET sys.TimeToLive = 60000", v).time_to_live_ms == 60_000
    assert act("SET sys.TimeToLive = 1500.9", v).time_to_live_ms == 1500
    assert act("SET sys.ScheduledEnqueueTimeUtc = 1700000000000", v).scheduled_enqueue_time_ms == (
        1_700_000_000_000
    )
    removed = act(
        "REMOVE sys.Label; REMOVE sys.TimeToLive", view({}, subject="x", time_to_live_ms=5)
    )
    assert removed.subject is None and removed.time_to_live_ms is None
    assert act("SET sys.Label = NULL", view({}, subject="x")).subject is None


@pytest.mark.parametrize(
    ("text", "type_name"),
    [
        ("SET sys.MessageId = NULL", "ArgumentException"),
        ("SET sys.MessageId = ''", "ArgumentException"),
        ("SET sys.SessionId = '" + "x" * 129 + "'", "ArgumentOutOfRangeException"),
        ("SET sys.TimeToLive = 0", "ArgumentOutOfRangeException"),
        ("SET sys.TimeToLive = -5", "ArgumentOutOfRangeException"),
        ("SET sys.TimeToLive = 'PT1M'", "InvalidCastException"),
        ("SET sys.TimeToLive = TRUE", "InvalidCastException"),
        ("SET sys.ScheduledEnqueueTimeUtc = -1", "ArgumentOutOfRangeException"),
        ("SET sys.SessionId = 'a'; SET sys.PartitionKey = 'b'", "InvalidOperationException"),
        ("SET a = sys.Bogus", "FilterException"),
        ("SET a = 1 / 0", "DivideByZeroException"),
        ("SET a = 'x' - 1", "InvalidOperationException"),
    ],
)
def test_action_runtime_errors(text: str, type_name: str) -> None:
    compiled = compile_action(text)
    assert compiled is not None
    with pytest.raises(FilterEvaluationError) as info:
        compiled.apply(view({}))
    assert info.value.type_name == type_name


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("SET sys.SequenceNumber = 1", "position 5: sys.SequenceNumber is read-only"),
        ("SET sys.EnqueuedTimeUtc = 1", "read-only"),
        ("SET sys.Size = 1", "read-only"),
        ("SET sys.DeliveryCount = 1", "read-only"),
        ("REMOVE sys.DeadLetterSource", "read-only"),
        ("SET sys.EnqueuedSequenceNumber = 1", "read-only"),
        ("SET sys.Bogus = 1", "position 5: sys.Bogus is not a system property"),
        ("REMOVE sys.MessageId", "sys.MessageId cannot be removed"),
        ("SET a 1", "position 7: expected '=' after 'a', found '1'"),
        ("SET = 1", "position 5: expected a property after 'SET'"),
        ("SET NULL = 1", "expected a property after 'SET'"),
        ("UPDATE a = 1", "position 1: expected SET or REMOVE, found 'UPDATE'"),
        ("SET a = 1;;", "position 11: expected SET or REMOVE after ';', found ';'"),
        ("SET a = 1 b = 2", "position 11: expected ';', SET, REMOVE or the end of the action"),
        ("SET a = b = 1", "expected ';', SET, REMOVE"),
        ("SET a = (b = 1)", "expected a value here, found a condition"),
        ("SET a =", "position 8: expected an expression after '='"),
        ("SET p('x') = 1", "position 6: expected '=' after 'p', found '('"),
        (";", "expected SET or REMOVE, found ';'"),
    ],
)
def test_action_compile_errors(text: str, fragment: str) -> None:
    with pytest.raises(BadRequest) as info:
        compile_action(text)
    assert info.value.message.startswith("action: ")
    assert fragment in info.value.message


def test_action_statement_limit() -> None:
    ok = "; ".join(f"SET p{i} = {i}" for i in range(MAX_ACTION_STATEMENTS))
    out = act(ok, view({}))
    assert len(out.application_properties or {}) == MAX_ACTION_STATEMENTS
    with pytest.raises(BadRequest, match="at most 32 statements"):
        compile_action(ok + "; REMOVE x")


def test_action_never_changes_its_input() -> None:
    props: dict[str, Any] = {"a": 1, "b": "x"}
    message = Message(message_id="m", subject="s", application_properties=props)
    before = encode_message(message)
    v = MessageView(message, sequence_number=1, enqueued_time_ms=0, size=10)
    out = act("SET a = 2; REMOVE b; SET c = 3; SET sys.Label = 'new'; SET sys.TimeToLive = 9", v)
    assert encode_message(message) == before
    assert props == {"a": 1, "b": "x"}
    assert v.properties is props
    assert out is not message and out.application_properties is not props
    assert out.application_properties == {"a": 2, "c": 3}
    assert (out.subject, out.time_to_live_ms, out.message_id) == ("new", 9, "m")
    # reading through a filter still sees the original
    assert match("a = 1 AND b = 'x' AND sys.Label = 's'", v)


# -- .NET text conversion ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.5, "1.5"),
        (2.0, "2"),
        (-2.0, "-2"),
        (0.1, "0.1"),
        (123.456, "123.456"),
        (1e14, "100000000000000"),
        (123456789012345.6, "123456789012345.6"),
        (1e15, "1E+15"),
        (1.5e300, "1.5E+300"),
        (1.2345678901234568e20, "1.2345678901234568E+20"),
        (0.0001, "0.0001"),
        (0.00012, "0.00012"),
        (1e-05, "1E-05"),
        (-2.5e-10, "-2.5E-10"),
        (5e-324, "5E-324"),
        (0.0, "0"),
        (-0.0, "-0"),
        (math.nan, "NaN"),
        (math.inf, "∞"),
        (-math.inf, "-∞"),
    ],
)
def test_format_double_matches_dotnet(value: float, text: str) -> None:
    assert format_double(value) == text


def test_to_text() -> None:
    assert [to_text(x) for x in ("a", True, False, 42, -7, 2.5, None)] == [
        "a",
        "True",
        "False",
        "42",
        "-7",
        "2.5",
        "",
    ]


# -- Properties: a reference interpreter --------------------------------------------------


class RefError(Exception):
    def __init__(self, type_name: str) -> None:
        super().__init__(type_name)
        self.type_name = type_name


NAMES = ["a", "b", "cc", "A"]  # in messages; "A" and "a" differ only in case
REF_NAMES = ["a", "A", "b", "B", "cc", "Cc", "zz"]  # in expressions; "zz" is never set
SYS_REFS = {"Label": "subject", "MessageId": "message_id", "TimeToLive": "time_to_live_ms"}
BROKER_REFS = {"SequenceNumber": 7, "DeliveryCount": 0, "Size": 321}

small_text = st.text(alphabet="ab%_!.*x'", max_size=4)
prop_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([INT64_MAX, INT64_MIN, 2**40, 0]),
    st.sampled_from([0.0, -0.0, 0.5, -2.5, 1e300, math.inf, math.nan, 3.0]),
    small_text,
)
const_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**62), 2**62),
    st.integers(-3, 3),
    st.sampled_from([0.0, 0.5, -2.5, 1e-05, 1e20, 3.0]),
    small_text,
)


def render_const(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    text = repr(value)
    return f"({text})" if text.startswith("-") else text


@st.composite
def user_ref(draw: Any) -> tuple[str, Any]:
    name = draw(st.sampled_from(REF_NAMES))
    style = draw(st.sampled_from(["plain", "user", "bracket", "quote"]))
    text = {"plain": name, "user": f"user.{name}", "bracket": f"[{name}]", "quote": f'"{name}"'}
    return text[style], ("prop", name)


@st.composite
def sys_ref(draw: Any) -> tuple[str, Any]:
    name = draw(st.sampled_from([*SYS_REFS, *BROKER_REFS, "Bogus"]))
    spelled = draw(st.sampled_from([name, name.lower(), name.upper()]))
    return f"sys.{spelled}", ("sys", name)


def value_tree(children: Any) -> Any:
    def binary(parts: tuple[Any, str, Any]) -> tuple[str, Any]:
        (lt, ln), op, (rt, rn) = parts
        return f"({lt} {op} {rt})", ("arith", op, ln, rn)

    def negate(part: tuple[str, Any]) -> tuple[str, Any]:
        return f"-({part[0]})", ("neg", part[1])

    return st.one_of(
        st.tuples(children, st.sampled_from("+-*/%"), children).map(binary),
        children.map(negate),
    )


leaf_values = st.one_of(
    const_values.map(lambda c: (render_const(c), ("const", c))),
    user_ref(),
    user_ref(),
    sys_ref(),
)
values = st.recursive(leaf_values, value_tree, max_leaves=4)


@st.composite
def like_pattern(draw: Any) -> tuple[str, str | None]:
    escape = draw(st.sampled_from([None, "!", "%"]))
    pieces = draw(st.lists(st.sampled_from(["a", "b", "%", "_", ".", "*", "x", "ESC"]), max_size=5))
    pattern = ""
    for piece in pieces:
        if piece == "ESC":
            if escape is not None:
                pattern += escape + draw(st.sampled_from(["%", "_", "a", escape]))
        elif piece != escape:
            pattern += piece
    return pattern, escape


@st.composite
def leaf_predicate(draw: Any) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "isnull", "exists", "in", "like"]))
    if kind == "cmp":
        (lt, ln), (rt, rn) = draw(values), draw(values)
        op = draw(st.sampled_from(["=", "<>", "!=", "<", "<=", ">", ">="]))
        return f"({lt} {op} {rt})", ("cmp", "<>" if op == "!=" else op, ln, rn)
    if kind in ("isnull", "exists"):
        text, node = draw(st.one_of(user_ref(), sys_ref()))
        if kind == "exists":
            return f"EXISTS({text})", ("exists", node)
        negated = draw(st.booleans())
        return f"({text} IS {'NOT ' if negated else ''}NULL)", ("isnull", node, negated)
    negated = draw(st.booleans())
    not_ = "NOT " if negated else ""
    operand_text, operand = draw(values)
    if kind == "in":
        items = draw(st.lists(values, min_size=1, max_size=3))
        joined = ", ".join(text for text, _ in items)
        return (
            f"({operand_text} {not_}IN ({joined}))",
            ("in", operand, [node for _, node in items], negated),
        )
    if draw(st.booleans()):
        pattern, escape = draw(like_pattern())
        pattern_text, pattern_node = render_const(pattern), ("const", pattern)
    else:
        (pattern_text, pattern_node), escape = draw(user_ref()), None
    escape_text = "" if escape is None else f" ESCAPE {render_const(escape)}"
    return (
        f"({operand_text} {not_}LIKE {pattern_text}{escape_text})",
        ("like", operand, pattern_node, escape, negated),
    )


def predicate_tree(children: Any) -> Any:
    def logic(parts: tuple[Any, str, Any]) -> tuple[str, Any]:
        (lt, ln), op, (rt, rn) = parts
        return f"({lt} {op} {rt})", (op.upper(), ln, rn)

    return st.one_of(
        st.tuples(children, st.sampled_from(["AND", "OR", "and", "Or"]), children).map(logic),
        children.map(lambda p: (f"(NOT {p[0]})", ("not", p[1]))),
    )


predicates = st.recursive(leaf_predicate(), predicate_tree, max_leaves=5)


@st.composite
def messages(draw: Any) -> MessageView:
    props = draw(st.dictionaries(st.sampled_from(NAMES), prop_values, max_size=4))
    fields = {
        "subject": draw(st.one_of(st.none(), small_text)),
        "message_id": draw(st.one_of(st.none(), small_text)),
        "time_to_live_ms": draw(st.one_of(st.none(), st.integers(1, 10))),
    }
    return view(props, seq=7, size=321, **fields)


def ref_lookup(v: MessageView, name: str) -> Any:
    props = dict(v.properties)
    if name in props:
        return props[name]
    for key, value in props.items():
        if key.lower() == name.lower():
            return value
    return None


def ref_value(node: Any, v: MessageView) -> Any:
    kind = node[0]
    if kind == "const":
        return node[1]
    if kind == "prop":
        return ref_lookup(v, node[1])
    if kind == "sys":
        if node[1] in SYS_REFS:
            return getattr(v.message, SYS_REFS[node[1]])
        if node[1] in BROKER_REFS:
            return BROKER_REFS[node[1]]
        raise RefError("FilterException")
    if kind == "neg":
        x = ref_value(node[1], v)
        if x is None:
            return None
        if type(x) not in (int, float):
            raise RefError("InvalidOperationException")
        return ref_int(-x) if type(x) is int else -x
    a, b = ref_value(node[2], v), ref_value(node[3], v)
    return ref_arith(node[1], a, b)


def ref_int(n: int) -> int:
    if not -(2**63) <= n < 2**63:
        raise RefError("OverflowException")
    return n


def ref_arith(op: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    numbers = (int, float)
    if op == "+" and str in (type(a), type(b)) and {type(a), type(b)} <= {str, int, float, bool}:
        return to_text(a) + to_text(b)
    if type(a) not in numbers or type(b) not in numbers:
        raise RefError("InvalidOperationException")
    if type(a) is int and type(b) is int:
        if op in "/%" and b == 0:
            raise RefError("DivideByZeroException")
        quotient = math.trunc(Fraction(a, b)) if b else 0
        result = {"+": a + b, "-": a - b, "*": a * b, "/": quotient, "%": a - b * quotient}[op]
        return ref_int(result)
    x, y = float(a), float(b)
    if op == "/" and y == 0:
        return math.nan if x == 0 or x != x else math.copysign(math.inf, x) * math.copysign(1, y)
    if op == "%":
        return math.nan if y == 0 or math.isinf(x) else math.fmod(x, y)
    return {"+": x + y, "-": x - y, "*": x * y, "/": x / y if y else 0.0}[op]


def ref_compare(op: str, a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    numeric = type(a) in (int, float) and type(b) in (int, float)
    if type(a) is not type(b) and numeric:
        a, b = float(a), float(b)
    same = type(a) is type(b)
    if op in ("=", "<>"):
        equal = same and a == b
        return equal if op == "=" else not equal
    if not same or type(a) is bool:
        return None
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def ref_like(s: str, pattern: str, escape: str | None) -> bool:
    tokens: list[tuple[str, str]] = []  # ("lit", c) | ("any", "") | ("one", "")
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            if i + 1 == len(pattern):
                raise RefError("ArgumentException")
            tokens.append(("lit", pattern[i + 1]))
            i += 2
            continue
        tokens.append(("any", "") if c == "%" else ("one", "") if c == "_" else ("lit", c))
        i += 1
    # dynamic programming: reach[j] = the first j characters of s match the tokens so far
    reach = [True] + [False] * len(s)
    for kind, c in tokens:
        if kind == "any":
            for j in range(1, len(s) + 1):
                reach[j] = reach[j] or reach[j - 1]
        else:
            reach = [False] + [reach[j] and (kind == "one" or s[j] == c) for j in range(len(s))]
    return reach[len(s)]


def ref_pred(node: Any, v: MessageView) -> bool | None:
    kind = node[0]
    if kind == "cmp":
        a = ref_value(node[2], v)
        b = ref_value(node[3], v)
        return ref_compare(node[1], a, b)
    if kind == "AND" or kind == "OR":
        stop = kind == "OR"
        left = ref_pred(node[1], v)
        if left is stop:
            return stop
        right = ref_pred(node[2], v)
        if right is stop:
            return stop
        return None if left is None or right is None else not stop
    if kind == "not":
        x = ref_pred(node[1], v)
        return None if x is None else not x
    if kind == "isnull":
        return (ref_value(node[1], v) is None) != node[2]
    if kind == "exists":
        target = node[1]
        if target[0] == "sys":
            if target[1] in SYS_REFS:
                return getattr(v.message, SYS_REFS[target[1]]) is not None
            return target[1] in BROKER_REFS
        return any(key.lower() == target[1].lower() for key in v.properties)
    if kind == "in":
        x = ref_value(node[1], v)
        items = [ref_value(item, v) for item in node[2]]
        if x is None:
            return None
        found = any(ref_compare("=", x, item) is True for item in items)
        return found != node[3]
    _, operand, pattern_node, escape, negated = node
    s, pattern = ref_value(operand, v), ref_value(pattern_node, v)
    if s is None or pattern is None:
        return None
    if not isinstance(pattern, str) or isinstance(pattern, bool):
        raise RefError("ArgumentException")
    if type(s) is not str:
        return None
    return ref_like(s, pattern, escape) != negated


def outcome(function: Any) -> tuple[str, Any]:
    try:
        return "ok", function()
    except (FilterEvaluationError, RefError) as exc:
        return "error", exc.type_name


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=predicates, v=messages())
def test_compiled_filters_agree_with_a_reference_interpreter(tree: Any, v: MessageView) -> None:
    text, node = tree
    compiled = sql(text)
    assert outcome(lambda: compiled.matches(v)) == outcome(lambda: ref_pred(node, v) is True), text


@settings(max_examples=300, deadline=None)
@given(
    s=st.text(alphabet="ab%_!.*\\\n", max_size=8),
    pattern=st.text(alphabet="ab%_!.*\\\n", max_size=6),
    escape=st.sampled_from([None, "!", "%", "\\", "a"]),
)
def test_like_agrees_with_a_reference_matcher(s: str, pattern: str, escape: str | None) -> None:
    v = view({"s": s, "p": pattern, "e": escape})
    expected = outcome(lambda: ref_like(s, pattern, escape))
    esc = "" if escape is None else " ESCAPE e"
    assert outcome(lambda: sql(f"s LIKE p{esc}").matches(v)) == expected
    literal = "'" + pattern.replace("'", "''") + "'"
    esc_literal = "" if escape is None else f" ESCAPE '{escape}'"
    try:
        compiled = sql(f"s LIKE {literal}{esc_literal}")
    except BadRequest:
        assert expected == ("error", "ArgumentException")
    else:
        assert outcome(lambda: compiled.matches(v)) == expected


def regex_like(s: str, pattern: str) -> bool:
    """A second, independent reference for LIKE without ESCAPE: a translated regex."""
    translated = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(translated, s, re.DOTALL) is not None


# Patterns built as pieces joined by %, so several % (and pieces that could overlap) are common.
like_pieces = st.lists(st.text(alphabet="ab_", max_size=3), min_size=1, max_size=5)


@settings(max_examples=400, deadline=None)
@given(
    s=st.text(alphabet="ab\n", max_size=10),
    pieces=like_pieces,
    edges=st.sampled_from(["", "%"]),
)
def test_like_with_several_percents_agrees_with_a_regex(
    s: str, pieces: list[str], edges: str
) -> None:
    pattern = edges + "%".join(pieces) + edges
    expected = regex_like(s, pattern)
    assert ref_like(s, pattern, None) == expected, pattern
    v = view({"s": s, "p": pattern})
    assert sql("s LIKE p").matches(v) is expected, pattern
    literal = "'" + pattern + "'"
    assert sql(f"s LIKE {literal}").matches(v) is expected, pattern


correlation_specs = st.fixed_dictionaries(
    {"type": st.just("correlation")},
    optional={
        "correlation_id": st.text(min_size=1, max_size=3),
        "to": st.text(min_size=1, max_size=3),
        "label": st.sampled_from(["red", "Red"]),
        "content_type": st.just("ct"),
        "properties": st.dictionaries(st.sampled_from(NAMES), prop_values, max_size=3),
    },
)
sql_specs = predicates.map(lambda tree: {"type": "sql", "sql_expression": tree[0]})
any_specs = st.one_of(
    correlation_specs, sql_specs, st.sampled_from([None, {"type": "true"}, {"type": "False"}])
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=any_specs, v=messages())
def test_normalize_round_trips(spec: Any, v: MessageView) -> None:
    try:
        normal = normalize_filter(spec)
    except BadRequest:  # only an empty correlation filter is refused
        assert set(spec) <= {"type", "properties"} and not spec.get("properties")
        return
    assert normalize_filter(normal) == normal
    original, again = compile_filter(spec), compile_filter(normal)
    assert again.kind == original.kind == normal["type"]
    assert again.spec == original.spec == normal
    assert outcome(lambda: original.matches(v)) == outcome(lambda: again.matches(v))


TOKENS = [
    "a", "b", "sys.Label", "sys.Nope", "user.a", "[a b]", '"q"', "1", "2.5", "1e3", "'s'", "''",
    "TRUE", "NULL", "NOT", "AND", "OR", "IS", "IN", "LIKE", "ESCAPE", "EXISTS", "SET", "REMOVE",
    "=", "<>", "!=", "<", ">=", "+", "-", "*", "/", "%", "(", ")", ",", ";", ".", "p(", "newid()",
]  # fmt: skip


def check_garbage(text: str) -> None:
    for compile_it in (
        lambda: sql(text),
        lambda: compile_filter({"type": "correlation", "properties": {text: text}}),
    ):
        try:
            compiled = compile_it()
        except BadRequest as exc:
            assert exc.message and "\n" not in exc.message
            continue
        try:
            compiled.matches(view(subject="x"))
        except FilterEvaluationError as exc:
            assert exc.type_name != "InternalError", exc
    try:
        action = compile_action(text)
    except BadRequest:
        return
    if action is not None:
        try:
            action.apply(view(subject="x"))
        except FilterEvaluationError as exc:
            assert exc.type_name != "InternalError", exc


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40))
def test_any_text_compiles_or_is_a_bad_request(text: str) -> None:
    check_garbage(text)


@settings(max_examples=400, deadline=None)
@given(tokens=st.lists(st.sampled_from(TOKENS), max_size=12))
def test_token_soup_compiles_or_is_a_bad_request(tokens: list[str]) -> None:
    check_garbage(" ".join(tokens))


@settings(max_examples=150, deadline=None)
@given(
    props=st.dictionaries(st.sampled_from(NAMES), prop_values, max_size=4),
    statements=st.lists(
        st.tuples(st.booleans(), st.sampled_from(REF_NAMES), const_values), min_size=1, max_size=8
    ),
)
def test_user_property_actions_agree_with_a_model(
    props: dict[str, Any], statements: list[tuple[bool, str, Any]]
) -> None:
    model = dict(props)
    for remove, name, value in statements:
        key = next((k for k in model if k == name), None) or next(
            (k for k in model if k.lower() == name.lower()), None
        )
        if remove:
            model.pop(key, None)  # type: ignore[arg-type]
        else:
            if key is not None and type(model[key]) is float and type(value) is int:
                value = float(value)
            model[key or name] = value
    text = "; ".join(
        f"REMOVE [{name}]" if remove else f"SET [{name}] = {render_const(value)}"
        for remove, name, value in statements
    )
    message = Message(application_properties=dict(props))
    out = act(text, MessageView(message, sequence_number=1, enqueued_time_ms=0, size=1))
    assert repr(out.application_properties or {}) == repr(model)  # repr: nan equals nan
    assert message.application_properties == props


# -- Typed property values (timestamps, UUIDs, binary) ---------------------------------------

TYPED: dict[str, Any] = {
    "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    "later": datetime(2026, 6, 1, tzinfo=UTC),
    "id": uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e"),
    "id2": uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e"),
    "blob": b"\x00\xff",
    "s": "abc",
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("at = at", "T"),
        ("at < later", "T"),
        ("at > later", "F"),
        ("id = id2", "T"),
        ("blob = blob", "T"),
        # compared with another type: false (=) or unknown (ordering), never a crash
        ("at = 5", "F"),
        ("id = '0f8fad5b-d9cb-469f-a165-70867728950e'", "F"),
        ("at < 5", "U"),
        ("blob > s", "U"),
        ("at IS NULL", "F"),
        ("EXISTS(blob)", "T"),
        ("at IN (1, 'x')", "F"),
        ("s LIKE 'a%' AND id <> id2", "F"),
    ],
)
def test_typed_values_compare_by_type(expression: str, expected: str) -> None:
    assert truth(expression, view(TYPED)) == expected


def test_typed_values_in_arithmetic_and_like_are_evaluation_errors_or_unknown() -> None:
    err = runtime_error("at + 1 = 2", view(TYPED))
    assert "System.DateTime" in err.description
    assert truth("blob LIKE 'a%'", view(TYPED)) in ("F", "U")
    assert to_text(TYPED["at"]) == "01/02/2026 03:04:05"
    assert to_text(TYPED["id"]) == "0f8fad5b-d9cb-469f-a165-70867728950e"


def test_an_action_copies_a_typed_value_and_keeps_its_type() -> None:
    compiled = compile_action("SET copy = at; SET other = id")
    assert compiled is not None
    out = compiled.apply(view(TYPED))
    props = out.application_properties or {}
    assert props["copy"] == TYPED["at"] and props["other"] == TYPED["id"]
    assert type(props["other"]) is uuid.UUID
