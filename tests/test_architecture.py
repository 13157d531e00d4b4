"""The arrows between telemq's packages, and between the broker's rooms, point one way
(docs/architecture.md).

Every ``import`` of every module under src/telemq, absolute or relative, at module level,
under ``TYPE_CHECKING`` or inside a function, read with `ast`:

- a package may import only the packages listed for it in `ALLOWED`. The protocol core and
  the store stand alone; the broker never imports the pipeline (it serves the journal through
  `telemq.journal`), and the pipeline never imports the broker (it reads the journal through
  the store or the journal service). Only the command line sees everything.
- inside `telemq.broker`, a sub-package may import only those listed in `BROKER_ALLOWED`: the
  core imports none of the edges, the peers and operations; peers and operations never import
  each other. The modules at the top of `broker/` are the wiring and may import anything,
  and only they may import `Broker` (server.py).
- no import cycle is left among the broker's modules: an import inside a function or under
  TYPE_CHECKING is an arrow like any other.
- a session's queue is changed by `Deliveries` only (`QUEUE_OWNERS`).
- no module grows past about 600 lines (`MAX_MODULE_LINES`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "telemq"

ALLOWED: dict[str, set[str]] = {
    "protocol": set(),
    "sparkplug": set(),  # pure Sparkplug B: topics and payloads
    "filters": {"sparkplug"},
    "store": set(),
    "dashboard": set(),  # files for browsers; the broker serves them
    "subscriptions": {"filters", "protocol"},
    "commands": {"filters", "protocol", "subscriptions"},
    "client": {"commands", "protocol"},
    "journal": {"protocol", "store"},
    "network": {"protocol", "subscriptions"},
    "broker": {
        "commands",
        "dashboard",
        "filters",
        "journal",
        "network",
        "protocol",
        "sparkplug",
        "store",
        "subscriptions",
    },
    "pipeline": {
        "client",
        "commands",
        "filters",
        "journal",
        "protocol",
        "sparkplug",
        "store",
        "subscriptions",
    },
}

# The broker's sub-packages; "" is the wiring at the top of broker/ (server.py, web.py,
# embedded.py), which may import every sub-package.
BROKER_ALLOWED: dict[str, set[str]] = {
    "security": set(),
    "settings": {"security"},
    "core": {"security", "settings"},
    "edges": {"security", "settings"},
    "peers": {"core", "security", "settings"},
    "operations": {"core", "edges", "security", "settings"},
}
# Only the wiring knows the whole broker.
WIRING_ONLY = "telemq.broker.server"


def module_name(path: Path) -> str:
    parts = ["telemq", *path.relative_to(SRC).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, source: str | None = None) -> set[str]:
    """Every telemq module or package `path` imports, as dotted names: ``from .x import y``
    yields ``telemq.<...>.x``, and ``.x.y`` too when ``y`` is itself a module."""
    parts = ["telemq", *path.relative_to(SRC).with_suffix("").parts]
    package = parts[:-1]  # what a relative import starts from, for a module or __init__
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("telemq.") and _exists(name)}


def _exists(module: str) -> bool:
    relative = Path(*module.split(".")[1:])
    return (SRC / relative).with_suffix(".py").is_file() or (SRC / relative).is_dir()


def _imports(path: Path) -> set[str]:
    """The telemq packages `path` imports (its own package excluded)."""
    own = module_name(path).split(".")[1]
    return {name.split(".")[1] for name in imported_modules(path)} - {own}


def broker_area(module: str) -> str | None:
    """The broker sub-package a module belongs to ("" for the wiring), None outside."""
    parts = module.split(".")
    if parts[:2] != ["telemq", "broker"]:
        return None
    if len(parts) > 3 or (len(parts) == 3 and parts[2] in BROKER_ALLOWED):
        return parts[2]
    return ""


def broker_problems(arrows: Iterable[tuple[str, str]]) -> list[str]:
    """What breaks the broker's rules among `arrows` (importer module, imported module)."""
    problems = []
    for importer, imported in arrows:
        source, target = broker_area(importer), broker_area(imported)
        if source is None or target is None or source == "" or target == source:
            continue
        if target == "" and imported != "telemq.broker":
            problems.append(f"{importer} imports the wiring ({imported})")
        elif target and target not in BROKER_ALLOWED[source]:
            problems.append(f"{importer} imports {imported}: {source} may not import {target}")
    for importer, imported in arrows:
        if imported == WIRING_ONLY and broker_area(importer) != "":
            problems.append(f"{importer} imports Broker: only the wiring may")
    return sorted(set(problems))


def cycles(arrows: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for importer, imported in arrows:
        graph.setdefault(importer, set()).add(imported)
        graph.setdefault(imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def broker_arrows() -> list[tuple[str, str]]:
    arrows = []
    for path in sorted((SRC / "broker").rglob("*.py")):
        importer = module_name(path)
        for imported in imported_modules(path):
            if broker_area(imported) is not None and imported != importer:
                arrows.append((importer, imported))
    return arrows


def test_packages_import_only_what_they_may() -> None:
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        owner = path.relative_to(SRC).parts[0]
        if owner not in ALLOWED:
            continue  # cli, __main__ and the top-level modules may import anything
        for imported in sorted(_imports(path) - ALLOWED[owner]):
            problems.append(f"{path.relative_to(SRC)} imports telemq.{imported}")
    assert problems == []


def test_broker_sub_packages_import_only_what_they_may() -> None:
    assert broker_problems(broker_arrows()) == []


def test_no_import_cycle_inside_the_broker() -> None:
    # A package's __init__ that re-exports is not a module of the cycle: its sub-modules
    # import each other directly (checked by the arrows above).
    arrows = [(a, b) for a, b in broker_arrows() if b != "telemq.broker" and a != "telemq.broker"]
    assert cycles(arrows) == []


def test_the_check_sees_relative_imports() -> None:
    """The parser above resolves ``from ..x import y`` (else the test could not fail)."""
    broker_http = SRC / "broker" / "edges" / "http.py"
    assert {"journal", "protocol", "store"} <= _imports(broker_http)


def test_the_check_fails_on_a_forbidden_arrow() -> None:
    """Made-up imports the rules forbid, each found (else the tests above could not fail)."""
    router = SRC / "broker" / "core" / "router.py"
    made_up = "from ..operations.mq import CommandHost\nfrom ..server import Broker\n"
    arrows = [("telemq.broker.core.router", m) for m in imported_modules(router, made_up)]
    assert broker_problems(arrows) == [
        "telemq.broker.core.router imports Broker: only the wiring may",
        "telemq.broker.core.router imports telemq.broker.operations.mq: core may not import"
        " operations",
        "telemq.broker.core.router imports the wiring (telemq.broker.server)",
    ]
    peer = [("telemq.broker.peers.links", "telemq.broker.operations.metrics")]
    assert broker_problems(peer) == [
        "telemq.broker.peers.links imports telemq.broker.operations.metrics: peers may not"
        " import operations"
    ]


def test_the_check_finds_a_cycle_through_a_function_import() -> None:
    """An import inside a function is an arrow: a cycle dodged by one is still found."""
    session = SRC / "broker" / "core" / "session.py"
    made_up = "def late() -> None:\n    from .delivery import Deliveries\n"
    arrows = [("telemq.broker.core.session", m) for m in imported_modules(session, made_up)]
    arrows.append(("telemq.broker.core.delivery", "telemq.broker.core.session"))
    assert cycles(arrows) == [["telemq.broker.core.delivery", "telemq.broker.core.session"]]


# A session's queue (`queue`, `held`, `queued_bytes`) is changed by `Deliveries` only, so the
# `max_queued_messages`/`max_queued_bytes` rules live in one place.
QUEUE_FIELDS = {"queue", "held", "queued_bytes"}
QUEUE_CHANGES = {"append", "appendleft", "clear", "extend", "insert", "pop", "popleft", "remove"}
QUEUE_OWNERS = {"broker/core/delivery.py", "broker/core/session.py"}


def queue_writes(source: str) -> list[int]:
    """The lines of `source` that assign a queue field or change a queue in place."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in QUEUE_CHANGES
        ):
            targets = [node.func.value]
        if any(isinstance(t, ast.Attribute) and t.attr in QUEUE_FIELDS for t in targets):
            lines.append(node.lineno)
    return sorted(lines)


def test_a_sessions_queue_is_changed_by_deliveries_only() -> None:
    problems = []
    for path in sorted((SRC / "broker").rglob("*.py")):
        where = str(path.relative_to(SRC))
        if where not in QUEUE_OWNERS:
            problems += [f"{where}:{line}" for line in queue_writes(path.read_text("utf-8"))]
    assert problems == []


def test_the_queue_check_sees_writes() -> None:
    made_up = "session.queue.remove(d)\nsession.queued_bytes -= 3\nsession.held = []\nq.topic = 1\n"
    assert queue_writes(made_up) == [1, 2, 3]


# "Modules under about 600 lines": a module that grows past this is split by concern.
MAX_MODULE_LINES = 620


def test_modules_stay_small() -> None:
    sizes = {
        str(path.relative_to(SRC)): len(path.read_text(encoding="utf-8").splitlines())
        for path in SRC.rglob("*.py")
    }
    assert len(sizes) > 100, "the source tree was not found"
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}
