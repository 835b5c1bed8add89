"""The shape of the code: who may import whom, how long a module is, how branchy a function is.

Layers (``daemon/sbctld`` and ``sbctl``, imports parsed with :mod:`ast`, those inside functions
and under ``if TYPE_CHECKING`` included):

- the *domain* is every ``sbctld`` module except the entry point (``sbctld.main``,
  ``sbctld.__main__``), the front-ends (``sbctld.frontends.*``) and the
  service layer (``sbctld.service``, ``sbctld.service.*``); it imports none of those;
- only the entry point imports a front-end (front-ends may import one another's modules,
  but none the Unix socket's: they reach the broker through the service);
- the service is the only door: a front-end imports no domain module but the typed results
  listed in :data:`ALLOWED_FRONT_END_DOMAIN` (with the reason), and no front-end module
  touches an attribute named ``broker`` (it runs the service's declared operations);
- the shared core ``sbctl.core`` imports nothing else of ``sbctl`` and nothing of ``sbctld``;
  the daemon imports nothing of ``sbctl`` but the core, and its domain not the Unix wire
  protocol (:data:`UNIX_WIRE`);
- the client and CLI package ``sbctl`` reaches ``sbctld`` only through ``sbctl.daemonctl``,
  where it must run daemon code itself, each such import listed in
  :data:`ALLOWED_CLIENT_TO_DAEMON` with the reason;
- no import cycle between modules (a strongly connected component of the import graph);
- the broker composes its concerns: no class of ``sbctld.broker`` inherits from another but
  the broker from its state (:data:`BROKER_BASES`), no mixins;
- every module opens with a docstring saying what it owns (and, as h11's modules do, the
  rules it keeps).

Ownership: a partition's store (its ``log``) is reached only through
:class:`sbctld.partition.Partition` (no ``x.log`` outside ``sbctld.partition`` and
``sbctld.storage``, but an object's own ``self.log``); a queue owns its parts (state, timers,
sessions) and inherits none of them, so one object's state is not spread over base classes
kept in other files to meet the size limit.

Sizes: no module over :data:`MAX_LINES` lines and no function over cyclomatic complexity
:data:`MAX_COMPLEXITY`, taking the higher of two measures: ``ruff check --select C901`` (which
adds nested functions to their parent) and radon's ``cc`` (which adds each ``and``/``or``
operand and comprehension clause, so it reads higher on long conditions).

The ``ALLOWED_*`` tables hold today's exceptions with today's figures. A new exception, or an
existing one growing, fails; so does an entry that no longer applies (delete it, or lower its
figure, as the refactor lands). ``python tests/unit/test_architecture.py`` prints the report.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from radon.complexity import cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"sbctl": ROOT / "sbctl", "sbctld": ROOT / "daemon" / "sbctld"}

MAX_LINES = 800
MAX_COMPLEXITY = 25

# The entry point, and what claims the data dir and socket for it (probing a live daemon).
ENTRY_POINTS = frozenset({"sbctld.main", "sbctld.__main__", "sbctld.ownership"})

# (importing module, imported module): why the client package runs daemon code in-process.
ALLOWED_CLIENT_TO_DAEMON: dict[tuple[str, str], str] = {
    ("sbctl.daemonctl", "sbctld.main"): "`sbctl daemon start` runs the daemon in its process",
    ("sbctl.daemonctl", "sbctld.ownership"): (
        "claims the data directory's lock, and makes it for `daemon cert`, as the daemon does"
    ),
    ("sbctl.daemonctl", "sbctld.config"): "`import-config` checks entity settings as the daemon",
    ("sbctl.daemonctl", "sbctld.filters"): "`import-config` compiles rules as the daemon does",
}

# Domain modules a front-end may import: module -> why. Everything else of the domain (the
# broker, queues, partitions, topics, loads, the overview, storage, ...) a front-end reaches
# only by running the service's declared operations (sbctld.service.Service.run).
ALLOWED_FRONT_END_DOMAIN: dict[str, str] = {
    "sbctld.results": "the domain's typed results: what the service answers, front-ends encode",
}

# The Unix wire protocol: the domain hands out typed results and never speaks it.
UNIX_WIRE = frozenset({"sbctl.core.protocol", "sbctl.core.wire_errors"})

# Modules over MAX_LINES: module -> its line count today (may shrink, must not grow).
ALLOWED_OVERSIZE: dict[str, int] = {}

# Functions over MAX_COMPLEXITY: "module:Class.function" -> its complexity today.
ALLOWED_COMPLEX: dict[str, int] = {}

# Classes of sbctld.broker with a base class: "module:Class" -> its bases. Only the broker
# has one, its state: the concerns (management, messaging, housekeeping, time travel) are
# objects the broker owns, each holding that state, and the state is a class of its own so
# that they can name its type without importing the module that builds them (a cycle).
BROKER_BASES: dict[str, list[str]] = {"sbctld.broker:Broker": ["BrokerState"]}

# Import cycles allowed: none. A cycle closed by a lazy import (inside a function) or by one
# under ``if TYPE_CHECKING`` counts too: the two modules still cannot be read, tested or
# moved apart. Typing-only needs go through a Protocol in a lower module (as
# sbctld.frontends.amqp.host and sbctld.frontends.http.host do), a lazy call back becomes a
# parameter, a callback or a function the caller calls itself.
ALLOWED_CYCLES: list[frozenset[str]] = []


# Who may reach into a partition's store (its ``log``): the partition and the storage layer.
STORE_OWNERS = ("sbctld.partition", "sbctld.storage")

# The parts a queue owns (``Queue.state``, ``.timers``, ``.sessions``), never its base classes.
QUEUE_PARTS = frozenset({"QueueState", "QueueTimers", "QueueSessions"})

# -- The import graph ------------------------------------------------------------------------


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    lines: int
    imports: dict[str, str] = field(default_factory=dict)  # imported module -> how: see _kind


def _module_name(package: str, root: Path, path: Path) -> tuple[str, bool]:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _load() -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8")
            name, is_package = _module_name(package, root, path)
            tree = ast.parse(text, filename=str(path))
            modules[name] = Module(name, path, is_package, tree, len(text.splitlines()))
    for module in modules.values():
        module.imports = _imports(module, modules)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, kind: str) -> Iterator[tuple[ast.AST, str]]:
    """Every node with how its imports run: "top" at import time, "lazy" inside a function,
    "typing" under ``if TYPE_CHECKING`` (only for the type checker)."""
    for child in ast.iter_child_nodes(node):
        child_kind = kind
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            child_kind = "lazy" if kind == "top" else kind
        yield child, child_kind
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield stmt, "typing"
                yield from _walk(stmt, "typing")
            for stmt in child.orelse:
                yield stmt, child_kind
                yield from _walk(stmt, child_kind)
            continue
        yield from _walk(child, child_kind)


def _resolve(name: str, modules: dict[str, Module]) -> str | None:
    """The project module that importing ``name`` loads (the longest known prefix)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _imports(module: Module, modules: dict[str, Module]) -> dict[str, str]:
    found: dict[str, str] = {}
    rank = {"top": 0, "lazy": 1, "typing": 2}

    def add(target: str | None, kind: str) -> None:
        if target is None or target == module.name:
            return
        if target not in found or rank[kind] < rank[found[target]]:
            found[target] = kind

    for node, kind in _walk(module.tree, "top"):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_resolve(alias.name, modules), kind)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.name if module.is_package else module.name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in modules else _resolve(base, modules), kind)
    return found


def is_front_end(name: str) -> bool:
    return name == "sbctld.frontends" or name.startswith("sbctld.frontends.")


def is_service(name: str) -> bool:
    return name == "sbctld.service" or name.startswith("sbctld.service.")


def is_domain(name: str) -> bool:
    return (
        (name == "sbctld" or name.startswith("sbctld."))
        and name not in ENTRY_POINTS
        and not is_front_end(name)
        and not is_service(name)
    )


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm, iterative; the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(frozenset(component))
    return sorted(components, key=lambda c: sorted(c))


def cycle_edges(modules: dict[str, Module], component: frozenset[str]) -> list[str]:
    return [
        f"{name} -> {target} ({kind})"
        for name in sorted(component)
        for target, kind in sorted(modules[name].imports.items())
        if target in component
    ]


# -- Complexity ------------------------------------------------------------------------------

_TOO_COMPLEX = re.compile(r"`(?P<name>[^`]+)` is too complex \((?P<value>\d+) > \d+\)")


def _qualified_names(tree: ast.Module) -> dict[int, str]:
    """Line of each ``def`` -> its dotted name within the module (Class.method, f.inner)."""
    names: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    names[child.lineno] = name
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return names


def ruff_complexity(modules: dict[str, Module]) -> dict[tuple[str, int], int]:
    """(module, line of the def) -> ruff's C901 complexity, for those above MAX_COMPLEXITY."""
    by_path = {module.path.resolve(): module for module in modules.values()}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--isolated",
            "--no-cache",
            "--exit-zero",
            "--select",
            "C901",
            "--config",
            f"lint.mccabe.max-complexity={MAX_COMPLEXITY}",
            "--output-format",
            "json",
            *(str(path) for path in PACKAGES.values()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found: dict[tuple[str, int], int] = {}
    for item in json.loads(completed.stdout):
        module = by_path[Path(item["filename"]).resolve()]
        match = _TOO_COMPLEX.fullmatch(item["message"])
        assert match is not None, item["message"]
        found[module.name, item["location"]["row"]] = int(match["value"])
    return found


def radon_complexity(module: Module) -> dict[int, int]:
    """Line of each def -> radon's complexity, methods and closures included."""
    found: dict[int, int] = {}
    blocks: list[Function | Class] = list(cc_visit(module.path.read_text(encoding="utf-8")))
    while blocks:
        block = blocks.pop()
        if isinstance(block, Class):
            blocks += [*block.methods, *block.inner_classes]
        else:
            found[block.lineno] = block.complexity
            blocks += block.closures
    return found


def complex_functions(modules: dict[str, Module]) -> dict[str, int]:
    """Every function above MAX_COMPLEXITY by either measure: "module:Class.function" -> the
    higher figure."""
    figures = ruff_complexity(modules)
    for module in modules.values():
        for line, value in radon_complexity(module).items():
            if value > MAX_COMPLEXITY:
                key = (module.name, line)
                figures[key] = max(value, figures.get(key, 0))
    found: dict[str, int] = {}
    for (name, line), value in figures.items():
        qualified = _qualified_names(modules[name].tree).get(line, f"<line {line}>")
        found[f"{name}:{qualified}"] = value
    return found


# -- Checks ----------------------------------------------------------------------------------


def ratchet(current: dict[str, int], allowed: dict[str, int], what: str) -> list[str]:
    """Problems with ``current`` offenders against ``allowed``: new ones, grown ones, and
    entries of ``allowed`` that no longer offend (to delete)."""
    problems = []
    for name, value in sorted(current.items()):
        if name not in allowed:
            problems.append(f"{name}: {what} {value} (new)")
        elif value > allowed[name]:
            problems.append(f"{name}: {what} {value}, up from {allowed[name]}")
    problems += [
        f"{name}: no longer over the limit; delete it from the allowed list"
        for name in sorted(set(allowed) - set(current))
    ]
    return problems


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return _load()


def test_the_graph_sees_the_packages_and_their_imports(modules: dict[str, Module]) -> None:
    assert "sbctld.broker" in modules and "sbctl.client" in modules
    assert modules["sbctld.storage"].is_package
    # An absolute import, a from-import of a module and one of a name all count.
    assert "sbctld.storage.log" in modules["sbctld.storage"].imports
    assert "sbctld.filters" in modules["sbctld.topic"].imports
    assert modules["sbctl.daemonctl"].imports.get("sbctld.filters") == "lazy"


def test_every_module_opens_with_a_docstring_saying_what_it_owns(
    modules: dict[str, Module],
) -> None:
    missing = [name for name, m in sorted(modules.items()) if not ast.get_docstring(m.tree)]
    assert not missing, "modules without a docstring:\n" + "\n".join(missing)


def test_the_domain_imports_no_front_end_or_entry_point(modules: dict[str, Module]) -> None:
    wrong = [
        f"{name} imports {target}"
        for name, module in sorted(modules.items())
        if is_domain(name)
        for target in sorted(module.imports)
        if is_front_end(target) or target in ENTRY_POINTS or is_service(target)
    ]
    assert not wrong, "the domain must not reach up into:\n" + "\n".join(wrong)


def test_only_the_entry_point_imports_front_ends(modules: dict[str, Module]) -> None:
    wrong = [
        f"{name} imports {target}"
        for name, module in sorted(modules.items())
        if name not in ENTRY_POINTS and not is_front_end(name)
        for target in sorted(module.imports)
        if is_front_end(target)
    ]
    assert not wrong, "only sbctld.main starts front-ends:\n" + "\n".join(wrong)


def test_front_ends_reach_the_broker_through_the_service_not_the_unix_socket(
    modules: dict[str, Module],
) -> None:
    """AMQP and HTTP use the service's API (sbctld.service), never the Unix front-end's."""
    wrong = [
        f"{name} imports {target}"
        for name, module in sorted(modules.items())
        if name not in ENTRY_POINTS and not name.startswith("sbctld.frontends.unix")
        for target in sorted(module.imports)
        if target.startswith("sbctld.frontends.unix")
    ]
    assert not wrong, "only sbctld.main starts the Unix front-end:\n" + "\n".join(wrong)
    assert "sbctld.service" in modules["sbctld.frontends.amqp.server"].imports
    assert "sbctld.service" in modules["sbctld.frontends.http.server"].imports


def test_front_ends_import_no_domain_module_but_the_listed_results(
    modules: dict[str, Module],
) -> None:
    """The service is the only door (lazy and typing-only imports count too)."""
    current = {
        (name, target)
        for name, module in modules.items()
        if is_front_end(name)
        for target in module.imports
        if is_domain(target)
    }
    wrong = sorted(f"{a} imports {b}" for a, b in current if b not in ALLOWED_FRONT_END_DOMAIN)
    stale = sorted(set(ALLOWED_FRONT_END_DOMAIN) - {b for _, b in current})
    assert not wrong, "front-ends reach the domain only through the service:\n" + "\n".join(wrong)
    assert not stale, "no longer imported; delete from ALLOWED_FRONT_END_DOMAIN:\n" + "\n".join(
        stale
    )


def broker_reaches(tree: ast.AST) -> list[int]:
    """Lines of ``tree`` that touch an attribute named ``broker`` (``x.broker``, or
    ``getattr(x, "broker")`` and its kin)."""
    lines = []
    for node in ast.walk(tree):
        by_name = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == "broker"
        )
        if by_name or (isinstance(node, ast.Attribute) and node.attr == "broker"):
            lines.append(node.lineno)
    return sorted(lines)


def test_no_front_end_reaches_the_broker_at_runtime(modules: dict[str, Module]) -> None:
    """Not even through the service's attribute (``service.broker.send(...)``): a front-end
    runs declared operations, which apply the durability, wake-ups and metrics."""
    wrong = [
        f"{name}:{line}"
        for name, module in sorted(modules.items())
        if is_front_end(name)
        for line in broker_reaches(module.tree)
    ]
    assert not wrong, "front-ends must run the service's operations, not the broker:\n" + (
        "\n".join(wrong)
    )


def test_the_broker_scan_sees_each_way_of_reaching_it() -> None:
    source = (
        "def f(service, host):\n"
        "    service.broker.send()\n"
        "    b = getattr(host, 'broker')\n"
        "    host.service.run('send', None, print)\n"
    )
    assert broker_reaches(ast.parse(source)) == [2, 3]


def _front_end_of(name: str) -> str | None:
    """The front-end package a module belongs to (``sbctld.frontends.amqp``), or None."""
    parts = name.split(".")
    if parts[:2] != ["sbctld", "frontends"] or len(parts) < 4:
        return (
            None  # not a front-end's, or one of the modules they share (sbctld.frontends.statuses)
        )
    return ".".join(parts[:3])


def test_front_ends_are_peers_none_imports_another(modules: dict[str, Module]) -> None:
    """What two front-ends share lives beside them (sbctld.frontends.statuses) or in
    sbctl; the entry point composes them (HTTP on the AMQP ports), lazy imports included."""
    wrong = [
        f"{name} imports {target}"
        for name, module in sorted(modules.items())
        if (own := _front_end_of(name)) is not None
        for target in sorted(module.imports)
        if _front_end_of(target) not in (None, own)
    ]
    assert not wrong, "a front-end imports another:\n" + "\n".join(wrong)


def test_the_client_package_imports_the_daemon_only_where_listed(
    modules: dict[str, Module],
) -> None:
    current = {
        (name, target)
        for name, module in modules.items()
        if name == "sbctl" or name.startswith("sbctl.")
        for target in module.imports
        if target == "sbctld" or target.startswith("sbctld.")
    }
    print("\nsbctl -> sbctld:", *sorted(f"{a} -> {b}" for a, b in current), sep="\n  ")
    new = sorted(f"{a} -> {b}" for a, b in current - set(ALLOWED_CLIENT_TO_DAEMON))
    stale = sorted(f"{a} -> {b}" for a, b in set(ALLOWED_CLIENT_TO_DAEMON) - current)
    assert not new, "sbctl must not import the daemon:\n" + "\n".join(new)
    assert not stale, "no longer imported; delete from ALLOWED_CLIENT_TO_DAEMON:\n" + "\n".join(
        stale
    )


def is_core(name: str) -> bool:
    return name == "sbctl.core" or name.startswith("sbctl.core.")


def is_client_side(name: str) -> bool:
    return (name == "sbctl" or name.startswith("sbctl.")) and not is_core(name)


def test_the_core_imports_neither_side(modules: dict[str, Module]) -> None:
    wrong = [
        f"{name} imports {target}"
        for name, module in sorted(modules.items())
        if is_core(name)
        for target in sorted(module.imports)
        if not is_core(target) and target != "sbctl"
    ]
    assert not wrong, "sbctl.core must import only itself:\n" + "\n".join(wrong)


def test_the_daemon_imports_only_the_core_from_sbctl(modules: dict[str, Module]) -> None:
    wrong = [
        f"{name} imports {target}"
        for name, module in sorted(modules.items())
        if name.startswith("sbctld")
        for target in sorted(module.imports)
        if is_client_side(target) and target != "sbctl"
    ]
    assert not wrong, "the daemon reaches sbctl only through sbctl.core:\n" + "\n".join(wrong)


def test_the_domain_speaks_no_wire_protocol(modules: dict[str, Module]) -> None:
    wrong = [
        f"{name} imports {target}"
        for name, module in sorted(modules.items())
        if is_domain(name)
        for target in sorted(module.imports)
        if target in UNIX_WIRE
    ]
    assert not wrong, "the domain must not build Unix wire types:\n" + "\n".join(wrong)


def test_only_daemonctl_reaches_the_daemon(modules: dict[str, Module]) -> None:
    wrong = sorted(f"{a} -> {b}" for a, b in ALLOWED_CLIENT_TO_DAEMON if a != "sbctl.daemonctl")
    assert not wrong, "sbctl reaches sbctld only through sbctl.daemonctl:\n" + "\n".join(wrong)


def test_no_import_cycles_beyond_the_listed_ones(modules: dict[str, Module]) -> None:
    graph = {name: set(module.imports) for name, module in modules.items()}
    components = strongly_connected(graph)
    for component in components:
        print("\nimport cycle:", *cycle_edges(modules, component), sep="\n  ")
    new = [c for c in components if c not in ALLOWED_CYCLES]
    gone = [c for c in ALLOWED_CYCLES if c not in components]
    assert not new, "import cycles (break them; see ALLOWED_CYCLES for how):\n" + (
        "\n".join(" <-> ".join(sorted(c)) for c in new)
    )
    assert not gone, "no longer a cycle; delete from ALLOWED_CYCLES:\n" + "\n".join(
        " <-> ".join(sorted(c)) for c in gone
    )


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert strongly_connected(graph) == [frozenset("abc"), frozenset("de")]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_a_lazy_or_typing_only_import_closes_a_cycle_too() -> None:
    """The graph the cycle test reads: a top-level, a lazy and a TYPE_CHECKING import make a
    cycle of three modules, and each edge is kept with how it runs."""
    sources = {
        "p": "",
        "p.a": "from p import b\n",
        "p.b": "def f():\n    from p.c import g\n",
        "p.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.a\n",
        "p.d": "import p.a\n",
    }
    modules = {
        name: Module(name, Path(name), name == "p", ast.parse(text), 1)
        for name, text in sources.items()
    }
    for module in modules.values():
        module.imports = _imports(module, modules)
    assert modules["p.a"].imports == {"p.b": "top"}
    assert modules["p.b"].imports == {"p.c": "lazy"}
    assert modules["p.c"].imports == {"p.a": "typing"}
    graph = {name: set(module.imports) for name, module in modules.items()}
    assert strongly_connected(graph) == [frozenset({"p.a", "p.b", "p.c"})]
    assert cycle_edges(modules, frozenset({"p.a", "p.b", "p.c"})) == [
        "p.a -> p.b (top)",
        "p.b -> p.c (lazy)",
        "p.c -> p.a (typing)",
    ]


def store_reaches(tree: ast.AST) -> list[int]:
    """Lines that read an attribute ``log`` off anything but ``self`` (or ``logging``)."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "log"
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "logging"))
    )


def test_only_the_partition_reaches_into_its_store(modules: dict[str, Module]) -> None:
    wrong = [
        f"{name}:{line}"
        for name, module in sorted(modules.items())
        if name.startswith("sbctld") and not name.startswith(STORE_OWNERS)
        for line in store_reaches(module.tree)
    ]
    assert not wrong, "a partition's log is reached through Partition's methods:\n" + "\n".join(
        wrong
    )


def test_the_store_scan_sees_a_reach_into_a_log() -> None:
    source = "p.log.exp[0]\nq.partitions[0].log.record([])\nlog = part.log\nself.log.close()\n"
    assert store_reaches(ast.parse(source)) == [1, 2, 3]


def test_a_queue_owns_its_parts_and_inherits_none(modules: dict[str, Module]) -> None:
    from sbctld.queue import Queue
    from sbctld.topic import Subscription, Topic

    wrong = [
        f"{name}:{node.lineno} class {node.name}({', '.join(map(ast.unparse, node.bases))})"
        for name, module in sorted(modules.items())
        if name.startswith("sbctld")
        for node in ast.walk(module.tree)
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).rsplit(".", 1)[-1] in QUEUE_PARTS for base in node.bases)
    ]
    wrong += [
        f"{cls.__name__} inherits {part.__name__}"
        for cls in (Queue, Topic, Subscription)
        for part in cls.__mro__
        if part.__name__ in QUEUE_PARTS
    ]
    assert not wrong, "a queue holds its parts, it does not inherit them:\n" + "\n".join(wrong)


def test_the_broker_composes_its_concerns(modules: dict[str, Module], tmp_path: Path) -> None:
    """Composition, not layers to meet the line cap: in ``sbctld.broker`` no class inherits
    but :class:`~sbctld.broker.Broker` from its state (:data:`BROKER_BASES`), and the broker
    owns one object per concern, each holding the broker's state."""
    from sbctld.broker import Broker
    from sbctld.broker.core import BrokerState
    from sbctld.broker.housekeeping import Housekeeping
    from sbctld.broker.management import Management
    from sbctld.broker.messaging import Messaging
    from sbctld.broker.timetravel import TimeTravel
    from sbctld.clock import FakeClock
    from sbctld.storage.sync import Syncer

    based = {
        f"{name}:{node.name}": [ast.unparse(base) for base in node.bases]
        for name, module in modules.items()
        if name == "sbctld.broker" or name.startswith("sbctld.broker.")
        for node in ast.walk(module.tree)
        if isinstance(node, ast.ClassDef) and node.bases
    }
    assert based == BROKER_BASES
    assert Broker.__mro__ == (Broker, BrokerState, object)
    concerns = (Management, Messaging, Housekeeping, TimeTravel)
    assert all(c.__mro__ == (c, object) for c in concerns)
    broker = Broker(tmp_path / "data", FakeClock(), Syncer("os"))
    try:
        owned = [v for v in vars(broker).values() if isinstance(v, concerns)]
        assert sorted(type(v).__name__ for v in owned) == sorted(c.__name__ for c in concerns)
        assert all(v.state is broker for v in owned)
    finally:
        broker.housekeeping.close()


def test_modules_stay_under_the_size_limit(modules: dict[str, Module]) -> None:
    current = {name: m.lines for name, m in modules.items() if m.lines > MAX_LINES}
    print(f"\nmodules over {MAX_LINES} lines:", *sorted(current.items()), sep="\n  ")
    problems = ratchet(current, ALLOWED_OVERSIZE, "lines")
    assert not problems, "\n".join(problems)


def test_functions_stay_under_the_complexity_limit(modules: dict[str, Module]) -> None:
    current = complex_functions(modules)
    print(f"\nfunctions over complexity {MAX_COMPLEXITY}:", *sorted(current.items()), sep="\n  ")
    problems = ratchet(current, ALLOWED_COMPLEX, "complexity")
    assert not problems, "\n".join(problems)


def test_the_ratchet_fails_on_new_grown_and_stale_entries() -> None:
    allowed = {"a": 900, "b": 1000, "gone": 850}
    assert ratchet({"a": 900, "b": 999}, allowed, "lines") == [
        "gone: no longer over the limit; delete it from the allowed list"
    ]
    assert ratchet({"a": 901, "b": 1000, "c": 801, "gone": 850}, allowed, "lines") == [
        "a: lines 901, up from 900",
        "c: lines 801 (new)",
    ]


if __name__ == "__main__":
    loaded = _load()
    print(f"## Modules over {MAX_LINES} lines")
    for name, m in sorted(loaded.items(), key=lambda kv: -kv[1].lines):
        if m.lines > MAX_LINES:
            print(f"- `{name}`: {m.lines}")
    print(f"\n## Functions over cyclomatic complexity {MAX_COMPLEXITY} (ruff C901, radon cc)")
    for name, value in sorted(complex_functions(loaded).items(), key=lambda kv: -kv[1]):
        print(f"- `{name}`: {value}")
    print("\n## Import cycles (strongly connected components)")
    cycles = strongly_connected({n: set(m.imports) for n, m in loaded.items()})
    for component in cycles:
        print(f"- {', '.join(sorted(component))}")
        for edge in cycle_edges(loaded, component):
            print(f"  - {edge}")
    if not cycles:
        print("- none")
