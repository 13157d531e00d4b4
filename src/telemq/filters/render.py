"""Canonical printer: AST -> filter text that parses back to an equal AST.

Canonical means: keywords upper-case, one space around binary operators, ``<>`` for
not-equal, strings in single quotes with ``''`` for a quote, payload paths without the
``Body.`` prefix unless needed (a first name that is a keyword or a correlation name,
``Body``, ``Properties`` or ``Root``, or an index on the whole payload), and parentheses
only where precedence requires them. Aliases (``Root.MQMD.UserIdentifier``,
``Root.Properties.<name>``) are resolved by the checker, so they print as the telemq name
(``Properties.UserId``): a filter and its alias are one filter, with one text.
A Sparkplug metric prints as ``Metric['<name>']``.
Two filters with the same canonical text mean the same thing, which is what lets the
many-filters engine share work between subscriptions.
"""

from __future__ import annotations

import re

from . import ast
from .tokens import KEYWORDS
from .trampoline import Step, run

__all__ = ["render", "render_literal", "render_path"]

_NAME = re.compile(r"[^\W\d]\w*")
_ATOM = 100
_CORRELATION_NAMES = ("Body", "Properties", "Root")
"""First names that are not payload fields; such a payload key is written ``Body.<key>``."""


def render(node: ast.Node) -> str:
    """The canonical text of `node` (computed without recursion, see `trampoline`)."""
    return run(_render(node, 0))


def render_path(path: tuple[str | int, ...]) -> str:
    """The canonical text of a payload path (``Body`` for the whole payload)."""
    if not path:
        return "Body"
    first = path[0]
    plain = isinstance(first, str) and _plain_name(first)
    out = [str(first)] if plain else ["Body", _step(first)]
    out.extend(_step(s) for s in path[1:])
    return "".join(out)


def render_literal(node: ast.Literal) -> str:
    """The canonical text of a literal."""
    if isinstance(node, ast.Number):
        return str(node.value) if isinstance(node.value, int) else repr(node.value)
    if isinstance(node, ast.String):
        return _quote(node.value)
    if isinstance(node, ast.Boolean):
        return "TRUE" if node.value else "FALSE"
    return "NULL"


def _plain_name(name: str) -> bool:
    return (
        _NAME.fullmatch(name) is not None
        and name not in _CORRELATION_NAMES
        and not (name.isascii() and name.upper() in KEYWORDS)
    )


def _step(step: str | int) -> str:
    return f"[{step}]" if isinstance(step, int) else f".{step}"


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _precedence(node: ast.Node) -> int:
    if isinstance(node, ast.Arith):
        return 50 if node.additive else 60
    if isinstance(
        node,
        ast.Number | ast.String | ast.Boolean | ast.Null | ast.Field | ast.Property | ast.Metric,
    ):
        return _ATOM
    return node.precedence


def _render(node: ast.Node, min_prec: int) -> Step[str]:
    """Render `node`, parenthesized when it binds less tightly than `min_prec`."""
    text: str = yield _render_bare(node)
    return f"({text})" if _precedence(node) < min_prec else text


def _join(nodes: tuple[ast.Node, ...], min_prec: int, separator: str) -> Step[str]:
    parts = []
    for node in nodes:
        parts.append((yield _render(node, min_prec)))
    return separator.join(parts)


def _render_bare(node: ast.Node) -> Step[str]:
    if isinstance(node, ast.Number | ast.String | ast.Boolean | ast.Null):
        return render_literal(node)
    if isinstance(node, ast.Field):
        return render_path(node.path)
    if isinstance(node, ast.Property):
        return f"Properties.{node.name}"
    if isinstance(node, ast.Metric):
        return f"Metric[{_quote(node.name)}]"
    if isinstance(node, ast.Or | ast.And):
        separator, min_prec = (" OR ", 11) if isinstance(node, ast.Or) else (" AND ", 21)
        joined: str = yield _join(node.operands, min_prec, separator)
        return joined
    if isinstance(node, ast.Not):
        negated: str = yield _render(node.operand, 30)
        return "NOT " + negated
    if isinstance(node, ast.Comparison):
        left = yield _render(node.left, 41)
        right = yield _render(node.right, 41)
        return f"{left} {node.op} {right}"
    if isinstance(node, ast.Between):
        word = "NOT BETWEEN" if node.negated else "BETWEEN"
        operand = yield _render(node.operand, 41)
        low = yield _render(node.low, 41)
        high = yield _render(node.high, 41)
        return f"{operand} {word} {low} AND {high}"
    if isinstance(node, ast.In):
        word = "NOT IN" if node.negated else "IN"
        operand = yield _render(node.operand, 41)
        items = ", ".join(render_literal(i) for i in node.items)
        return f"{operand} {word} ({items})"
    if isinstance(node, ast.Like):
        word = "NOT LIKE" if node.negated else "LIKE"
        operand = yield _render(node.operand, 41)
        text = f"{operand} {word} {_quote(node.pattern)}"
        return text if node.escape is None else f"{text} ESCAPE {_quote(node.escape)}"
    if isinstance(node, ast.IsNull):
        word = "IS NOT NULL" if node.negated else "IS NULL"
        operand = yield _render(node.operand, 41)
        return f"{operand} {word}"
    if isinstance(node, ast.Arith):
        prec = _precedence(node)
        parts = [(yield _render(node.first, prec))]
        for op, operand in node.rest:
            parts.append(f" {op} {(yield _render(operand, prec + 1))}")
        return "".join(parts)
    if isinstance(node, ast.Unary):
        if isinstance(node.operand, ast.Number):  # not canonical, but keep its meaning
            return f"{node.op}({render_literal(node.operand)})"
        inner = yield _render(node.operand, 70)
        return f"{node.op} {inner}" if inner[0] in "+-" else f"{node.op}{inner}"
    raise TypeError(f"not a filter node: {node!r}")
