"""Parser: tokens -> AST, by operator precedence with explicit stacks (no recursion).

The parser is a shunting-yard loop: an operand stack, an operator stack, and a flag saying
whether an operand or an operator comes next. Prefix operators (``NOT``, signs) and
parentheses live on the operator stack, so nesting costs stack entries, never Python
frames: no input can reach Python's recursion limit, and parsing is linear in the number of
tokens. The depth limit is counted on the same stack.

Precedence, high to low (binding power in brackets)::

    unary + -  [70]   * / %  [60]   + -  [50]
    = <> != < <= > >=, [NOT] BETWEEN, [NOT] IN, [NOT] LIKE, IS [NOT] NULL  [40]
    NOT  [30]   AND  [20]   OR  [10]

Comparison-level operators do not chain (``a = b = c`` is an error; parenthesize).
``AND``/``OR`` chains become one n-ary node and ``+ -``/``* / %`` chains one `Arith` node,
built in amortized O(1) per operand (see `_Chain`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from . import ast
from .check import check, resolve_identifier
from .errors import FilterError
from .tokens import KEYWORDS, Token, TokenType, tokenize

__all__ = ["MAX_DEPTH", "parse", "parse_syntax"]

MAX_DEPTH = 64
"""Deepest nesting accepted. Each ``(``, prefix ``NOT`` and unary sign opens one level."""

_OR, _AND, _NOT, _CMP, _ADD, _MUL, _SIGN = 10, 20, 30, 40, 50, 60, 70

_COMPARISON_TOKENS = {
    TokenType.EQ: "=",
    TokenType.NE: "<>",
    TokenType.LT: "<",
    TokenType.LE: "<=",
    TokenType.GT: ">",
    TokenType.GE: ">=",
}
_ARITH_TOKENS = {
    TokenType.PLUS: ("+", _ADD),
    TokenType.MINUS: ("-", _ADD),
    TokenType.STAR: ("*", _MUL),
    TokenType.SLASH: ("/", _MUL),
    TokenType.PERCENT: ("%", _MUL),
}
METRIC = "Metric"
"""``Metric['<name>']`` is a Sparkplug B metric; ``Metric`` otherwise is a payload field."""

_LITERAL_TOKENS = frozenset(
    {TokenType.NUMBER, TokenType.STRING, TokenType.TRUE, TokenType.FALSE, TokenType.NULL}
)


@dataclass(slots=True)
class _Op:
    """An operator-stack entry.

    kind: ``paren``, ``not``, ``sign``, ``and``, ``or``, ``cmp``, ``arith``, ``between``.
    For ``between``, `stage` is 0 until its ``AND`` is read, then 1.
    """

    kind: str
    prec: int
    token: Token
    op: str = ""
    negated: bool = False
    stage: int = 0


class _Chain:
    """A growing AND/OR or arithmetic chain, turned into a node when something consumes it.

    Appending to a list keeps long chains linear; building a new tuple per operand would
    make ``a OR b OR ...`` quadratic.
    """

    __slots__ = ("items", "kind", "ops")

    def __init__(self, kind: str, first: ast.Node) -> None:
        self.kind = kind  # "and", "or", "+" (additive) or "*" (multiplicative)
        self.items: list[ast.Node] = []
        self.ops: list[str] = []
        if kind in ("and", "or"):
            self.add_operand(first)
        else:
            self.items.append(first)

    def add_operand(self, node: ast.Node) -> None:
        """Append an AND/OR operand, flattening a same-kind node (from parentheses)."""
        if isinstance(node, ast.And if self.kind == "and" else ast.Or):
            self.items.extend(node.operands)
        else:
            self.items.append(node)

    def node(self) -> ast.Node:
        first = self.items[0]
        if self.kind == "and":
            return ast.And(tuple(self.items), pos=first.pos)
        if self.kind == "or":
            return ast.Or(tuple(self.items), pos=first.pos)
        rest = tuple(zip(self.ops, self.items[1:], strict=True))
        return ast.Arith(first, rest, pos=first.pos)


def _level(op: str) -> str:
    return "+" if op in ast.ADDITIVE else "*"


class _Parser:
    """One parse of one token list; see the module docstring."""

    def __init__(self, tokens: list[Token], text: str) -> None:
        self.tokens = tokens
        self.text = text
        self.i = 0
        self.ops: list[_Op] = []
        self.vals: list[ast.Node | _Chain] = []
        self.compared: list[bool] = []  # per operand: a bare comparison-level result?
        self.depth = 0

    # -- errors and small helpers -------------------------------------------------------

    def fail(self, problem: str, position: int) -> NoReturn:
        raise FilterError(problem, self.text, position)

    def expect(self, ttype: TokenType, what: str) -> Token:
        tok = self.tokens[self.i]
        if tok.type is not ttype:
            self.fail(f"expected {what}, found {tok.describe()}", tok.start)
        self.i += 1
        return tok

    def push(self, node: ast.Node | _Chain, compared: bool = False) -> None:
        self.vals.append(node)
        self.compared.append(compared)

    def pop(self) -> ast.Node:
        value = self.vals.pop()
        self.compared.pop()
        return value.node() if isinstance(value, _Chain) else value

    def open_level(self, tok: Token) -> None:
        if self.depth >= MAX_DEPTH:
            self.fail(
                f"nesting is deeper than {MAX_DEPTH} levels (each '(', NOT and sign opens one)",
                tok.start,
            )
        self.depth += 1

    # -- the main loop ------------------------------------------------------------------

    def parse(self) -> ast.Node:
        tokens = self.tokens
        if tokens[0].type is TokenType.EOF:
            self.fail("the filter is empty", tokens[0].start)
        expect_operand = True
        while True:
            tok = tokens[self.i]
            if expect_operand:
                expect_operand = self.operand(tok)
                continue
            t = tok.type
            if t is TokenType.EOF:
                self.reduce_while(0, tok)
                if self.ops:
                    opened = self.ops[-1].token
                    self.fail(
                        f"missing ')': the '(' at line {opened.line}, column {opened.column} "
                        "is never closed",
                        tok.start,
                    )
                return self.pop()
            self.i += 1
            if t is TokenType.AND:
                self.reduce_while(_CMP + 1, tok)
                top = self.ops[-1] if self.ops else None
                if top is not None and top.kind == "between" and top.stage == 0:
                    top.stage = 1  # this AND separates BETWEEN's bounds
                else:
                    self.reduce_while(_AND, tok)
                    self.ops.append(_Op("and", _AND, tok))
                expect_operand = True
            elif t is TokenType.OR:
                self.reduce_while(_OR, tok)
                self.ops.append(_Op("or", _OR, tok))
                expect_operand = True
            elif t in _ARITH_TOKENS:
                op, prec = _ARITH_TOKENS[t]
                self.reduce_while(prec, tok)
                self.ops.append(_Op("arith", prec, tok, op=op))
                expect_operand = True
            elif t is TokenType.RPAREN:
                self.reduce_while(0, tok)
                if not self.ops:
                    self.fail("unmatched ')'", tok.start)
                self.ops.pop()
                self.depth -= 1
                self.compared[-1] = False
            elif t in _COMPARISON_TOKENS or t in (
                TokenType.BETWEEN,
                TokenType.IN,
                TokenType.LIKE,
                TokenType.IS,
                TokenType.NOT,
            ):
                expect_operand = self.comparison(tok)
            else:
                prev = tokens[self.i - 2]
                self.fail(
                    f"expected an operator, AND, OR or the end of the filter after "
                    f"{prev.describe()}, found {tok.describe()}",
                    tok.start,
                )

    def operand(self, tok: Token) -> bool:
        """Read what may start an operand; return whether an operand is still expected."""
        t = tok.type
        if t in _LITERAL_TOKENS:
            self.i += 1
            self.push(_literal(tok))
            return False
        if t is TokenType.NAME:
            self.push(self.identifier())
            return False
        self.i += 1
        if t is TokenType.LPAREN:
            self.open_level(tok)
            self.ops.append(_Op("paren", 0, tok))
            return True
        if t is TokenType.NOT:
            top = self.ops[-1] if self.ops else None
            if top is not None and top.prec > _NOT:
                self.fail(
                    f"NOT cannot follow {top.token.describe()} here; "
                    "put the negated condition in parentheses",
                    tok.start,
                )
            self.open_level(tok)
            self.ops.append(_Op("not", _NOT, tok))
            return True
        if t is TokenType.PLUS or t is TokenType.MINUS:
            self.open_level(tok)
            self.ops.append(_Op("sign", _SIGN, tok, op=tok.text))
            return True
        if t is TokenType.EOF:
            prev = self.tokens[self.i - 2]
            self.fail(f"expected a value after {prev.describe()}, found end of filter", tok.start)
        self.fail(f"expected a value, found {tok.describe()}", tok.start)

    def comparison(self, tok: Token) -> bool:
        """Read a comparison-level operator; return whether an operand is expected next."""
        negated = False
        kind: TokenType
        if tok.type is TokenType.NOT:
            follow = self.tokens[self.i]
            if follow.type not in (TokenType.BETWEEN, TokenType.IN, TokenType.LIKE):
                self.fail(
                    f"expected BETWEEN, IN or LIKE after NOT, found {follow.describe()}",
                    follow.start,
                )
            self.i += 1
            negated = True
            kind = follow.type
        else:
            kind = tok.type
        self.reduce_while(_CMP, tok)
        if self.compared[-1]:
            self.fail(
                f"{tok.describe()} cannot follow another comparison; use parentheses",
                tok.start,
            )
        if kind in _COMPARISON_TOKENS:
            self.ops.append(_Op("cmp", _CMP, tok, op=_COMPARISON_TOKENS[kind]))
            return True
        if kind is TokenType.BETWEEN:
            self.ops.append(_Op("between", _CMP, tok, negated=negated))
            return True
        operand = self.pop()
        if kind is TokenType.IN:
            node: ast.Node = ast.In(operand, self.in_list(), negated, pos=operand.pos)
        elif kind is TokenType.LIKE:
            node = self.like(operand, negated)
        else:  # IS [NOT] NULL
            is_not = self.tokens[self.i].type is TokenType.NOT
            if is_not:
                self.i += 1
            self.expect(
                TokenType.NULL, "NULL after IS NOT" if is_not else "NULL or NOT NULL after IS"
            )
            node = ast.IsNull(operand, is_not, pos=operand.pos)
        self.push(node, compared=True)
        return False

    # -- reductions ---------------------------------------------------------------------

    def reduce_while(self, prec: int, tok: Token) -> None:
        """Apply stacked operators binding at least `prec` (never past a parenthesis)."""
        ops = self.ops
        while ops and ops[-1].prec >= prec and ops[-1].kind != "paren":
            op = ops.pop()
            if op.kind == "between" and op.stage == 0:
                self.fail(f"expected AND to complete BETWEEN, found {tok.describe()}", tok.start)
            self.apply(op)

    def apply(self, op: _Op) -> None:
        kind = op.kind
        if kind == "not":
            self.depth -= 1
            self.push(ast.Not(self.pop(), pos=op.token.start))
        elif kind == "sign":
            self.depth -= 1
            operand = self.pop()
            if isinstance(operand, ast.Number):
                value = -operand.value if op.op == "-" else operand.value
                self.push(ast.Number(value, pos=op.token.start))
            else:
                self.push(ast.Unary(op.op, operand, pos=op.token.start))
        elif kind == "cmp":
            right = self.pop()
            left = self.pop()
            self.push(ast.Comparison(op.op, left, right, pos=left.pos), compared=True)
        elif kind == "between":
            high = self.pop()
            low = self.pop()
            operand = self.pop()
            self.push(ast.Between(operand, low, high, op.negated, pos=operand.pos), compared=True)
        else:  # and, or, arith
            right = self.pop()
            chain_kind = _level(op.op) if kind == "arith" else kind
            lhs = self.vals.pop()
            self.compared.pop()
            if isinstance(lhs, _Chain) and lhs.kind == chain_kind:
                chain = lhs
            elif isinstance(lhs, ast.Arith) and chain_kind == ("+" if lhs.additive else "*"):
                chain = _Chain(chain_kind, lhs.first)
                for o, e in lhs.rest:
                    chain.ops.append(o)
                    chain.items.append(e)
            else:
                chain = _Chain(chain_kind, lhs.node() if isinstance(lhs, _Chain) else lhs)
            if kind == "arith":
                chain.ops.append(op.op)
                chain.items.append(right)
            else:
                chain.add_operand(right)
            self.push(chain)

    # -- pieces read in place -----------------------------------------------------------

    def identifier(self) -> ast.Node:
        """``name { . name | [ index ] }``; keywords are accepted as names after a dot."""
        tokens = self.tokens
        first = tokens[self.i]
        self.i += 1
        if (
            first.text == METRIC
            and tokens[self.i].type is TokenType.LBRACKET
            and tokens[self.i + 1].type is TokenType.STRING
        ):
            return self.metric(first)
        steps: list[str | int] = [first.text]
        positions = [first.start]
        while True:
            tok = tokens[self.i]
            if tok.type is TokenType.DOT:
                name = tokens[self.i + 1]
                if name.type is not TokenType.NAME and name.text.upper() not in KEYWORDS:
                    self.fail(
                        f"expected {_name_after(steps)} after '.', found {name.describe()}",
                        name.start,
                    )
                steps.append(name.text)
                positions.append(name.start)
                self.i += 2
            elif tok.type is TokenType.LBRACKET:
                index = tokens[self.i + 1]
                if index.type is TokenType.STRING:
                    hint = " (names are case-sensitive)" if steps == [METRIC.lower()] else ""
                    self.fail(
                        "a string in brackets names a Sparkplug metric only after Metric: "
                        f"Metric['<name>']{hint}; an array index is a non-negative integer",
                        index.start,
                    )
                if index.type is not TokenType.NUMBER or not isinstance(index.value, int):
                    self.fail(
                        f"an array index must be a non-negative integer, found {index.describe()}",
                        index.start,
                    )
                self.i += 2
                self.expect(TokenType.RBRACKET, "']' after the array index")
                steps.append(index.value)
                positions.append(index.start)
            else:
                return resolve_identifier(tuple(steps), tuple(positions), self.text)

    def metric(self, first: Token) -> ast.Metric:
        """``Metric [ 'name' ]``: a Sparkplug B metric by name; nothing may follow it."""
        name = self.tokens[self.i + 1]
        self.i += 2
        self.expect(TokenType.RBRACKET, "']' after the metric name")
        if not name.value:
            self.fail("a metric name cannot be empty", name.start)
        follow = self.tokens[self.i]
        if follow.type in (TokenType.DOT, TokenType.LBRACKET):
            self.fail(
                f"Metric[{name.text}] has no fields or elements (a metric's value is a number,"
                " a string or a boolean)",
                follow.start,
            )
        return ast.Metric(str(name.value), pos=first.start)

    def in_list(self) -> tuple[ast.Literal, ...]:
        """``( literal {, literal} )``: numbers (optionally signed), strings, booleans, NULL."""
        self.expect(TokenType.LPAREN, "'(' to start the IN list")
        items: list[ast.Literal] = []
        tokens = self.tokens
        while True:
            tok = tokens[self.i]
            sign: Token | None = None
            if tok.type in (TokenType.PLUS, TokenType.MINUS):
                sign = tok
                self.i += 1
                tok = tokens[self.i]
                if tok.type is not TokenType.NUMBER:
                    self.fail(
                        f"expected a number after '{sign.text}', found {tok.describe()}", tok.start
                    )
            if tok.type not in _LITERAL_TOKENS:
                self.fail(
                    "IN list items must be literals (numbers, strings, TRUE, FALSE or NULL), "
                    f"found {tok.describe()}",
                    tok.start,
                )
            self.i += 1
            literal = _literal(tok)
            if sign is not None and isinstance(literal, ast.Number):
                value = -literal.value if sign.text == "-" else literal.value
                literal = ast.Number(value, pos=sign.start)
            items.append(literal)
            sep = tokens[self.i]
            self.i += 1
            if sep.type is TokenType.RPAREN:
                return tuple(items)
            if sep.type is not TokenType.COMMA:
                self.fail(f"expected ',' or ')' in the IN list, found {sep.describe()}", sep.start)

    def like(self, operand: ast.Node, negated: bool) -> ast.Like:
        """``LIKE 'pattern' [ESCAPE 'c']`` after the operand."""
        tok = self.tokens[self.i]
        if tok.type is not TokenType.STRING:
            self.fail(f"LIKE needs a string literal pattern, found {tok.describe()}", tok.start)
        self.i += 1
        escape: str | None = None
        escape_pos = -1
        if self.tokens[self.i].type is TokenType.ESCAPE:
            self.i += 1
            esc = self.tokens[self.i]
            if esc.type is not TokenType.STRING:
                self.fail(f"ESCAPE needs a string literal, found {esc.describe()}", esc.start)
            self.i += 1
            escape = str(esc.value)
            escape_pos = esc.start
        return ast.Like(
            operand, str(tok.value), escape, negated, tok.start, escape_pos, pos=operand.pos
        )


def _name_after(steps: list[str | int]) -> str:
    """What the name after ``steps .`` would be, for an error message."""
    if steps[:1] == ["Root"]:
        steps = steps[1:]
        if not steps:
            return "MQMD or Properties"
        if steps == ["MQMD"]:
            return "an MQMD field name (UserIdentifier)"
    if steps == ["Properties"]:
        return "a property name"
    if steps == ["Properties", "User"]:
        return "a user property name"
    return "a field name"


def _literal(tok: Token) -> ast.Literal:
    t = tok.type
    if t is TokenType.NUMBER:
        assert not isinstance(tok.value, str)
        return ast.Number(tok.value, pos=tok.start)
    if t is TokenType.STRING:
        return ast.String(str(tok.value), pos=tok.start)
    if t is TokenType.NULL:
        return ast.Null(pos=tok.start)
    return ast.Boolean(t is TokenType.TRUE, pos=tok.start)


def parse_syntax(text: str, max_tokens: int = 0) -> ast.Node:
    """Tokenize and parse `text` without the checker's rules (for tools and tests)."""
    return _Parser(tokenize(text, max_tokens), text).parse()


def parse(text: str, max_tokens: int = 0) -> ast.Node:
    """Parse and check `text`; return the canonical AST or raise `FilterError` (3150).
    `max_tokens` (0: no bound) stops a long text early, before parsing it all."""
    tree = parse_syntax(text, max_tokens)
    check(tree, text)
    return tree
