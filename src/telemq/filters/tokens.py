"""Tokenizer: filter text -> tokens with position, line and column.

One compiled regular expression scans the text left to right, so tokenizing is linear in
the text's length. Lexical mistakes (an unterminated string, a stray character, a malformed
number) are reported here, at the offending character, before the parser sees anything.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import NoReturn

from .errors import FilterError, TooManyTokens

__all__ = ["KEYWORDS", "MAX_LENGTH", "Token", "TokenType", "tokenize"]

MAX_LENGTH = 65_536
"""The longest filter text accepted, in characters."""


class TokenType(enum.Enum):
    """Kinds of token; keyword members carry their canonical (upper-case) spelling."""

    NAME = "name"
    NUMBER = "number"
    STRING = "string"
    AND = "AND"
    OR = "OR"
    NOT = "NOT"
    BETWEEN = "BETWEEN"
    LIKE = "LIKE"
    IN = "IN"
    IS = "IS"
    NULL = "NULL"
    TRUE = "TRUE"
    FALSE = "FALSE"
    ESCAPE = "ESCAPE"
    EQ = "="
    NE = "<>"
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    PLUS = "+"
    MINUS = "-"
    STAR = "*"
    SLASH = "/"
    PERCENT = "%"
    LPAREN = "("
    RPAREN = ")"
    LBRACKET = "["
    RBRACKET = "]"
    DOT = "."
    COMMA = ","
    EOF = "end of filter"


KEYWORDS: dict[str, TokenType] = {
    t.value: t
    for t in (
        TokenType.AND,
        TokenType.OR,
        TokenType.NOT,
        TokenType.BETWEEN,
        TokenType.LIKE,
        TokenType.IN,
        TokenType.IS,
        TokenType.NULL,
        TokenType.TRUE,
        TokenType.FALSE,
        TokenType.ESCAPE,
    )
}
"""Reserved words (matched case-insensitively); they cannot start an identifier."""

_SYMBOLS: dict[str, TokenType] = {
    "=": TokenType.EQ,
    "<>": TokenType.NE,
    "!=": TokenType.NE,
    "<": TokenType.LT,
    "<=": TokenType.LE,
    ">": TokenType.GT,
    ">=": TokenType.GE,
    "+": TokenType.PLUS,
    "-": TokenType.MINUS,
    "*": TokenType.STAR,
    "/": TokenType.SLASH,
    "%": TokenType.PERCENT,
    "(": TokenType.LPAREN,
    ")": TokenType.RPAREN,
    "[": TokenType.LBRACKET,
    "]": TokenType.RBRACKET,
    ".": TokenType.DOT,
    ",": TokenType.COMMA,
}

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\n\f\v]+)
    |(?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
    |(?P<name>[^\W\d]\w*)
    |(?P<string>'[^']*+(?:''[^']*+)*+')
    |(?P<symbol><>|!=|<=|>=|[=<>+\-*/%(),.\[\]])
    """,
    re.VERBOSE,
)
_AFTER_NUMBER = re.compile(r"[\w.]+")
_SURROGATE = re.compile("[\ud800-\udfff]")

_HINTS = {
    '"': "double quotes are not allowed; strings use single quotes",
    "&": "use AND",
    "|": "use OR",
    "!": "use NOT, or <> for 'not equal'",
    ";": "a filter is a single condition",
}

_INT_DIGITS_MAX = 400  # longer integers are out of a double's range anyway


@dataclass(frozen=True, slots=True)
class Token:
    """One token. `start` is a 0-based character offset; `line` and `column` are 1-based.

    `value` is the decoded literal for NUMBER (int or float) and STRING (quotes removed,
    ``''`` undoubled); for other tokens it is the raw text.
    """

    type: TokenType
    text: str
    start: int
    line: int
    column: int
    value: int | float | str

    def describe(self) -> str:
        """How an error message names this token."""
        if self.type is TokenType.EOF:
            return "end of filter"
        if self.type is TokenType.STRING:
            return f"string {self.text}"
        if self.type is TokenType.NUMBER:
            return f"number {self.text}"
        if self.type is TokenType.NAME:
            return f"name '{self.text}'"
        if self.type.value in KEYWORDS:
            return str(self.type.value)
        return f"'{self.text}'"


def _number_value(text: str) -> int | float:
    if any(c in text for c in ".eE"):
        return float(text)
    if len(text) > _INT_DIGITS_MAX:
        return float("inf")
    return int(text)


def tokenize(text: str, max_tokens: int = 0) -> list[Token]:
    """Split `text` into tokens, ending with one EOF token; raise `FilterError` if invalid,
    or as soon as there are more than `max_tokens` (0: no bound)."""
    if len(text) > MAX_LENGTH:
        raise FilterError(
            f"filter is longer than {MAX_LENGTH} characters ({len(text)})", text, MAX_LENGTH
        )
    bad = _SURROGATE.search(text)
    if bad:
        raise FilterError(
            f"invalid character U+{ord(bad.group()):04X} (a lone surrogate)", text, bad.start()
        )
    tokens: list[Token] = []
    append = tokens.append
    pos = 0
    line = 1
    line_start = 0
    n = len(text)
    match = _TOKEN.match
    while pos < n:
        m = match(text, pos)
        if m is None:
            _lexical_error(text, pos)
        kind = m.lastgroup
        raw = m.group()
        end = m.end()
        if kind == "ws":
            pass
        elif kind == "name":
            ttype = KEYWORDS.get(raw.upper(), TokenType.NAME) if raw.isascii() else TokenType.NAME
            append(Token(ttype, raw, pos, line, pos - line_start + 1, raw))
        elif kind == "number":
            if raw[0] == "0" and len(raw) > 1 and raw[1].isdigit():
                raise FilterError(f"leading zeros are not allowed in number {raw!r}", text, pos)
            tail = _AFTER_NUMBER.match(text, end)
            if tail:
                raise FilterError(f"malformed number '{raw}{tail.group()}'", text, pos)
            append(
                Token(TokenType.NUMBER, raw, pos, line, pos - line_start + 1, _number_value(raw))
            )
        elif kind == "string":
            append(
                Token(
                    TokenType.STRING,
                    raw,
                    pos,
                    line,
                    pos - line_start + 1,
                    raw[1:-1].replace("''", "'"),
                )
            )
        else:
            append(Token(_SYMBOLS[raw], raw, pos, line, pos - line_start + 1, raw))
        newlines = raw.count("\n")
        if newlines:
            line += newlines
            line_start = pos + raw.rfind("\n") + 1
        pos = end
        if max_tokens and len(tokens) > max_tokens:
            raise TooManyTokens(f"the filter has more than {max_tokens} tokens", text, pos)
    tokens.append(Token(TokenType.EOF, "", n, line, n - line_start + 1, ""))
    return tokens


def _lexical_error(text: str, pos: int) -> NoReturn:
    ch = text[pos]
    if ch == "'":
        raise FilterError("unterminated string (no closing quote)", text, pos)
    hint = _HINTS.get(ch)
    shown = ch if ch.isprintable() else repr(ch)[1:-1]
    problem = f"unexpected character '{shown}'"
    if ord(ch) > 0x7F or not ch.isprintable():
        problem += f" (U+{ord(ch):04X})"
    raise FilterError(f"{problem}; {hint}" if hint else problem, text, pos)
