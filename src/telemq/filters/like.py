"""LIKE patterns: validation and translation to Python matchers and Java regexes.

A pattern is split at its (unescaped) ``%`` signs into segments; each segment is a fixed
sequence of literal characters and ``_`` (one character). Runs of ``%`` collapse. Matching
then never needs backtracking across segments: the first segment must match at the start,
the last at the end, and each middle segment is taken at its leftmost occurrence after the
previous one, which is optimal for this kind of pattern. The regex form expresses exactly
that with atomic groups, ``\\A first (?>.*?middle)... .*last \\z``, so a pattern such as
``'%a%a%a%a%b'`` costs O(len(text) * len(pattern)) in Python's ``re`` and in Java (Spark)
alike, instead of exploding.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LikeError", "LikePattern", "parse_like"]

Segment = tuple[str | None, ...]  # a character, or None for `_`


class LikeError(ValueError):
    """A bad pattern or escape; `index` is the offending character's index in the pattern."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


@dataclass(frozen=True, slots=True)
class LikePattern:
    """A validated pattern: the `segments` between its ``%`` signs (one if it has none)."""

    segments: tuple[Segment, ...]

    def python_matcher(self) -> Callable[[str], bool]:
        """A function ``str -> bool``; plain string operations where no ``_`` is involved."""
        segs = self.segments
        if not any(None in seg for seg in segs):
            texts = ["".join(c for c in seg if c is not None) for seg in segs]
            if len(texts) == 1:
                exact = texts[0]
                return lambda s: s == exact
            first, last = texts[0], texts[-1]
            middle = [t for t in texts[1:-1] if t]
            if not middle:
                if not last:
                    return lambda s: s.startswith(first)
                if not first:
                    return lambda s: s.endswith(last)
                need = len(first) + len(last)
                return lambda s: len(s) >= need and s.startswith(first) and s.endswith(last)
            if len(middle) == 1 and not first and not last:
                inner = middle[0]
                return lambda s: inner in s
        fullmatch = re.compile(self._regex_body(), re.DOTALL).fullmatch
        return lambda s: fullmatch(s) is not None

    def java_regex(self) -> str:
        """The same matcher as a Java regex, for Spark's ``rlike`` (which searches)."""
        return "(?s)\\A" + self._regex_body() + "\\z"

    def _regex_body(self) -> str:
        segs = [_segment_regex(seg) for seg in self.segments]
        if len(segs) == 1:
            return segs[0]
        middle = "".join(f"(?>.*?{s})" for s in segs[1:-1] if s)
        return f"{segs[0]}{middle}.*{segs[-1]}"


def _segment_regex(seg: Segment) -> str:
    return "".join("." if c is None else _regex_char(c) for c in seg)


def _regex_char(c: str) -> str:
    """Escape one literal character identically for Python ``re`` and ``java.util.regex``."""
    if c.isascii():
        return c if c.isalnum() else f"\\x{ord(c):02x}"
    return c


def parse_like(pattern: str, escape: str | None = None) -> LikePattern:
    """Validate `pattern` (with optional one-character `escape`) and split it.

    The escape character may precede only ``%``, ``_`` or itself; anything else, or an
    escape at the very end, raises `LikeError` at the escape's index.
    """
    if escape is not None and (len(escape) != 1 or escape in "%_"):
        raise LikeError("ESCAPE must be exactly one character other than % and _", 0)
    segments: list[Segment] = []
    current: list[str | None] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == escape:
            if i + 1 == n:
                raise LikeError(f"the pattern ends with the escape character {c!r}", i)
            nxt = pattern[i + 1]
            if nxt not in ("%", "_", escape):
                raise LikeError(
                    f"escape character {c!r} must be followed by %, _ or itself, not {nxt!r}", i
                )
            current.append(nxt)
            i += 2
            continue
        if c == "%":
            segments.append(tuple(current))  # empty middle segments (from %%) are ignored
            current = []
        elif c == "_":
            current.append(None)
        else:
            current.append(c)
        i += 1
    segments.append(tuple(current))
    return LikePattern(tuple(segments))
