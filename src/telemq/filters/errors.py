"""The one exception of the filter language.

Every rejected filter, whatever stage rejects it (tokenizer, parser, checker), raises
`FilterError` with MQ reason 3150 and the place of the problem, so a RegSub reply can say
exactly where the filter is wrong.
"""

from __future__ import annotations

__all__ = ["MQRCCF_FILTER_ERROR", "FilterError", "TooManyTokens", "line_column"]

MQRCCF_FILTER_ERROR = 3150
"""MQ reason code for an invalid content filter (``MQRCCF_FILTER_ERROR``)."""

_CONTEXT = 24  # characters of filter text quoted on each side of the error position


def line_column(text: str, position: int) -> tuple[int, int]:
    """Return the 1-based (line, column) of a 0-based offset; lines end at ``\\n``."""
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    return line, column


def _quote_around(text: str, position: int) -> str:
    """Quote the text around `position`, marking the position with ``>>>``.

    Control characters are escaped so the message stays on one line (it travels in a
    ``<pscr>`` response and in logs).
    """
    start = max(0, position - _CONTEXT)
    end = min(len(text), position + _CONTEXT)
    before = text[start:position]
    after = text[position:end]
    head = "..." if start > 0 else ""
    tail = "..." if end < len(text) else ""
    raw = f"{head}{before}>>>{after}{tail}"
    return '"' + "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in raw) + '"'


class FilterError(Exception):
    """An invalid filter: reason 3150 (``MQRCCF_FILTER_ERROR``) at a position.

    Attributes: ``reason`` (3150), ``position`` (0-based character offset into the filter
    text), ``line`` and ``column`` (1-based), ``problem`` (the message without the quote)
    and ``text`` (the filter text).
    """

    reason: int
    position: int
    line: int
    column: int
    problem: str
    text: str

    def __init__(self, problem: str, text: str, position: int) -> None:
        position = max(0, min(position, len(text)))
        line, column = line_column(text, position)
        message = (
            f"{problem} at line {line}, column {column} (position {position}): "
            f"{_quote_around(text, position)}"
        )
        super().__init__(message)
        self.reason = MQRCCF_FILTER_ERROR
        self.position = position
        self.line = line
        self.column = column
        self.problem = problem
        self.text = text

    def __reduce__(self) -> tuple[type[FilterError], tuple[str, str, int]]:
        """Pickle by constructor arguments (the message is derived from them)."""
        return (type(self), (self.problem, self.text, self.position))


class TooManyTokens(FilterError):
    """Tokenizing stopped at a bound (`tokenize(text, max_tokens)`): the text is too long
    for the size its caller allows, whatever it says."""
