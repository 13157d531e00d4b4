"""The filter AST: small immutable nodes shared by every backend.

Nodes are frozen dataclasses. Source positions (``pos`` and friends) are kept for error
messages but take no part in equality, so ``parse(str(tree)) == tree``. Equality is
structural and iterative (no recursion), and the hash is that of the canonical text: a
filter nested to the depth limit can be compared and hashed without deep Python recursion.

Shapes the parser guarantees (the canonical form): ``And``/``Or`` never directly contain
an ``And``/``Or`` of the same kind; an ``Arith`` chain holds operators of one precedence
level and its ``first`` operand is never an ``Arith`` of that same level; a sign applied to
a number literal is folded into the literal.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import ClassVar, TypeAlias

__all__ = [
    "ADDITIVE",
    "COMPARISONS",
    "MULTIPLICATIVE",
    "PROPERTY_NAMES",
    "USER_PROPERTY_PREFIX",
    "And",
    "Arith",
    "Between",
    "Boolean",
    "Comparison",
    "Expr",
    "Field",
    "In",
    "IsNull",
    "Like",
    "Literal",
    "Metric",
    "Node",
    "Not",
    "Null",
    "Number",
    "Or",
    "Property",
    "String",
    "Unary",
    "children",
    "walk",
]

ADDITIVE = frozenset({"+", "-"})
MULTIPLICATIVE = frozenset({"*", "/", "%"})
COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")

PROPERTY_NAMES = (
    "Topic",
    "QoS",
    "Retain",
    "ClientId",
    "UserId",
    "SubPoint",
    "ContentType",
    "Broker",
)
"""The fixed message properties a filter can read as ``Properties.<name>``."""

USER_PROPERTY_PREFIX = "User."
"""``Properties.User.<name>`` (an MQTT 5.0 User Property) is the `Property` named
``User.<name>``: one flat name, as in `Filter.properties` and the properties mapping."""

_compared_fields: dict[type, tuple[str, ...]] = {}


def _compared(cls: type) -> tuple[str, ...]:
    names = _compared_fields.get(cls)
    if names is None:
        names = tuple(f.name for f in fields(cls) if f.compare)
        _compared_fields[cls] = names
    return names


@dataclass(frozen=True, eq=False, slots=True)
class Node:
    """Base of all nodes. ``pos`` is the 0-based offset of the node's first token."""

    pos: int = field(default=-1, compare=False, kw_only=True)

    precedence: ClassVar[int] = 100

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        stack: list[tuple[object, object]] = [(self, other)]
        while stack:
            a, b = stack.pop()
            if isinstance(a, Node):
                if type(a) is not type(b):
                    return False
                stack.extend((getattr(a, n), getattr(b, n)) for n in _compared(type(a)))
            elif isinstance(a, tuple):
                if not isinstance(b, tuple) or len(a) != len(b):
                    return False
                stack.extend(zip(a, b, strict=True))
            elif a != b or (type(a) is not type(b) and not (_is_number(a) and _is_number(b))):
                return False
        return True

    def __hash__(self) -> int:
        return hash((type(self).__name__, str(self)))

    def __str__(self) -> str:
        from .render import render

        return render(self)


def _is_number(v: object) -> bool:
    return type(v) is int or type(v) is float


# -- literals -------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, slots=True)
class Number(Node):
    """A number literal; `value` keeps the int/float distinction of the source text."""

    value: int | float


@dataclass(frozen=True, eq=False, slots=True)
class String(Node):
    """A string literal (quotes removed, ``''`` undoubled)."""

    value: str


@dataclass(frozen=True, eq=False, slots=True)
class Boolean(Node):
    """``TRUE`` or ``FALSE``."""

    value: bool


@dataclass(frozen=True, eq=False, slots=True)
class Null(Node):
    """``NULL``: the unknown value."""


Literal: TypeAlias = Number | String | Boolean | Null

# -- identifiers ----------------------------------------------------------------------


@dataclass(frozen=True, eq=False, slots=True)
class Field(Node):
    """A field of the JSON payload: names and array indexes from the document root.

    The empty path is the whole payload (written ``Body``).
    """

    path: tuple[str | int, ...]


@dataclass(frozen=True, eq=False, slots=True)
class Property(Node):
    """A message property: one of `PROPERTY_NAMES`, or ``User.<name>`` for the MQTT 5.0
    User Property ``<name>`` (see `USER_PROPERTY_PREFIX`)."""

    name: str

    @property
    def user_property(self) -> str | None:
        """The User Property's own name for ``User.<name>``; None for a fixed property."""
        if self.name.startswith(USER_PROPERTY_PREFIX):
            return self.name[len(USER_PROPERTY_PREFIX) :]
        return None


@dataclass(frozen=True, eq=False, slots=True)
class Metric(Node):
    """``Metric['<name>']``: the value of the metric `name` of a Sparkplug B payload
    (metrics.py says which values; NULL when the publication is not Sparkplug B)."""

    name: str


# -- value expressions ----------------------------------------------------------------


@dataclass(frozen=True, eq=False, slots=True)
class Unary(Node):
    """``+x`` or ``-x`` on a non-literal operand."""

    op: str
    operand: Node

    precedence: ClassVar[int] = 70


@dataclass(frozen=True, eq=False, slots=True)
class Arith(Node):
    """A left-associative chain ``first op1 e1 op2 e2 ...`` of one precedence level.

    n-ary rather than binary so that a long chain (``a + b + c + ...``) is a flat node:
    no deep recursion anywhere, whatever its length.
    """

    first: Node
    rest: tuple[tuple[str, Node], ...]

    @property
    def additive(self) -> bool:
        """True for a ``+ -`` chain, False for a ``* / %`` chain."""
        return self.rest[0][0] in ADDITIVE


# -- predicates -----------------------------------------------------------------------


@dataclass(frozen=True, eq=False, slots=True)
class Comparison(Node):
    """``left op right`` with op one of `COMPARISONS` (``!=`` is read as ``<>``)."""

    op: str
    left: Node
    right: Node

    precedence: ClassVar[int] = 40


@dataclass(frozen=True, eq=False, slots=True)
class Between(Node):
    """``operand [NOT] BETWEEN low AND high`` (inclusive)."""

    operand: Node
    low: Node
    high: Node
    negated: bool = False

    precedence: ClassVar[int] = 40


@dataclass(frozen=True, eq=False, slots=True)
class In(Node):
    """``operand [NOT] IN (literal, ...)``."""

    operand: Node
    items: tuple[Literal, ...]
    negated: bool = False

    precedence: ClassVar[int] = 40


@dataclass(frozen=True, eq=False, slots=True)
class Like(Node):
    """``operand [NOT] LIKE 'pattern' [ESCAPE 'c']``.

    `pattern_pos` and `escape_pos` are the offsets of the two string literals' opening
    quotes, used to point at a bad escape sequence.
    """

    operand: Node
    pattern: str
    escape: str | None = None
    negated: bool = False
    pattern_pos: int = field(default=-1, compare=False)
    escape_pos: int = field(default=-1, compare=False)

    precedence: ClassVar[int] = 40


@dataclass(frozen=True, eq=False, slots=True)
class IsNull(Node):
    """``operand IS [NOT] NULL``."""

    operand: Node
    negated: bool = False

    precedence: ClassVar[int] = 40


@dataclass(frozen=True, eq=False, slots=True)
class Not(Node):
    """``NOT operand``."""

    operand: Node

    precedence: ClassVar[int] = 30


@dataclass(frozen=True, eq=False, slots=True)
class And(Node):
    """``a AND b AND ...`` (two or more operands)."""

    operands: tuple[Node, ...]

    precedence: ClassVar[int] = 20


@dataclass(frozen=True, eq=False, slots=True)
class Or(Node):
    """``a OR b OR ...`` (two or more operands)."""

    operands: tuple[Node, ...]

    precedence: ClassVar[int] = 10


Expr: TypeAlias = Node


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of `node`, left to right."""
    if isinstance(node, Unary | Not | IsNull | Like | In):
        return (node.operand,)
    if isinstance(node, Arith):
        return (node.first, *(e for _, e in node.rest))
    if isinstance(node, Comparison):
        return (node.left, node.right)
    if isinstance(node, Between):
        return (node.operand, node.low, node.high)
    if isinstance(node, And | Or):
        return node.operands
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree, pre-order, without recursion."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))
