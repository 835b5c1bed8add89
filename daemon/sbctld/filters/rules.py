"""Compiled rules: filter specs (SQL, correlation, true, false) and SQL actions.

Rule 1: a rule is checked and compiled once, when it is created or loaded:
:func:`compile_filter`, :func:`normalize_filter` and :func:`compile_action` raise BadRequest
for anything wrong with it, and what they return raises nothing but FilterEvaluationError.
Rule 2: a filter spec's canonical form (:func:`normalize_filter`) is what is stored, shown
and exported; ``compile_filter(normalize_filter(s))`` behaves as ``compile_filter(s)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final, NamedTuple

import msgspec

from sbctl.core.errors import BadRequest
from sbctl.core.limits import MAX_ID_LENGTH, MAX_TIME_MS
from sbctl.core.records import Message, PropertyValue
from sbctl.core.typed import plain
from sbctld.filters.codegen import CodeGen, build
from sbctld.filters.parser import parse
from sbctld.filters.runtime import RUNTIME
from sbctld.filters.tree import Node, Statement
from sbctld.filters.values import (
    ID_FIELDS,
    INT64_MAX,
    INT64_MIN,
    STRING_FIELDS,
    TEXTUAL,
    FilterEvaluationError,
    MessageView,
    SystemProperty,
    cs_type,
    to_text,
)

# -- Filters --------------------------------------------------------------------------------


def _always_true(view: MessageView) -> bool:
    return True


def _always_false(view: MessageView) -> bool:
    return False


class CompiledFilter:
    """A rule's filter, compiled once. ``matches`` is a plain function attribute (no bound
    method call on the hot path); it raises :class:`FilterEvaluationError`."""

    __slots__ = ("kind", "matches", "spec")

    def __init__(
        self, kind: str, matches: Callable[[MessageView], bool], spec: dict[str, Any]
    ) -> None:
        self.kind = kind  # "sql" | "correlation" | "true" | "false"
        self.matches = matches
        self.spec = spec  # normalize_filter's form

    def __repr__(self) -> str:
        return f"CompiledFilter({self.spec!r})"


CORRELATION_FIELDS: Final = (
    "correlation_id",
    "message_id",
    "to",
    "reply_to",
    "subject",
    "session_id",
    "reply_to_session_id",
    "content_type",
)
_FILTER_TYPES: Final = ("sql", "correlation", "true", "false")


def _check_keys(spec: dict[str, Any], kind: str, allowed: tuple[str, ...]) -> None:
    for key in spec:
        if key not in allowed:
            raise BadRequest(
                f"filter: unknown key {key!r} for a {kind} filter (allowed: {', '.join(allowed)})"
            )


def _check_spec(spec: dict[str, Any] | None) -> tuple[dict[str, Any], Node | None]:
    """The canonical form of a filter spec, and the parsed tree of a SQL filter."""
    if spec is None:
        return {"type": "true"}, None
    if not isinstance(spec, dict):
        raise BadRequest("filter: must be an object with a 'type'")
    kind = spec.get("type")
    if not isinstance(kind, str) or kind.lower() not in _FILTER_TYPES:
        raise BadRequest(f"filter: 'type' must be one of {', '.join(_FILTER_TYPES)}, not {kind!r}")
    kind = kind.lower()
    if kind in ("true", "false"):
        _check_keys(spec, kind, ("type",))
        return {"type": kind}, None
    if kind == "sql":
        _check_keys(spec, kind, ("type", "sql_expression", "parameters"))
        text = spec.get("sql_expression")
        if text is None or (isinstance(text, str) and not text.strip()):
            raise BadRequest("filter: a sql filter needs a non-empty 'sql_expression'")
        params = check_parameters(spec.get("parameters"), "filter")
        tree = parse("sql_expression", text, action=False, parameters=params)
        canonical = {"type": "sql", "sql_expression": text}
        return (canonical | {"parameters": params}) if params else canonical, tree
    return _check_correlation(spec), None


def check_parameters(params: Any, what: str) -> dict[str, Any]:
    """A SQL filter's or action's parameters (``{"@name": value}``) as kept: names as sent,
    values strings, numbers, booleans or null (an AMQP-typed number as its plain value)."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise BadRequest(f"{what}: 'parameters' must be an object of name: value")
    out: dict[str, Any] = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name.lstrip("@"):
            raise BadRequest(f"{what}: parameter names must be non-empty strings")
        value = plain(value)
        if value is not None and type(value) not in TEXTUAL:
            raise BadRequest(
                f"{what}: parameter {name!r} must be a string, number, boolean or null, "
                f"not {type(value).__name__}"
            )
        out[name] = value
    return out


def _check_correlation(spec: dict[str, Any]) -> dict[str, Any]:
    """The canonical form of a correlation filter spec."""
    _check_keys(spec, "correlation", ("type", *CORRELATION_FIELDS, "label", "properties"))
    if spec.get("label") is not None and spec.get("subject") is not None:
        raise BadRequest("filter: give 'subject' or its alias 'label', not both")
    canonical: dict[str, Any] = {"type": "correlation"}
    for field in CORRELATION_FIELDS:
        value = spec.get(field)
        if value is None and field == "subject":
            value = spec.get("label")
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise BadRequest(f"filter: correlation field {field!r} must be a non-empty string")
        canonical[field] = value
    properties = spec.get("properties")
    if properties is not None:
        if not isinstance(properties, dict):
            raise BadRequest("filter: 'properties' must be an object of name: value")
        for name, value in properties.items():
            _check_correlation_property(name, value)
        if properties:
            canonical["properties"] = dict(properties)
    if len(canonical) == 1:
        raise BadRequest(
            "filter: a correlation filter needs at least one field or property to match; "
            'use {"type": "true"} to take every message'
        )
    return canonical


def _check_correlation_property(name: Any, value: Any) -> None:
    if not isinstance(name, str) or not name:
        raise BadRequest("filter: correlation property names must be non-empty strings")
    if value is not None and type(value) not in TEXTUAL:
        raise BadRequest(
            f"filter: correlation property {name!r} must be a string, number, "
            f"boolean or null, not {type(value).__name__}"
        )
    if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
        raise BadRequest(f"filter: correlation property {name!r} is out of the Int64 range")


def normalize_filter(spec: dict[str, Any] | None) -> dict[str, Any]:
    """The canonical form to store, show and export; raises BadRequest like compile_filter.
    ``compile_filter(normalize_filter(s))`` behaves as ``compile_filter(s)``."""
    return _check_spec(spec)[0]


def compile_filter(spec: dict[str, Any] | None) -> CompiledFilter:
    canonical, tree = _check_spec(spec)
    kind = canonical["type"]
    if kind == "true":
        return CompiledFilter(kind, _always_true, canonical)
    if kind == "false":
        return CompiledFilter(kind, _always_false, canonical)
    if kind == "correlation":
        return CompiledFilter(kind, _correlation_function(canonical), canonical)
    assert tree is not None
    gen = CodeGen()
    result = gen.pred(tree)
    return CompiledFilter(kind, gen.function(f"{result} is True", "sql_expression"), canonical)


def _correlation_function(spec: dict[str, Any]) -> Callable[[MessageView], bool]:
    ns: dict[str, Any] = dict(RUNTIME)
    lines = ["def _f(v):"]
    fields = [field for field in CORRELATION_FIELDS if field in spec]
    if fields:
        lines.append("    m = v.message")
    for i, field in enumerate(fields):
        ns[f"s{i}"] = spec[field]
        lines.append(f"    if m.{field} != s{i}: return False")
    properties = spec.get("properties") or {}
    if properties:
        lines.append("    ap = v.properties")
    for i, (name, value) in enumerate(properties.items()):
        ns[f"n{i}"], ns[f"l{i}"] = name, name.lower()
        lines += [
            f"    x = ap.get(n{i}, _M)",
            "    if x is _M:",
            f"        x = v.ci(l{i}, _M)",
            "        if x is _M: return False",
        ]
        if value is None:
            lines.append("    if x is not None: return False")
        else:  # typed equality: 5 is not "5", 5.0 or True
            ns[f"p{i}"], ns[f"c{i}"] = value, type(value)
            lines.append(f"    if type(x) is not c{i} or x != p{i}: return False")
    lines.append("    return True")
    return build(lines, ns, "filter")


# -- Actions --------------------------------------------------------------------------------


class _Step(NamedTuple):
    remove: bool
    system: SystemProperty | None  # None for a user property
    name: str
    value: Callable[[MessageView], Any] | None


class CompiledAction:
    """A rule's SQL action, compiled once; ``apply`` returns a new Message and never changes
    the view's. Raises :class:`FilterEvaluationError`."""

    __slots__ = ("_steps", "text")

    def __init__(self, text: str, steps: list[_Step]) -> None:
        self.text = text
        self._steps = steps

    def __repr__(self) -> str:
        return f"CompiledAction({self.text!r})"

    def apply(self, view: MessageView) -> Message:
        message = view.message
        props: dict[str, PropertyValue] = dict(message.application_properties or {})
        fields: dict[str, Any] = {}
        current = view
        last = len(self._steps) - 1
        for index, step in enumerate(self._steps):
            value = None if step.value is None else step.value(current)
            if step.system is not None:
                fields[step.system.attr] = (
                    None if step.remove else _system_value(step.system, value)
                )
            else:
                key = _find_key(props, step.name)
                if step.remove:
                    if key is not None:
                        del props[key]
                else:
                    if key is not None and type(props[key]) is float and type(value) is int:
                        value = float(value)  # C#: an implicit long -> double conversion
                    props[step.name if key is None else key] = value
            if index < last:  # the next statement sees this one's effect
                current = MessageView(
                    msgspec.structs.replace(
                        message, application_properties=dict(props) or None, **fields
                    ),
                    sequence_number=view.sequence_number,
                    enqueued_time_ms=view.enqueued_time_ms,
                    size=view.size,
                )
        result = msgspec.structs.replace(message, application_properties=props or None, **fields)
        if (
            result.session_id is not None
            and result.partition_key is not None
            and result.session_id != result.partition_key
        ):
            raise FilterEvaluationError(
                "InvalidOperationException",
                "The action left SessionId and PartitionKey set to different values.",
            )
        return result


def _find_key(props: dict[str, PropertyValue], name: str) -> str | None:
    if name in props:
        return name
    lowered = name.lower()
    for key in props:
        if key.lower() == lowered:
            return key
    return None


def _milliseconds(prop: SystemProperty, value: Any) -> int:
    kind = type(value)
    if kind is int:
        return int(value)
    if kind is float and math.isfinite(value):
        return int(value)
    raise FilterEvaluationError(
        "InvalidCastException",
        f"Cannot convert {cs_type(value)} to sys.{prop.name} (an Int64 of milliseconds).",
    )


def _system_value(prop: SystemProperty, value: Any) -> Any:
    """SET's implicit conversion to a system property's type, and its range checks."""
    attr = prop.attr
    if attr in STRING_FIELDS:
        if value is None:
            if attr == "message_id":
                raise FilterEvaluationError("ArgumentException", "sys.MessageId cannot be NULL.")
            return None
        text = to_text(value)
        if attr == "message_id" and not text:
            raise FilterEvaluationError("ArgumentException", "sys.MessageId cannot be empty.")
        if attr in ID_FIELDS and len(text) > MAX_ID_LENGTH:
            raise FilterEvaluationError(
                "ArgumentOutOfRangeException",
                f"sys.{prop.name} is longer than {MAX_ID_LENGTH} characters.",
            )
        return text
    if value is None:
        return None
    ms = _milliseconds(prop, value)
    if attr == "time_to_live_ms" and ms <= 0:
        raise FilterEvaluationError(
            "ArgumentOutOfRangeException", "sys.TimeToLive must be positive."
        )
    if attr == "scheduled_enqueue_time_ms" and not 0 <= ms <= MAX_TIME_MS:
        raise FilterEvaluationError(
            "ArgumentOutOfRangeException", f"sys.{prop.name} is out of the DateTime range."
        )
    return ms


def compile_action(
    text: str | None, parameters: dict[str, Any] | None = None
) -> CompiledAction | None:
    """None for no action (None, "" or blank); BadRequest for anything invalid.
    ``parameters`` give the values of the action's ``@names``."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    params = check_parameters(parameters, "action")
    statements: list[Statement] = parse("action", text, action=True, parameters=params)
    steps = []
    for statement in statements:
        value = None
        if statement.value is not None:
            gen = CodeGen()
            code, _ = gen.value(statement.value)
            value = gen.function(code, "action")
        target = statement.target
        steps.append(_Step(statement.remove, target.system, target.name, value))
    return CompiledAction(text, steps)
