"""The arrows between telemq's packages point one way (docs/architecture.md).

Every ``import`` of every module under src/telemq, absolute or relative, read with `ast`:
a package may import only the packages listed for it here. The protocol core and the store
stand alone; the broker never imports the pipeline (it serves the journal through
`telemq.journal`), and the pipeline never imports the broker (it reads the journal through
the store or the journal service). Only the command line sees everything.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "telemq"

ALLOWED: dict[str, set[str]] = {
    "protocol": set(),
    "filters": set(),
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
        "store",
        "subscriptions",
    },
    "pipeline": {"client", "commands", "filters", "journal", "protocol", "store", "subscriptions"},
}


def _imports(path: Path) -> set[str]:
    """The telemq packages `path` imports (its own package excluded)."""
    parts = ["telemq", *path.relative_to(SRC).with_suffix("").parts]
    package = parts[:-1]  # what a relative import starts from, for a module or __init__
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                names = [".".join([*base, *([node.module] if node.module else [])])]
            else:
                names = [node.module or ""]
        for name in names:
            top = name.split(".")
            if top[0] == "telemq" and len(top) > 1:
                found.add(top[1])
    return found - {parts[1]}


def test_packages_import_only_what_they_may() -> None:
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        owner = path.relative_to(SRC).parts[0]
        if owner not in ALLOWED:
            continue  # cli, __main__ and the top-level modules may import anything
        for imported in sorted(_imports(path) - ALLOWED[owner]):
            problems.append(f"{path.relative_to(SRC)} imports telemq.{imported}")
    assert problems == []


def test_the_check_sees_relative_imports() -> None:
    """The parser above resolves ``from ..x import y`` (else the test could not fail)."""
    broker_http = SRC / "broker" / "http.py"
    assert {"journal", "protocol", "store"} <= _imports(broker_http)
