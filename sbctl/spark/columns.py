"""Column mapping: source columns → the message fields a Spark task stages (driver side).

Without flags a column named like a JSON Lines field (``body``, ``message_id``, ...,
``time_to_live``, ``scheduled_enqueue_time_utc``, ``application_properties``; the names
`sbctl send --input` reads) maps to that field, so `send --input` files and
`spark-export` datasets load with no flags. A text source's ``value`` column is the body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sbctl.core.errors import BadRequest
from sbctl.core.records import STRING_FIELDS

BODY_FORMATS = ("json", "text", "binary")
# Columns spark-export adds beside the message fields (system properties, daemon/README.md §1.8); a
# source holding them is an export and they are never application properties.
SYSTEM_COLUMNS = (
    "sequence_number",
    "enqueued_time_utc",
    "delivery_count",
    "expires_at_utc",
    "partition_id",
    "state",
)


@dataclass(frozen=True)
class Mapping:
    """The column flags of `sbctl spark-load` (``None``: the default by name)."""

    columns: dict[str, str | None] = field(default_factory=dict)  # field -> source column
    property_columns: tuple[str, ...] = ()
    all_other_columns_as_properties: bool = False
    body_format: str | None = None


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _pick(df_columns: list[str], flag: str, wanted: str | None, default: str) -> str | None:
    if wanted is not None:
        if wanted not in df_columns:
            raise BadRequest(
                f"{flag}: unknown column {wanted!r} (the source has {', '.join(df_columns)})"
            )
        return wanted
    return default if default in df_columns else None


def is_export(df_columns: list[str]) -> bool:
    """A dataset written by `sbctl spark-export` (it carries the system columns)."""
    return all(c in df_columns for c in ("sequence_number", "enqueued_time_utc", "state"))


def transport(df: Any, mapping: Mapping) -> tuple[list[Any], dict[str, Any]]:
    """Spark columns named as :class:`sbctl.spark.stage.Row` fields, and the key columns
    (``session_id``, ``partition_key``, ``message_id``) for partitioning and dedup."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    cols = list(df.columns)
    types = {f.name: f.dataType for f in df.schema.fields}
    chosen = mapping.columns
    used: set[str] = set()
    out: list[Any] = []
    keys: dict[str, Any] = {}

    body = _pick(cols, "--body-column", chosen.get("body"), "body")
    if body is None and chosen.get("body") is None and "value" in cols:
        body = "value"  # the text format's one column
    if body is not None:
        used.add(body)
        out.append(_body(F, T, F.col(_q(body)), types[body], mapping.body_format))
    if chosen.get("body") is None and "body_base64" in cols:
        used.add("body_base64")  # the JSON Lines alternative for binary bodies
        out.append(F.col("body_base64").cast("string").alias("b64"))

    for name in STRING_FIELDS:
        col = _pick(cols, f"--{name.replace('_', '-')}-column", chosen.get(name), name)
        if col is None:
            continue
        used.add(col)
        value = F.col(_q(col)).cast("string")
        out.append(value.alias(name))
        if name in ("session_id", "partition_key", "message_id"):
            keys[name] = value

    ttl = _pick(cols, "--ttl-column", chosen.get("time_to_live"), "time_to_live")
    if ttl is not None:
        used.add(ttl)
        out.append(_ttl(F, T, ttl, types[ttl]))

    at = _pick(
        cols,
        "--scheduled-enqueue-time-column",
        chosen.get("scheduled_enqueue_time"),
        "scheduled_enqueue_time_utc",
    )
    if at is not None:
        used.add(at)
        out.append(_scheduled(F, T, at, types[at]))

    if "application_properties" in cols:
        used.add("application_properties")
        out.append(F.col("application_properties").alias("pr"))

    props = list(mapping.property_columns)
    for name in props:
        if name not in cols:
            raise BadRequest(
                f"--property-columns: unknown column {name!r} (the source has {', '.join(cols)})"
            )
    if mapping.all_other_columns_as_properties:
        skip = used | set(props) | (set(SYSTEM_COLUMNS) if is_export(cols) else set())
        props += [c for c in cols if c not in skip]
    if props:
        out.append(F.struct(*[F.col(_q(c)).alias(c) for c in props]).alias("pc"))
    return out, keys


def _ttl(F: Any, T: Any, ttl: str, kind: Any) -> Any:
    """The time-to-live column: seconds (numbers) or durations (text)."""
    if isinstance(kind, T.NumericType):
        return (F.col(_q(ttl)).cast("double") * 1000).alias("ttl_ms")  # seconds
    if isinstance(kind, T.StringType):
        return F.col(_q(ttl)).alias("ttl")
    raise BadRequest(
        f"--ttl-column {ttl!r} is {kind.simpleString()}: use seconds or durations "
        "such as PT1M or 30s"
    )


def _scheduled(F: Any, T: Any, at: str, kind: Any) -> Any:
    """The scheduled-enqueue-time column: timestamps, epoch seconds or text."""
    if isinstance(kind, T.TimestampType | T.TimestampNTZType | T.DateType):
        return F.unix_millis(F.col(_q(at)).cast("timestamp")).alias("at_ms")
    if isinstance(kind, T.NumericType):  # seconds since the epoch
        return (F.col(_q(at)).cast("double") * 1000).cast("long").alias("at_ms")
    if isinstance(kind, T.StringType):
        return F.col(_q(at)).alias("at")
    raise BadRequest(
        f"--scheduled-enqueue-time-column {at!r} is {kind.simpleString()}: use a "
        "timestamp, seconds since the epoch or text such as 2026-11-21T10:00:00Z"
    )


def _body(F: Any, T: Any, col: Any, kind: Any, fmt: str | None) -> Any:
    """The body column as text (``b``) or base64 (``b64``); daemon/README.md §1.1: opaque bytes."""
    if fmt is not None and fmt not in BODY_FORMATS:
        raise BadRequest(f"--body-format must be one of {', '.join(BODY_FORMATS)}, not {fmt!r}")
    if isinstance(kind, T.StructType | T.MapType | T.ArrayType):
        if fmt not in (None, "json"):
            raise BadRequest(f"a {kind.simpleString()} body can only be --body-format json")
        return F.to_json(col).alias("b")
    if isinstance(kind, T.BinaryType):
        if fmt == "json":
            raise BadRequest("a binary body column cannot be --body-format json")
        return F.base64(col).alias("b64")
    if fmt == "binary":
        return col.cast("string").alias("b64")  # text holding base64
    return col.cast("string").alias("b")
