"""Name rules, entity identity, entity folders and entity paths (daemon/README.md §14.8, §14.9,
§4.2)."""

from __future__ import annotations

from itertools import cycle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sbctl.core.errors import BadRequest
from sbctl.core.names import (
    EntityPath,
    display_value,
    entity_dir_name,
    entity_key,
    entity_name_from_dir,
    parse_entity_path,
    validate_entity_name,
    validate_namespace_name,
    validate_rule_name,
    validate_subscription_name,
)

# --- namespaces (daemon/README.md §14.8)
# -------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["abcdef", "A1b2c3", "my-namespace", "x" * 50, "Contoso-Orders-01", "sbctl-sbx", "a-mgmt1"],
)
def test_namespace_accepted(name: str) -> None:
    assert validate_namespace_name(name) == name


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("ab", "must be 6-50 characters"),
        ("abcde", "must be 6-50 characters"),
        ("", "must be 6-50 characters"),
        ("x" * 51, "must be 6-50 characters"),
        ("1abcdef", "must start with a letter"),
        ("-abcdef", "must start with a letter"),
        ("abc_def", "only letters, digits and '-'"),
        ("abc.def", "only letters, digits and '-'"),
        ("abcdéf", "only letters, digits and '-'"),
        ("abc def", "only letters, digits and '-'"),
        ("abcdef\n", "only letters, digits and '-'"),
        ("abcdef-", "must not end in '-'"),
        ("orders-sb", "must not end in '-sb'"),
        ("orders-SB", "must not end in '-sb'"),
        ("orders-mgmt", "must not end in '-mgmt'"),
        ("orders-Mgmt", "must not end in '-mgmt'"),
    ],
)
def test_namespace_refused(name: str, rule: str) -> None:
    with pytest.raises(BadRequest) as info:
        validate_namespace_name(name)
    message = str(info.value)
    assert message.startswith(f"invalid namespace name {display_value(name)}: ")
    assert rule in message
    assert "\n" not in message


def test_namespace_error_example_from_brief() -> None:
    with pytest.raises(BadRequest, match=r"^invalid namespace name 'ab': must be 6-50 characters$"):
        validate_namespace_name("ab")


# --- queues and topics (daemon/README.md §14.9)
# ------------------------------------------------------

ACCEPTED_ENTITIES = [
    "orders",
    "Orders",
    "a",
    "a/b/c",
    "a.b-c_d",
    "x" * 260,
    "/".join(["ab"] * 86) + "/a",  # 260 characters, 86 slashes
    "...a",
    "a..b",
    "..a/b..",
    "subscriptions",
    "a/subscriptions",
    "2024",
]

REFUSED_ENTITIES = [
    ("", "must not be empty"),
    ("x" * 261, "at most 260 characters"),
    (".", "'.' or '..' segment"),
    ("..", "'.' or '..' segment"),
    ("a/../../b", "'.' or '..' segment"),
    ("a/./b", "'.' or '..' segment"),
    ("/etc/passwd", "must not start or end with '/'"),
    ("a/", "must not end with '/'; for its dead-letter queue"),
    ("/", "must not start or end with '/'"),
    ("a//b", "empty segment"),
    ("a\x00b", "control characters"),
    ("a\nb", "control characters"),
    ("a\rb", "control characters"),
    ("a\x1b[31mb", "control characters"),
    ("a\x7fb", "control characters"),
    ("a\x85b", "control characters"),
    ("a b", "whitespace"),
    ("a\u00a0b", "whitespace"),
    ("a\u2028b", "whitespace"),
    ("a\\b", "'\\'"),
    ("..\\..\\windows", "'\\'"),
    ("a@b", "'@', '?', '#' or '*'"),
    ("a?b", "'@', '?', '#' or '*'"),
    ("a#b", "'@', '?', '#' or '*'"),
    ("a*", "'@', '?', '#' or '*'"),
    ("é", "character 'é' is not allowed"),
    ("caf\u00e9", "is not allowed"),
    ("a\u202eb", "is not allowed"),
    ("ａｂ", "is not allowed"),
    ("orders/$deadletterqueue", "character '$' is not allowed"),
    ("$Default", "character '$' is not allowed"),
    ("a%2Fb", "character '%' is not allowed"),
    ("a:b", "character ':' is not allowed"),
    ("a~b", "character '~' is not allowed"),
    ("t/subscriptions/s", "'subscriptions' may only be the last segment"),
    ("Subscriptions/s", "'subscriptions' may only be the last segment"),
    ("a/SUBSCRIPTIONS/b/c", "'subscriptions' may only be the last segment"),
]


@pytest.mark.parametrize("name", ACCEPTED_ENTITIES)
def test_entity_accepted(name: str) -> None:
    assert validate_entity_name(name) == name
    assert validate_entity_name(name, "topic") == name


@pytest.mark.parametrize(("name", "rule"), REFUSED_ENTITIES)
def test_entity_refused(name: str, rule: str) -> None:
    with pytest.raises(BadRequest) as info:
        validate_entity_name(name, "topic")
    message = str(info.value)
    assert message.startswith("invalid topic name ")
    assert rule in message
    assert message.isprintable(), message  # hostile values are escaped, never raw


def test_entity_error_escapes_and_truncates_hostile_values() -> None:
    with pytest.raises(BadRequest) as info:
        validate_entity_name("\x1b]0;pwned\x07" + "x" * 10_000)
    message = str(info.value)
    assert "\\x1b" in message and "\x1b" not in message
    assert "(10010 characters)" in message
    assert len(message) < 200


# --- subscriptions and rules (daemon/README.md §14.9, §10.1)
# -----------------------------------------

CHILD_ACCEPTED = ["a", "S1", "audit", "a.b-c_d", "x" * 50, "9", "A-1"]
CHILD_REFUSED = [
    ("", "must be 1-50 characters"),
    ("x" * 51, "must be 1-50 characters"),
    ("-a", "must start and end with a letter or digit"),
    ("a-", "must start and end with a letter or digit"),
    ("_a", "must start and end with a letter or digit"),
    (".", "must start and end with a letter or digit"),
    ("..", "must start and end with a letter or digit"),
    ("a.", "must start and end with a letter or digit"),
    ("a/b", "may contain only letters, digits"),
    ("a b", "may contain only letters, digits"),
    ("a\x00", "may contain only letters, digits"),
    ("é", "may contain only letters, digits"),
    ("$deadletterqueue", "may contain only letters, digits"),
]


@pytest.mark.parametrize("name", CHILD_ACCEPTED)
def test_subscription_and_rule_accepted(name: str) -> None:
    assert validate_subscription_name(name) == name
    assert validate_rule_name(name) == name


@pytest.mark.parametrize(("name", "rule"), CHILD_REFUSED)
def test_subscription_refused(name: str, rule: str) -> None:
    with pytest.raises(BadRequest, match=r"^invalid subscription name ") as info:
        validate_subscription_name(name)
    assert rule in str(info.value)


@pytest.mark.parametrize(("name", "rule"), CHILD_REFUSED)
def test_rule_refused(name: str, rule: str) -> None:
    with pytest.raises(BadRequest, match=r"^invalid rule name ") as info:
        validate_rule_name(name)
    assert rule in str(info.value)


def test_default_rule_name() -> None:
    assert validate_rule_name("$Default") == "$Default"
    for near_miss in ("$default", "$DEFAULT", "$Default ", "$Defaults"):
        with pytest.raises(BadRequest):
            validate_rule_name(near_miss)
    with pytest.raises(BadRequest):
        validate_subscription_name("$Default")


# --- identity and folders ----------------------------------------------------------------


def test_entity_key_is_case_insensitive() -> None:
    assert entity_key("Orders/EU") == entity_key("orders/eu") == "orders/eu"
    assert entity_key("orders") != entity_key("orders2")


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("orders", "orders"),
        ("Orders", "orders"),
        ("a/B/c", "a%2Fb%2Fc"),
        ("..a/b..", "..a%2Fb.."),
    ],
)
def test_entity_dir_name_examples(name: str, folder: str) -> None:
    assert entity_dir_name(name) == folder
    assert entity_name_from_dir(folder) == entity_key(name)


@pytest.mark.parametrize("name", ["..", "a/../b", "/etc/passwd", "a\x00b", "a//b", "a%2Fb", ""])
def test_entity_dir_name_refuses_invalid_names(name: str) -> None:
    with pytest.raises(BadRequest):
        entity_dir_name(name)


def test_entity_dir_name_long_names_are_hashed_and_fit_one_component() -> None:
    many_slashes = "/".join(["a"] * 130)  # 259 characters, 387 once encoded
    other = "/".join(["a"] * 129) + "b"
    folder = entity_dir_name(many_slashes)
    assert len(folder.encode()) <= 240
    assert "~" in folder and "/" not in folder
    assert folder != entity_dir_name(other)
    prefix, _, digest = folder.partition("~")
    assert many_slashes.replace("/", "%2F").startswith(prefix) and not prefix.endswith(("%", "%2"))
    assert len(digest) == 16
    assert entity_dir_name(many_slashes.upper()) == folder
    with pytest.raises(ValueError, match="hashed"):
        entity_name_from_dir(folder)


@pytest.mark.parametrize(
    "folder", ["", ".", "..", "Orders", "a%2fb", "a%2", "a%", "a%2F%2Fb", "%2Fa", "a b", "a/b"]
)
def test_entity_name_from_dir_refuses_foreign_names(folder: str) -> None:
    with pytest.raises(ValueError, match="not an entity folder name"):
        entity_name_from_dir(folder)


_SEGMENT_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_"
segments = st.text(_SEGMENT_ALPHABET, min_size=1, max_size=40).filter(
    lambda s: s not in (".", "..") and s.lower() != "subscriptions"
)
entity_names = (
    st.lists(segments, min_size=1, max_size=90).map("/".join).filter(lambda name: len(name) <= 260)
)
hostile_text = st.text(st.characters(codec="utf-8"), max_size=300)


@given(entity_names)
def test_valid_entity_folder_is_one_safe_component(name: str) -> None:
    validate_entity_name(name)
    folder = entity_dir_name(name)
    assert folder not in ("", ".", "..")
    assert "/" not in folder and "\x00" not in folder and "\\" not in folder
    assert len(folder.encode()) <= 240
    if "~" not in folder:
        assert entity_name_from_dir(folder) == entity_key(name)


@given(entity_names, entity_names)
def test_entity_folders_are_equal_exactly_for_the_same_entity(a: str, b: str) -> None:
    assert (entity_dir_name(a) == entity_dir_name(b)) == (entity_key(a) == entity_key(b))
    assert entity_dir_name(a) == entity_dir_name(a.swapcase())


@given(hostile_text)
def test_any_text_is_either_refused_or_a_safe_folder(text: str) -> None:
    try:
        folder = entity_dir_name(text)
    except BadRequest as err:
        assert str(err).isprintable()
        return
    assert folder not in (".", "..") and "/" not in folder and folder.isascii()


# --- entity paths (daemon/README.md §4.2, §25) -------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected", "canonical"),
    [
        ("orders", EntityPath("orders"), "orders"),
        ("a/b/c", EntityPath("a/b/c"), "a/b/c"),
        ("a/subscriptions", EntityPath("a/subscriptions"), "a/subscriptions"),
        (
            "orders/$deadletterqueue",
            EntityPath("orders", None, "deadletter"),
            "orders/$deadletterqueue",
        ),
        (
            "orders/$DeadLetterQueue",
            EntityPath("orders", None, "deadletter"),
            "orders/$deadletterqueue",
        ),
        (
            "a/b/$DEADLETTERQUEUE",
            EntityPath("a/b", None, "deadletter"),
            "a/b/$deadletterqueue",
        ),
        (
            "orders/$Transfer/$DeadLetterQueue",
            EntityPath("orders", None, "transfer-deadletter"),
            "orders/$Transfer/$DeadLetterQueue",
        ),
        (
            "orders/$transfer/$deadletterqueue",
            EntityPath("orders", None, "transfer-deadletter"),
            "orders/$Transfer/$DeadLetterQueue",
        ),
        (
            "topic/subscriptions/sub",
            EntityPath("topic", "sub"),
            "topic/subscriptions/sub",
        ),
        (
            "topic/Subscriptions/sub/$DeadLetterQueue",
            EntityPath("topic", "sub", "deadletter"),
            "topic/subscriptions/sub/$deadletterqueue",
        ),
        (
            "topic/SUBSCRIPTIONS/sub/$transfer/$deadletterqueue",
            EntityPath("topic", "sub", "transfer-deadletter"),
            "topic/subscriptions/sub/$Transfer/$DeadLetterQueue",
        ),
        (
            "a/b/subscriptions/s-1",
            EntityPath("a/b", "s-1"),
            "a/b/subscriptions/s-1",
        ),
        (
            "t/subscriptions/subscriptions",
            EntityPath("t", "subscriptions"),
            "t/subscriptions/subscriptions",
        ),
    ],
)
def test_parse_entity_path(path: str, expected: EntityPath, canonical: str) -> None:
    parsed = parse_entity_path(path)
    assert parsed == expected
    assert str(parsed) == canonical
    assert parse_entity_path(canonical) == expected


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("", "must not be empty"),
        ("$deadletterqueue", "needs an entity"),
        ("$Transfer/$DeadLetterQueue", "needs an entity"),
        ("orders/$transfer", "unknown sub-queue '$transfer'"),
        ("orders/$deadletterqueue/$deadletterqueue", "unknown sub-queue"),
        ("orders/$Transfer/x", "unknown sub-queue"),
        ("subscriptions/s", "needs a topic"),
        ("t/subscriptions/", "must be 1-50 characters"),
        ("t/subscriptions/-s", "must start and end with a letter or digit"),
        ("t/subscriptions/a/b", "'subscriptions' may only be the last segment"),
        ("/etc/passwd", "must not start or end with '/'"),
        ("../x/subscriptions/s", "'.' or '..' segment"),
        ("a/../../b/$deadletterqueue", "'.' or '..' segment"),
        ("orders/", "must not end with '/'; for its dead-letter queue"),
        ("or\x00ders", "control characters"),
        ("t/subscriptions/s\n/$deadletterqueue", "invalid subscription name 's\\n'"),
    ],
)
def test_parse_entity_path_refused(path: str, fragment: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_entity_path(path)
    assert fragment in str(info.value)
    assert str(info.value).isprintable()


def test_entity_path_validates_on_construction() -> None:
    with pytest.raises(BadRequest):
        EntityPath("../x")
    with pytest.raises(BadRequest):
        EntityPath("t", "-bad")
    with pytest.raises(BadRequest):
        EntityPath("t", None, "bogus")  # type: ignore[arg-type]


subscription_names = st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9._-]{0,48}[a-zA-Z0-9])?", fullmatch=True)
subqueues = st.sampled_from(["", "deadletter", "transfer-deadletter"])


def _recase(word: str, flips: list[bool]) -> str:
    return "".join(c.swapcase() if f else c for c, f in zip(word, cycle(flips)))


@given(entity_names, st.none() | subscription_names, subqueues, st.lists(st.booleans(), min_size=1))
def test_entity_path_round_trips(
    entity: str, subscription: str | None, subqueue: str, flips: list[bool]
) -> None:
    path = EntityPath(entity, subscription, subqueue)  # type: ignore[arg-type]
    assert parse_entity_path(str(path)) == path
    # The reserved words may come in any case; names keep theirs.
    parts = [entity]
    if subscription is not None:
        parts += [_recase("subscriptions", flips), subscription]
    if subqueue == "deadletter":
        parts.append(_recase("$deadletterqueue", flips))
    elif subqueue == "transfer-deadletter":
        parts += [_recase("$Transfer", flips), _recase("$DeadLetterQueue", flips)]
    assert parse_entity_path("/".join(parts)) == path


@given(entity_names)
def test_every_valid_entity_name_is_its_own_path(name: str) -> None:
    assert parse_entity_path(name) == EntityPath(name)
