"""`Filter`: a checked, compiled filter; `compile_filter` makes one from text."""

from __future__ import annotations

from collections.abc import Mapping

from . import ast
from .errors import FilterError, TooManyTokens
from .evaluate import Condition, compile_condition
from .message_view import Message
from .parser import parse
from .render import render, render_path

__all__ = ["Filter", "compile_filter"]


class Filter:
    """A compiled filter. Immutable; equal (and hashed) by canonical text.

    - `text`: the canonical text (``compile_filter(f.text) == f``);
    - `source`: the text it was compiled from;
    - `expr`: the AST;
    - `fields`: canonical paths of the payload fields it reads (``{"temp", "site.name"}``);
    - `metrics`: names of the Sparkplug B metrics it reads (``{"Pressure"}`` for
      ``Metric['Pressure']``);
    - `properties`: names of the message properties it reads (``{"Topic", "User.site"}``:
      ``User.<name>`` for ``Properties.User.<name>``), the keys it reads in `evaluate`;
      ``Topic`` whenever it reads a metric (Sparkplug B is told by the topic);
    - `size`: the nodes of its syntax tree (``a = 1`` has 3) and the values of its IN lists,
      what compiling and evaluating it cost grows with: the broker's budgets count it.
    """

    __slots__ = (
        "_condition",
        "expr",
        "fields",
        "metrics",
        "properties",
        "size",
        "source",
        "text",
    )

    expr: ast.Node
    text: str
    source: str
    fields: frozenset[str]
    metrics: frozenset[str]
    properties: frozenset[str]
    size: int

    def __init__(
        self,
        expr: ast.Node,
        source: str | None = None,
        max_size: int | None = None,
        limit_name: str = "",
    ) -> None:
        """Wrap an AST that `parser.parse` produced (use `compile_filter` for text).
        `max_size`: refuse (FilterError) a larger tree before compiling anything; the
        message names the limit as `limit_name` when given."""
        nodes = list(ast.walk(expr))
        self.size = len(nodes) + sum(len(n.items) for n in nodes if isinstance(n, ast.In))
        if max_size is not None and self.size > max_size:
            text = source if source is not None else render(expr)
            named = f" ({limit_name})" if limit_name else ""
            raise FilterError(
                f"the filter's size is {self.size}, more than the limit of {max_size}{named}",
                text,
                0,
            )
        self.expr = expr
        self.text = render(expr)
        self.source = self.text if source is None else source
        self.fields = frozenset(render_path(n.path) for n in nodes if isinstance(n, ast.Field))
        self.metrics = frozenset(n.name for n in nodes if isinstance(n, ast.Metric))
        properties = {n.name for n in nodes if isinstance(n, ast.Property)}
        if self.metrics:
            properties.add("Topic")  # a payload is Sparkplug B on a spBv1.0/ topic only
        self.properties = frozenset(properties)
        self._condition: Condition = compile_condition(expr)

    @property
    def condition(self) -> Condition:
        """The compiled function ``Message -> bool | None`` (for engines like `FilterSet`)."""
        return self._condition

    @property
    def reads_payload(self) -> bool:
        """Whether evaluation needs the payload parsed at all."""
        return bool(self.fields or self.metrics)

    def evaluate(
        self,
        payload: bytes | bytearray | memoryview,
        properties: Mapping[str, object] | None = None,
    ) -> bool | None:
        """TRUE, FALSE or UNKNOWN (``None``) for one publication.

        `properties` may hold ``Topic``, ``QoS``, ``Retain``, ``ClientId``, ``UserId``,
        ``SubPoint``, ``ContentType`` (str) and ``User.<name>`` (str: the first value of
        the MQTT 5.0 User Property ``<name>``); absent ones are NULL.
        """
        return self._condition(Message(payload, properties))

    def evaluate_message(self, message: Message) -> bool | None:
        """Like `evaluate`, on a `Message` shared with other filters (parsed once)."""
        return self._condition(message)

    def matches(
        self,
        payload: bytes | bytearray | memoryview,
        properties: Mapping[str, object] | None = None,
    ) -> bool:
        """Whether the publication passes: the filter is TRUE (not FALSE, not UNKNOWN)."""
        return self._condition(Message(payload, properties)) is True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Filter) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"compile_filter({self.text!r})"

    def __reduce__(self) -> tuple[object, tuple[str]]:
        """Pickle as text (closures do not pickle); unpickling recompiles."""
        return (compile_filter, (self.text,))


# A filter's tokens per unit of size, at most: a LIKE with NOT and ESCAPE is 6 tokens for 2
# nodes, parentheses add 2 per node. Tokenizing stops past this many per unit of `max_size`.
TOKENS_PER_SIZE = 8


def compile_filter(text: str, max_size: int | None = None, limit_name: str = "") -> Filter:
    """Parse, check and compile `text`; raise `FilterError` (reason 3150) if invalid, or if
    it is larger than `max_size` (`Filter.size`; `limit_name` names that limit). A text far
    too long for `max_size` is refused while it is tokenized, before it is parsed."""
    if max_size is None:
        return Filter(parse(text), text)
    try:
        expr = parse(text, TOKENS_PER_SIZE * max_size + 16)
    except TooManyTokens as error:
        named = f" ({limit_name})" if limit_name else ""
        raise FilterError(
            f"the filter is larger than the limit of {max_size}{named}", text, error.position
        ) from None
    return Filter(expr, text, max_size, limit_name)
