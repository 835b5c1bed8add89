"""The upgrade of a data dir's ``http/sql_parameters.json`` into its rules.

Releases before SQL parameters were part of a rule stored a rule made over HTTP with its
``@parameters`` replaced by their values, and kept the expression as sent and its parameters
in ``<data dir>/http/sql_parameters.json`` (keyed namespace/topic/subscription/rule, each
part ``[expression as sent, parameters, expression stored]`` for ``filter`` and ``action``),
shown only while the stored text was still the one they produced. :func:`migrate` puts them
into the rules themselves (daemon/README.md §10.5) once, at the daemon's start, then removes
the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from sbctl.core import layout
from sbctl.core.errors import SbctlError
from sbctld.results import RuleInfo

Restore = Callable[[str, str, str, RuleInfo], Any]
Get = Callable[[str, str, str, str], RuleInfo]


def migrate(data_dir: Path, get: Get, restore: Restore, report: Callable[[str], None]) -> int:
    """Move the side file's parameters into the rules (``get`` and ``restore`` are the
    broker's rule_get and rule_restore); returns how many rules took parameters."""
    path = layout.sql_parameters_file(data_dir)
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        return 0
    except ValueError:
        entries = {}
    moved = 0
    for key, entry in (entries if isinstance(entries, dict) else {}).items():
        try:
            moved += _migrate_rule(key, entry, get, restore)
        except (SbctlError, ValueError, TypeError, KeyError, IndexError) as exc:
            report(f"{path.name}: rule {key!r} left as stored ({exc})")
    path.unlink()
    return moved


def _migrate_rule(key: str, entry: Any, get: Get, restore: Restore) -> int:
    ns, *topic, sub, name = key.split("/")
    rule = get(ns, "/".join(topic), sub, name)
    spec, action, action_params = dict(rule.filter), rule.action, rule.action_params
    sent = entry.get("filter")
    if sent and spec.get("type") == "sql" and spec.get("sql_expression") == sent[2]:
        spec = {"type": "sql", "sql_expression": sent[0], "parameters": sent[1]}
    sent = entry.get("action")
    if sent and action == sent[2]:
        action, action_params = sent[0] or None, sent[1]
    if spec == rule.filter and action == rule.action:
        return 0
    restore(ns, "/".join(topic), sub, rule_info(rule, spec, action, action_params))
    return 1


def rule_info(
    rule: RuleInfo, spec: dict[str, Any], action: str | None, params: dict[str, Any] | None
) -> RuleInfo:
    return RuleInfo(
        name=rule.name,
        filter=spec,
        action=action,
        created_at_ms=rule.created_at_ms,
        action_parameters=params or msgspec.UNSET,
    )
