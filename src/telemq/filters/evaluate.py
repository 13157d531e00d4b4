"""Python backend: the AST compiled once into nested closures, SQL three-valued logic.

A compiled condition is a function ``Message -> True | False | None`` where ``None`` is
UNKNOWN. Compilation walks the tree once; evaluation then only calls closures, with the
common shapes (a field against a literal, two-operand AND/OR) specialised. Nothing is
interpreted per message and nothing is generated as source code.

Runtime values are those of the JSON model: ``float`` (every number: JSON integers are read
as doubles, like Spark's ``DOUBLE``), ``str``, ``bool``, ``None`` (JSON null, a missing
field, or an UNKNOWN/NULL result), and ``dict``/``list`` (objects and arrays: NULL to every
operator except ``IS NULL``). A Sparkplug metric (``Metric['<name>']``, metrics.py) reads
into the same model; a value of another kind is `metrics.OPAQUE`, which, like an object,
no operator but ``IS NULL`` sees. Because every number is a ``float`` and ``bool`` is a
distinct type, "same type" is simply ``type(a) is type(b)``: ``true = 1`` is UNKNOWN, never
Python's ``True == 1``.

Arithmetic follows IEEE-754 doubles; the result of ``+ - * / %`` or a sign, once used by a
comparison, ``IN``, ``LIKE``, ``BETWEEN`` or ``IS NULL``, is NULL when it is not finite
(overflow). Division or ``%`` by zero is NULL at once. Spark's backend does the same.

The closures read one publication through a `Message` (message_view.py), which parses the
payload once for every filter and holds the properties as one flat dict.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from . import ast
from .like import parse_like
from .message_view import Message
from .trampoline import Step, run

__all__ = ["Condition", "compile_condition", "compile_value"]

Value = object
Getter = Callable[[Message], Value]
NumberGetter = Callable[[Message], float | None]
Condition = Callable[[Message], bool | None]

_INF = math.inf


# -- compilation ----------------------------------------------------------------------
# Compilation is written as generator steps driven by `trampoline.run` (``x = yield
# step(child)`` instead of a call), so compiling the deepest filter needs no Python
# recursion. Evaluation does call nested closures, one frame per AST level.


def compile_condition(tree: ast.Node) -> Condition:
    """Compile a checked AST into a function ``Message -> bool | None``."""
    return run(_condition(tree))


def compile_value(node: ast.Node) -> Callable[[Message], object]:
    """Compile a value expression (e.g. a `Field`) into a getter ``Message -> value``."""
    return run(_value(node))


def _constant(value: Value) -> Getter:
    return lambda m: value


def _literal_value(node: ast.Node) -> tuple[bool, Value]:
    """(True, value) when `node` is a literal, else (False, None)."""
    if isinstance(node, ast.Number):
        return True, float(node.value)
    if isinstance(node, ast.String | ast.Boolean):
        return True, node.value
    if isinstance(node, ast.Null):
        return True, None
    return False, None


def _field(path: tuple[str | int, ...]) -> Getter:
    if not path:
        return lambda m: m.document
    if len(path) == 1 and isinstance(path[0], str):
        key = path[0]

        def get1(m: Message) -> Value:
            d = m.document
            return d.get(key) if type(d) is dict else None

        return get1
    if len(path) == 2 and isinstance(path[0], str) and isinstance(path[1], str):
        k1, k2 = path

        def get2(m: Message) -> Value:
            d = m.document
            if type(d) is not dict:
                return None
            d = d.get(k1)
            return d.get(k2) if type(d) is dict else None

        return get2

    def get(m: Message) -> Value:
        v = m.document
        for step in path:
            if isinstance(step, str):
                if type(v) is not dict:
                    return None
                v = v.get(step)
            else:
                if type(v) is not list or step >= len(v):
                    return None
                v = v[step]
        return v

    return get


def _property(name: str) -> Getter:
    return lambda m: m.properties.get(name)


def _metric(name: str) -> Getter:
    """A Sparkplug B metric's value: the payload is decoded on the first one read."""

    def get(m: Message) -> Value:
        metrics = m.metrics
        return None if metrics is None else metrics.get(name)

    return get


def _value(node: ast.Node) -> Step[Getter]:
    """`node`'s value as a comparison operand (non-finite arithmetic -> NULL)."""
    is_literal, value = _literal_value(node)
    if is_literal:
        return _constant(value)
    if isinstance(node, ast.Field):
        return _field(node.path)
    if isinstance(node, ast.Property):
        return _property(node.name)
    if isinstance(node, ast.Metric):
        return _metric(node.name)
    if isinstance(node, ast.Arith | ast.Unary):
        raw: NumberGetter = yield _number(node)

        def finite(m: Message) -> Value:
            v = raw(m)
            return v if v is not None and -_INF < v < _INF else None

        return finite
    condition: Condition = yield _condition(node)
    return condition


def _number(node: ast.Node) -> Step[NumberGetter]:
    """`node` as an arithmetic operand: a float (maybe non-finite) or None."""
    if isinstance(node, ast.Arith):
        chain: NumberGetter = yield _arith(node)
        return chain
    if isinstance(node, ast.Unary):
        inner: NumberGetter = yield _number(node.operand)
        if node.op == "+":
            return inner

        def negate(m: Message) -> float | None:
            v = inner(m)
            return None if v is None else -v

        return negate
    if isinstance(node, ast.Number):
        number = float(node.value)
        return lambda m: number
    getter: Getter = yield _value(node)

    def as_number(m: Message) -> float | None:
        v = getter(m)
        return v if type(v) is float else None

    return as_number


def _divide(a: float, b: float) -> float | None:
    return None if b == 0.0 else a / b


def _modulo(a: float, b: float) -> float | None:
    """SQL ``MOD``: the sign of the dividend (IEEE ``fmod``, as Java's ``%``)."""
    if b == 0.0:
        return None
    if not math.isfinite(a):
        return math.nan
    return math.fmod(a, b)


_ARITH: dict[str, Callable[[float, float], float | None]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": _divide,
    "%": _modulo,
}


def _arith(node: ast.Arith) -> Step[NumberGetter]:
    first: NumberGetter = yield _number(node.first)
    steps: list[tuple[Callable[[float, float], float | None], NumberGetter]] = []
    for op, operand in node.rest:
        steps.append((_ARITH[op], (yield _number(operand))))
    if len(steps) == 1:
        fn, second = steps[0]

        def binary(m: Message) -> float | None:
            a = first(m)
            if a is None:
                return None
            b = second(m)
            return None if b is None else fn(a, b)

        return binary

    def chain(m: Message) -> float | None:
        acc = first(m)
        for fn, getter in steps:
            if acc is None:
                return None
            b = getter(m)
            if b is None:
                return None
            acc = fn(acc, b)
        return acc

    return chain


# -- conditions -----------------------------------------------------------------------

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_EQUALITY_TYPES = (float, str, bool)
_ORDER_TYPES = (float, str)


def _condition(node: ast.Node) -> Step[Condition]:
    """Compile `node` in a condition position."""
    if isinstance(node, ast.Boolean):
        result = node.value
        return lambda m: result
    if isinstance(node, ast.Null | ast.Number | ast.String):
        return lambda m: None
    if isinstance(node, ast.Field | ast.Property | ast.Metric):
        getter: Getter = yield _value(node)

        def truth(m: Message) -> bool | None:
            v = getter(m)
            return v if type(v) is bool else None

        return truth
    if isinstance(node, ast.And | ast.Or):
        parts: list[Condition] = []
        for operand in node.operands:
            parts.append((yield _condition(operand)))
        return _and(parts) if isinstance(node, ast.And) else _or(parts)
    if isinstance(node, ast.Not):
        if isinstance(node.operand, ast.Not):  # NOT NOT x is x as a condition
            same: Condition = yield _condition(node.operand.operand)
            return same
        inner: Condition = yield _condition(node.operand)
        return _not(inner)
    if isinstance(node, ast.Comparison):
        comparison: Condition = yield _comparison(node.op, node.left, node.right)
        return comparison
    if isinstance(node, ast.Between | ast.In | ast.Like):
        step = (
            _between(node)
            if isinstance(node, ast.Between)
            else _in(node)
            if isinstance(node, ast.In)
            else _like(node)
        )
        predicate: Condition = yield step
        return _not(predicate) if node.negated else predicate
    if isinstance(node, ast.IsNull):
        tested: Getter = yield _value(node.operand)
        if node.negated:
            return lambda m: tested(m) is not None
        return lambda m: tested(m) is None
    return lambda m: None  # arithmetic: rejected by the checker; UNKNOWN if built by hand


def _not(inner: Condition) -> Condition:
    def negate(m: Message) -> bool | None:
        v = inner(m)
        return None if v is None else not v

    return negate


def _and(parts: list[Condition]) -> Condition:
    if len(parts) == 2:
        p, q = parts

        def and2(m: Message) -> bool | None:
            a = p(m)
            if a is False:
                return False
            b = q(m)
            if b is False:
                return False
            return True if a is True and b is True else None

        return and2

    def and_n(m: Message) -> bool | None:
        result: bool | None = True
        for part in parts:
            v = part(m)
            if v is False:
                return False
            if v is None:
                result = None
        return result

    return and_n


def _or(parts: list[Condition]) -> Condition:
    if len(parts) == 2:
        p, q = parts

        def or2(m: Message) -> bool | None:
            a = p(m)
            if a is True:
                return True
            b = q(m)
            if b is True:
                return True
            return False if a is False and b is False else None

        return or2

    def or_n(m: Message) -> bool | None:
        result: bool | None = False
        for part in parts:
            v = part(m)
            if v is True:
                return True
            if v is None:
                result = None
        return result

    return or_n


def compare(op: str, a: object, b: object) -> bool | None:
    """Three-valued ``a op b`` on runtime values (same type required, else UNKNOWN)."""
    t = type(a)
    if t is not type(b) or t not in (_EQUALITY_TYPES if op in ("=", "<>") else _ORDER_TYPES):
        return None
    return _COMPARE[op](a, b)


def _comparison(op: str, left: ast.Node, right: ast.Node) -> Step[Condition]:
    left_is_literal, left_value = _literal_value(left)
    right_is_literal, right_value = _literal_value(right)
    if left_is_literal and right_is_literal:
        result = compare(op, left_value, right_value)
        return lambda m: result
    if left_is_literal:
        flipped: Condition = yield _comparison(_FLIP[op], right, left)
        return flipped
    fn = _COMPARE[op]
    allowed = _EQUALITY_TYPES if op in ("=", "<>") else _ORDER_TYPES
    getter: Getter = yield _value(left)
    if right_is_literal:
        const = right_value
        t = type(const)
        if t not in allowed:
            return lambda m: None

        def with_constant(m: Message) -> bool | None:
            v = getter(m)
            return fn(v, const) if type(v) is t else None

        return with_constant
    other: Getter = yield _value(right)

    def general(m: Message) -> bool | None:
        a = getter(m)
        b = other(m)
        t = type(a)
        return fn(a, b) if t is type(b) and t in allowed else None

    return general


def _between(node: ast.Between) -> Step[Condition]:
    operand: Getter = yield _value(node.operand)
    low_is_literal, low_value = _literal_value(node.low)
    high_is_literal, high_value = _literal_value(node.high)
    t = type(low_value)
    if low_is_literal and high_is_literal and t is type(high_value) and t in _ORDER_TYPES:
        lo_const: Any = low_value  # the common `x BETWEEN 10 AND 20`
        hi_const: Any = high_value

        def between_constants(m: Message) -> bool | None:
            v = operand(m)
            return bool(lo_const <= v <= hi_const) if type(v) is t else None

        return between_constants
    low: Getter = yield _value(node.low)
    high: Getter = yield _value(node.high)

    def between(m: Message) -> bool | None:
        v = operand(m)
        lo = compare("<=", low(m), v)
        if lo is False:
            return False
        hi = compare("<=", v, high(m))
        if hi is False:
            return False
        return True if lo is True and hi is True else None

    return between


def _in(node: ast.In) -> Step[Condition]:
    """``x IN (...)``: TRUE on a match, else UNKNOWN if any item could not be compared."""
    operand: Getter = yield _value(node.operand)
    values: dict[type, set[object]] = {float: set(), str: set(), bool: set()}
    has_null = False
    for item in node.items:
        _, value = _literal_value(item)
        if value is None:
            has_null = True
        else:
            values[type(value)].add(value)
    # per operand type: the answer when no item matches (UNKNOWN if an item of another
    # type, or NULL, is in the list)
    miss = {
        t: (None if has_null or any(values[u] for u in values if u is not t) else False)
        for t in values
    }
    frozen = {t: frozenset(v) for t, v in values.items()}

    def contains(m: Message) -> bool | None:
        v = operand(m)
        t = type(v)
        candidates = frozen.get(t)
        if candidates is None:
            return None
        return True if v in candidates else miss[t]

    return contains


def _like(node: ast.Like) -> Step[Condition]:
    operand: Getter = yield _value(node.operand)
    match = parse_like(node.pattern, node.escape).python_matcher()

    def like(m: Message) -> bool | None:
        v = operand(m)
        return match(v) if type(v) is str else None

    return like
