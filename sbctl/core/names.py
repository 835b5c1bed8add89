"""Name rules for namespaces, entities, subscriptions and rules, and entity paths.

This module is the one source of truth for what a name may be (daemon/README.md §14.4, §14.8, §14.9,
§10.1), how an entity is identified (case-insensitively, as in Azure), how it maps to a
folder of the data directory, and how an address such as ``t/subscriptions/s/$deadletterqueue``
is parsed (daemon/README.md §4.2, §25).

Every refusal is a :class:`~sbctl.core.errors.BadRequest` whose one-line message names the value,
escaped with :func:`display_value` so that control characters never reach a terminal raw,
and the rule it broke.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

import xxhash

from sbctl.core.errors import BadRequest

SubQueue = Literal["", "deadletter", "transfer-deadletter"]

NAMESPACE_MIN_LENGTH: Final = 6
NAMESPACE_MAX_LENGTH: Final = 50  # daemon/README.md §14.4, §14.8
ENTITY_MAX_LENGTH: Final = 260  # daemon/README.md §14.4, §14.9
CHILD_MAX_LENGTH: Final = 50  # subscriptions and rules, daemon/README.md §14.4, §14.9
DEFAULT_RULE_NAME: Final = "$Default"  # daemon/README.md §10.1

DEADLETTER_SEGMENT: Final = "$deadletterqueue"  # daemon/README.md §4.2, canonical (docs) spelling
TRANSFER_SEGMENT: Final = "$Transfer"
TRANSFER_DEADLETTER_SEGMENT: Final = "$DeadLetterQueue"
# daemon/README.md §25 spelling; any case is accepted
SUBSCRIPTIONS_SEGMENT: Final = "subscriptions"

_DISPLAY_LIMIT: Final = 64
_NAMESPACE_RE: Final = re.compile(r"[a-zA-Z][a-zA-Z0-9-]*")
_NAMESPACE_BAD_SUFFIXES: Final = ("-", "-sb", "-mgmt")
_SEGMENT_RE: Final = re.compile(r"[a-zA-Z0-9._-]+")
_SEGMENT_BAD_CHAR_RE: Final = re.compile(r"[^a-zA-Z0-9._-]")
_CHILD_CHARS_RE: Final = re.compile(r"[a-zA-Z0-9._-]+")
_ALNUM: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_FORBIDDEN_ENTITY_CHARS: Final = "@?#*"  # daemon/README.md §14.9

# Entity folder names (``entity_dir_name``). A lowercase validated name uses only
# ``[a-z0-9._/-]``; ``/`` becomes ``%2F`` and, when that would be too long for one path
# component, the tail is replaced by ``~`` and a hash. ``%`` and ``~`` appear nowhere else.
_DIR_SLASH: Final = "%2F"
_DIR_MAX_LENGTH: Final = 240  # under NAME_MAX (255) with room for temporary suffixes
_DIR_HASH_MARK: Final = "~"
_DIR_HASH_HEX: Final = 16
_DIR_PLAIN_RE: Final = re.compile(r"(?:[a-z0-9._-]|%2F)+")


def display_value(value: str, limit: int = _DISPLAY_LIMIT) -> str:
    """Render an untrusted value for a one-line message: ``repr`` escaping, truncated.

    Control characters, NUL, newlines and bidi overrides come out escaped (``'a\\nb'``); a
    value longer than ``limit`` is cut and its length given.
    """
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def _refuse(kind: str, name: str, rule: str) -> BadRequest:
    return BadRequest(f"invalid {kind} name {display_value(name)}: {rule}")


def validate_namespace_name(name: str) -> str:
    """Check a namespace name against daemon/README.md §14.8 and return it unchanged.

    6-50 characters, a letter first, then letters, digits and ``-``; not ending in ``-``,
    ``-sb`` or ``-mgmt`` (case-insensitively).
    """
    if not NAMESPACE_MIN_LENGTH <= len(name) <= NAMESPACE_MAX_LENGTH:
        raise _refuse(
            "namespace", name, f"must be {NAMESPACE_MIN_LENGTH}-{NAMESPACE_MAX_LENGTH} characters"
        )
    if not _NAMESPACE_RE.fullmatch(name):
        raise _refuse(
            "namespace", name, "must start with a letter and contain only letters, digits and '-'"
        )
    lowered = name.lower()
    for suffix in _NAMESPACE_BAD_SUFFIXES:
        if lowered.endswith(suffix):
            raise _refuse("namespace", name, f"must not end in {suffix!r}")
    return name


def _is_control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code < 0xA0


def validate_entity_name(name: str, kind: str = "queue") -> str:
    """Check a queue or topic name against daemon/README.md §14.9 and return it unchanged.

    Azure's rules: at most 260 characters, not starting or ending with ``/``, none of
    ``@ ? # *``, and each ``/``-separated segment made of letters, digits, ``.``, ``-`` and
    ``_``. This emulator also refuses, so that a name is always a safe and unambiguous
    address: empty segments (``a//b``), ``.`` and ``..`` segments, NUL and other control
    characters, whitespace, backslashes, ``$`` (reserved for ``$deadletterqueue`` and
    ``$Transfer``), non-ASCII letters, and a segment ``subscriptions`` (any case) anywhere
    but last, since ``<topic>/subscriptions/<sub>`` addresses a subscription (daemon/README.md
    §4.2).

    ``kind`` (``queue``, ``topic`` or ``entity``) only words the error message.
    """
    if not name:
        raise _refuse(kind, name, "must not be empty")
    if len(name) > ENTITY_MAX_LENGTH:
        raise _refuse(kind, name, f"must be at most {ENTITY_MAX_LENGTH} characters")
    if any(_is_control(char) for char in name):
        raise _refuse(kind, name, "must not contain control characters")
    if any(char.isspace() for char in name):
        raise _refuse(kind, name, "must not contain whitespace")
    if "\\" in name:
        raise _refuse(kind, name, "must not contain '\\'")
    if any(char in name for char in _FORBIDDEN_ENTITY_CHARS):
        raise _refuse(kind, name, "must not contain '@', '?', '#' or '*'")
    if name.endswith("/") and not name.startswith("/"):
        # The usual slip: the shell expanded an unquoted $deadletterqueue to nothing.
        shown = name if name.isprintable() else ascii(name)[1:-1]
        raise _refuse(
            kind,
            name,
            "must not end with '/'; for its dead-letter queue write "
            f"'{shown}$deadletterqueue' in single quotes (the shell expands an unquoted "
            "$deadletterqueue to nothing)",
        )
    if name.startswith("/") or name.endswith("/"):
        raise _refuse(kind, name, "must not start or end with '/'")
    segments = name.split("/")
    for index, segment in enumerate(segments):
        if not segment:
            raise _refuse(kind, name, "must not contain an empty segment ('//')")
        if segment in (".", ".."):
            raise _refuse(kind, name, "must not contain a '.' or '..' segment")
        if not _SEGMENT_RE.fullmatch(segment):
            bad = _SEGMENT_BAD_CHAR_RE.search(segment)
            shown = display_value(bad.group()) if bad else "?"
            raise _refuse(
                kind,
                name,
                f"character {shown} is not allowed: each '/'-separated segment may contain "
                "only letters, digits, '.', '-' and '_'",
            )
        if segment.lower() == SUBSCRIPTIONS_SEGMENT and index < len(segments) - 1:
            raise _refuse(
                kind,
                name,
                "'subscriptions' may only be the last segment: "
                "'<topic>/subscriptions/<name>' addresses a subscription",
            )
    return name


def _validate_child_name(name: str, kind: str) -> str:
    """daemon/README.md §14.9: 1-50 letters, digits, ``.``, ``-``, ``_``; first and last
    alphanumeric."""
    if not 1 <= len(name) <= CHILD_MAX_LENGTH:
        raise _refuse(kind, name, f"must be 1-{CHILD_MAX_LENGTH} characters")
    if not _CHILD_CHARS_RE.fullmatch(name):
        raise _refuse(kind, name, "may contain only letters, digits, '.', '-' and '_'")
    if name[0] not in _ALNUM or name[-1] not in _ALNUM:
        raise _refuse(kind, name, "must start and end with a letter or digit")
    return name


def validate_subscription_name(name: str) -> str:
    """Check a subscription name (daemon/README.md §14.4, §14.9) and return it unchanged."""
    return _validate_child_name(name, "subscription")


def validate_rule_name(name: str) -> str:
    """Check a rule name (daemon/README.md §14.9) and return it unchanged; ``$Default`` is allowed
    (§10.1)."""
    if name == DEFAULT_RULE_NAME:
        return name
    return _validate_child_name(name, "rule")


def entity_key(name: str) -> str:
    """The identity of a queue or topic: Azure entity names are case-insensitive."""
    return name.lower()


def entity_dir_name(name: str) -> str:
    """One safe path component for an entity's folder: ``entity_key`` with ``/`` as ``%2F``.

    The name is validated again, so the result never contains ``/`` or NUL, is never ``.``
    or ``..``, and two names share a folder exactly when they are the same entity. It is
    reversed by :func:`entity_name_from_dir`. A name whose encoding would exceed 240
    characters (possible only with many ``/``: 260 characters may carry 129 of them, and a
    file name holds 255 bytes) keeps a readable prefix followed by ``~`` and a 64-bit hash
    of the key; such a folder name cannot be reversed, so the entity's metadata file must
    say its name.
    """
    validate_entity_name(name, "entity")
    encoded = entity_key(name).replace("/", _DIR_SLASH)
    if len(encoded) <= _DIR_MAX_LENGTH:
        return encoded
    digest = xxhash.xxh64_hexdigest(entity_key(name).encode("ascii"))
    prefix = encoded[: _DIR_MAX_LENGTH - len(_DIR_HASH_MARK) - _DIR_HASH_HEX]
    cut = prefix.rfind("%", len(prefix) - len(_DIR_SLASH) + 1)
    if cut != -1:  # never leave half of a %2F escape behind
        prefix = prefix[:cut]
    return f"{prefix}{_DIR_HASH_MARK}{digest}"


def entity_name_from_dir(d: str) -> str:
    """The entity key a folder name stands for: the inverse of :func:`entity_dir_name`.

    Raises ``ValueError`` for a name :func:`entity_dir_name` never produces, and for a
    hashed (``~``) name, whose entity must be read from its metadata.
    """
    if _DIR_HASH_MARK in d:
        raise ValueError(
            f"folder name {display_value(d)} is hashed: read the entity name from its metadata"
        )
    if not _DIR_PLAIN_RE.fullmatch(d):
        raise ValueError(f"folder name {display_value(d)} is not an entity folder name")
    name = d.replace(_DIR_SLASH, "/")
    try:
        validate_entity_name(name, "entity")
    except BadRequest as err:
        raise ValueError(f"folder name {display_value(d)} is not an entity folder name") from err
    if entity_dir_name(name) != d:
        raise ValueError(f"folder name {display_value(d)} is not an entity folder name")
    return name


@dataclass(frozen=True, slots=True)
class EntityPath:
    """A parsed address: a queue or topic, an optional subscription and a sub-queue.

    ``subqueue`` is ``""`` for the entity itself, ``"deadletter"`` for its DLQ and
    ``"transfer-deadletter"`` for its transfer DLQ (daemon/README.md §4.2). Whether the entity is a
    queue or a topic, and so whether a DLQ exists (topics have none, daemon/README.md §4.1), is for
    the
    broker to decide. Fields are validated on construction.
    """

    entity: str
    subscription: str | None = None
    subqueue: SubQueue = ""

    def __post_init__(self) -> None:
        if self.subscription is None:
            validate_entity_name(self.entity, "entity")
        else:
            validate_entity_name(self.entity, "topic")
            validate_subscription_name(self.subscription)
        if self.subqueue not in ("", "deadletter", "transfer-deadletter"):
            raise BadRequest(f"invalid sub-queue {display_value(str(self.subqueue))}")

    def __str__(self) -> str:
        parts = [self.entity]
        if self.subscription is not None:
            parts += [SUBSCRIPTIONS_SEGMENT, self.subscription]
        if self.subqueue == "deadletter":
            parts.append(DEADLETTER_SEGMENT)
        elif self.subqueue == "transfer-deadletter":
            parts += [TRANSFER_SEGMENT, TRANSFER_DEADLETTER_SEGMENT]
        return "/".join(parts)


def parse_entity_path(path: str) -> EntityPath:
    """Parse an entity address (daemon/README.md §4.2, §25).

    Accepted forms, with the reserved words ``subscriptions``, ``$deadletterqueue`` and
    ``$Transfer`` in any case::

        <entity>
        <entity>/$deadletterqueue
        <entity>/$Transfer/$DeadLetterQueue
        <topic>/subscriptions/<sub>
        <topic>/subscriptions/<sub>/$deadletterqueue
        <topic>/subscriptions/<sub>/$Transfer/$DeadLetterQueue

    The rule: first a trailing ``$Transfer/$DeadLetterQueue`` or ``$deadletterqueue`` is
    taken off; then the path names a subscription exactly when its second-to-last segment
    is ``subscriptions``, the last segment being the subscription and everything before
    ``subscriptions`` the topic. Otherwise the whole remainder is one queue or topic name,
    which may itself contain ``/`` (``a/b/c``). Entity names never have ``subscriptions``
    as a segment other than the last (:func:`validate_entity_name`), so the reading is
    unambiguous and ``parse_entity_path(str(p)) == p`` for every ``EntityPath`` ``p``.
    """
    segments = path.split("/")
    subqueue: SubQueue = ""
    if (
        len(segments) >= 2
        and segments[-2].lower() == TRANSFER_SEGMENT.lower()
        and segments[-1].lower() == TRANSFER_DEADLETTER_SEGMENT.lower()
    ):
        subqueue, segments = "transfer-deadletter", segments[:-2]
    elif segments[-1].lower() == DEADLETTER_SEGMENT:
        subqueue, segments = "deadletter", segments[:-1]
    if not segments:
        raise BadRequest(
            f"invalid entity path {display_value(path)}: a dead-letter suffix needs an entity "
            "before it"
        )
    for segment in segments:
        if segment.startswith("$"):
            raise BadRequest(
                f"invalid entity path {display_value(path)}: unknown sub-queue "
                f"{display_value(segment)}; use $deadletterqueue or $Transfer/$DeadLetterQueue"
            )
    if len(segments) >= 2 and segments[-2].lower() == SUBSCRIPTIONS_SEGMENT:
        if len(segments) == 2:
            raise BadRequest(
                f"invalid entity path {display_value(path)}: "
                "'subscriptions/<name>' needs a topic before it"
            )
        return EntityPath("/".join(segments[:-2]), segments[-1], subqueue)
    return EntityPath("/".join(segments), None, subqueue)
