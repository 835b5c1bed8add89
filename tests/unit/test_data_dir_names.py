"""Every name of the data dir is spelled in one module, sbctl/core/layout.py.

The sources of ``sbctl`` and ``sbctld`` are parsed and their strings (docstrings aside)
searched for the names below: a file name anywhere, a suffix anywhere a string ends with it,
and a folder name or a numbered-name prefix where a path is built (``a / "x"``,
``os.path.join``, ``Path(...)``, ``glob``, ``with_name``, ``with_suffix``). The lists are the
layout's names spelled out, so renaming one in the layout without meaning to fails here too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from sbctl.core import layout

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "sbctl", ROOT / "daemon" / "sbctld"]
LAYOUT = ROOT / "sbctl" / "core" / "layout.py"

# File names: never in a string outside the layout.
FILE_NAMES = {
    "sbctld.lock",
    "sbctld.pid",
    "sbctld.log",
    "sbctld.sock",
    "reserve.bin",
    "spark.log",
    "cert.pem",
    "key.pem",
    "sql_parameters.json",
    "explorer.token",
    "keys.json",
    "ports.json",
    "namespace.toml",
    "pairing.toml",
    "syphon.ledger",
    "queue.toml",
    "topic.toml",
    "subscription.toml",
    "rules.json",
    "checkpoint.bin",
    "checkpoint.prev.bin",
}
# Suffixes: no string outside the layout ends with one.
SUFFIXES = {".log", ".jnl", ".jnm", ".seal", ".corrupt", ".adopting", ".load", ".sbb"}
# Folder names and other generic words: not where a path is built.
FOLDERS = {
    "staging",
    "namespaces",
    "http",
    "amqp",
    "queues",
    "topics",
    "subscriptions",
    "dedup",
    "sessions",
    "loads",
    "rejects",
    ".lock",
    ".tmp",
}
# Prefixes of numbered or generated names (p07, load-<id>, @tmp-<hex>...), in a path built
# from an f-string.
PREFIXES = {"p", "t", "load-", "rejects-", "@", "sbctl-"}
# Module-level names of the layout that are not data-dir names.
NOT_NAMES = {"NUMBER_DIGITS"}

PATH_CALLS = {"join", "joinpath", "glob", "rglob", "with_name", "with_suffix", "Path"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _text(node: ast.AST) -> str | None:
    """A string constant's text; an f-string's with each value as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _path_parts(tree: ast.AST) -> Iterator[ast.AST]:
    """The operands a path is built from."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            yield node.right
            yield node.left
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in PATH_CALLS:
                yield from node.args


def _in_path(text: str) -> str | None:
    segments = [s for s in re.split(r"[/*]", text) if s]
    for seg in segments:
        if seg in FOLDERS:
            return seg
        for prefix in PREFIXES:
            if seg.startswith(prefix + "{}"):
                return prefix
    return None


def findings() -> list[str]:
    found = []
    for folder in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            if path == LAYOUT:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            skip = _docstrings(tree)
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
            for node in ast.walk(tree):
                text = _text(node)
                if text is None or id(node) in skip:
                    continue
                for name in FILE_NAMES:
                    if name in text:
                        found.append(f"{where}:{node.lineno}: {name!r}")
                for suffix in SUFFIXES:
                    if text.endswith(suffix):
                        found.append(f"{where}:{node.lineno}: {suffix!r}")
            for part in _path_parts(tree):
                text = _text(part)
                hit = _in_path(text) if text is not None else None
                if hit is not None:
                    found.append(f"{where}:{part.lineno}: {hit!r} in a path")
    return sorted(set(found))


def test_no_module_but_the_layout_spells_a_data_dir_name() -> None:
    assert findings() == []


def test_the_lists_here_are_the_layouts_names() -> None:
    names = {
        value
        for key, value in vars(layout).items()
        if key.isupper() and isinstance(value, str) and key not in NOT_NAMES
    }
    listed = FILE_NAMES | SUFFIXES | FOLDERS | {".tmp", "@"}
    assert names - listed == set(), "a layout name this test does not look for"
    assert names >= (FILE_NAMES | SUFFIXES)


def test_the_search_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The search is not vacuous: each kind of spelling is found in a sample."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\nfrom pathlib import Path\n"
        "def f(d: Path, pid: int) -> None:\n"
        '    """Docstrings may say checkpoint.bin."""\n'
        '    a = d / "queue.toml"\n'
        '    b = d / "dedup"\n'
        '    c = d / f"p{pid:02d}"\n'
        '    e = os.path.join(str(d), "staging")\n'
        '    g = d.glob("*.jnl")\n'
        '    h = f"{pid:020d}.log"\n'
        '    i = {"sessions": 1}  # a dict key: not a path\n'
    )
    global SOURCES
    saved = SOURCES
    SOURCES = [tmp_path]
    try:
        got = [line.split(": ", 1)[1] for line in findings()]
    finally:
        SOURCES = saved
    assert sorted(got) == sorted(
        [
            "'queue.toml'",
            "'dedup' in a path",
            "'p' in a path",
            "'staging' in a path",
            "'.jnl'",
            "'.log'",
        ]
    )
