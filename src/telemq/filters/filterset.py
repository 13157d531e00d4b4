"""`FilterSet`: many filters against one message, the broker's hot path.

Work is shared four ways:

1. **One parse per message.** Every filter reads the same `Message`, whose JSON payload is
   parsed at most once (and not at all when no filter reads a payload field).
2. **One evaluation per distinct filter.** Filters are grouped by canonical text, so a
   thousand subscriptions with the same filter cost one evaluation.
3. **An equality index.** A filter that is ``x = literal``, ``x IN (literals)``, or an
   ``AND`` with such a conjunct, can only be TRUE when ``x`` holds one of those literals.
   It is filed under ``(x, value)``; per message ``x`` is read once and only the filters
   filed under its value are evaluated.
4. **A range index.** Likewise for a numeric range conjunct (``x > 30``, ``x <= 5``,
   ``x BETWEEN 10 AND 20``): filters are kept sorted by lower bound, and per message ``x``
   is read once and only filters whose range holds it are evaluated.

Each filter is filed under at most one such conjunct (the most selective kind); the others
are evaluated one by one. A filter found through an index is known to hold its indexed
conjunct, so only the rest of it (its *residual*) is evaluated: ``TRUE AND x`` is ``x``, and
a filter that is nothing but the indexed conjunct costs no evaluation at all.

The indexes are an optimisation only: `matching` returns exactly
the keys whose filter is TRUE, as `evaluate` (which evaluates every filter) would say.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from time import perf_counter
from typing import Generic, TypeVar

from . import ast
from .compiled import Filter, compile_filter
from .evaluate import Condition, compile_condition, compile_value
from .message_view import Message
from .render import render

__all__ = ["FilterSet"]

K = TypeVar("K", bound=Hashable)

_ValueKey = tuple[type, object]
_INDEXABLE = (float, str, bool)


@dataclass(frozen=True, slots=True)
class _Range:
    """A numeric interval; an absent bound is infinite."""

    low: float = -math.inf
    low_inclusive: bool = True
    high: float = math.inf
    high_inclusive: bool = True

    @property
    def sort_key(self) -> tuple[float, int]:
        """Sorts so that the ranges whose low side holds v are those with key <= (v, 0)."""
        return (self.low, 0 if self.low_inclusive else 1)

    def holds_high(self, v: float) -> bool:
        return v < self.high or (v == self.high and self.high_inclusive)


@dataclass(slots=True)
class _Group(Generic[K]):
    """The keys sharing one distinct filter, and where the filter is filed."""

    filter: Filter
    condition: Condition  # the whole filter
    keys: set[K] = field(default_factory=set)
    residual: Condition | None = None  # the filter minus its indexed conjunct; None: TRUE
    index: tuple[str, str] | None = None  # (kind, subject) of the index it is filed in
    values: tuple[_ValueKey, ...] = ()  # equality index: the values it is filed under
    range: _Range | None = None  # range index: its interval


class _EqualityIndex(Generic[K]):
    """Groups filed by the value one field or property must hold for them to be TRUE."""

    def __init__(self, getter: Callable[[Message], object]) -> None:
        self.getter = getter
        self.buckets: dict[_ValueKey, dict[str, _Group[K]]] = {}
        self.size = 0

    def add(self, text: str, group: _Group[K]) -> None:
        for value in group.values:
            self.buckets.setdefault(value, {})[text] = group
        self.size += 1

    def remove(self, text: str, group: _Group[K]) -> None:
        for value in group.values:
            bucket = self.buckets[value]
            del bucket[text]
            if not bucket:
                del self.buckets[value]
        self.size -= 1

    def candidates(self, value: object) -> Iterable[_Group[K]]:
        if type(value) not in _INDEXABLE:
            return ()
        bucket = self.buckets.get((type(value), value))
        return bucket.values() if bucket else ()


class _SortedRanges(Generic[K]):
    """Ranges kept sorted by one sort key, with their groups in the same order."""

    def __init__(self) -> None:
        self.keys: list[tuple[float, int]] = []
        self.entries: list[tuple[_Range, _Group[K]]] = []

    def insert(self, key: tuple[float, int], group: _Group[K]) -> None:
        assert group.range is not None
        at = bisect.bisect_right(self.keys, key)
        self.keys.insert(at, key)
        self.entries.insert(at, (group.range, group))

    def discard(self, group: _Group[K]) -> bool:
        for at, (_, member) in enumerate(self.entries):
            if member is group:
                del self.keys[at]
                del self.entries[at]
                return True
        return False


class _RangeIndex(Generic[K]):
    """Groups filed by the numeric range one field or property must fall in.

    A value v must be stabbed against every interval without scanning them all. Three
    sorted lists make that cheap for the shapes filters use: `x > c` (low only: every
    interval with low <= v holds v), `x < c` (high only: every one with high >= v) and
    `x BETWEEN a AND b` (both: only those with low in [v - widest, v] can hold v, where
    `widest` is the largest width registered).
    """

    def __init__(self, getter: Callable[[Message], object]) -> None:
        self.getter = getter
        self.low_only: _SortedRanges[K] = _SortedRanges()  # by low bound
        self.high_only: _SortedRanges[K] = _SortedRanges()  # by high bound
        self.bounded: _SortedRanges[K] = _SortedRanges()  # by low bound
        self.widest = 0.0  # of `bounded`; never shrinks (only a wider scan if stale)
        self.size = 0

    def add(self, text: str, group: _Group[K]) -> None:
        r = group.range
        assert r is not None
        if r.high == math.inf:
            self.low_only.insert(r.sort_key, group)
        elif r.low == -math.inf:
            self.high_only.insert((r.high, 1 if r.high_inclusive else 0), group)
        else:
            self.bounded.insert(r.sort_key, group)
            self.widest = max(self.widest, r.high - r.low)
        self.size += 1

    def remove(self, text: str, group: _Group[K]) -> None:
        for ranges in (self.low_only, self.high_only, self.bounded):
            if ranges.discard(group):
                break
        self.size -= 1

    def candidates(self, value: object) -> Iterable[_Group[K]]:
        if not isinstance(value, float) or value != value:  # NaN holds in no range
            return ()
        found: list[_Group[K]] = []
        low_only = self.low_only
        if low_only.keys:
            end = bisect.bisect_right(low_only.keys, (value, 0))
            found.extend(g for _, g in low_only.entries[:end])
        high_only = self.high_only
        if high_only.keys:
            start = bisect.bisect_left(high_only.keys, (value, 1))
            found.extend(g for _, g in high_only.entries[start:])
        bounded = self.bounded
        if bounded.keys:
            start = bisect.bisect_left(bounded.keys, (value - self.widest, 0))
            end = bisect.bisect_right(bounded.keys, (value, 0))
            found.extend(g for r, g in bounded.entries[start:end] if r.holds_high(value))
        return found


_Index = _EqualityIndex[K] | _RangeIndex[K]


def _value_key(node: ast.Node) -> _ValueKey | None:
    if isinstance(node, ast.Number):
        return (float, float(node.value))
    if isinstance(node, ast.String | ast.Boolean):
        return (type(node.value), node.value)
    return None


_RANGE_OPS: dict[str, Callable[[float], _Range]] = {
    ">": lambda c: _Range(low=c, low_inclusive=False),
    ">=": lambda c: _Range(low=c),
    "<": lambda c: _Range(high=c, high_inclusive=False),
    "<=": lambda c: _Range(high=c),
}
_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">="}

_Anchor = tuple[ast.Node, tuple[_ValueKey, ...] | _Range]


def _conjunct_anchor(c: ast.Node) -> _Anchor | None:
    """What one conjunct pins: a field/property to values, or to a numeric range."""
    subjects = (ast.Field, ast.Property, ast.Metric)
    if isinstance(c, ast.Comparison):
        for subject, other, op in ((c.left, c.right, c.op), (c.right, c.left, _FLIP.get(c.op))):
            if not isinstance(subject, subjects):
                continue
            if c.op == "=" and (key := _value_key(other)) is not None:
                return subject, (key,)
            if op in _RANGE_OPS and isinstance(other, ast.Number):
                return subject, _RANGE_OPS[op](float(other.value))
    elif isinstance(c, ast.In) and not c.negated and isinstance(c.operand, subjects):
        keys = tuple(dict.fromkeys(k for i in c.items if (k := _value_key(i)) is not None))
        if keys:  # NULL items never make IN TRUE
            return c.operand, keys
    elif (
        isinstance(c, ast.Between)
        and not c.negated
        and isinstance(c.operand, subjects)
        and isinstance(c.low, ast.Number)
        and isinstance(c.high, ast.Number)
    ):
        return c.operand, _Range(float(c.low.value), True, float(c.high.value), True)
    return None


def _conjuncts(expr: ast.Node) -> tuple[ast.Node, ...]:
    return expr.operands if isinstance(expr, ast.And) else (expr,)


def _anchors(conjuncts: tuple[ast.Node, ...]) -> list[tuple[int, _Anchor]]:
    """Every conjunct a filter could be filed under, with its position."""
    return [
        (position, found)
        for position, c in enumerate(conjuncts)
        if (found := _conjunct_anchor(c)) is not None
    ]


def _residual(conjuncts: tuple[ast.Node, ...], anchored: int) -> Condition | None:
    """The condition of every conjunct but the one at `anchored` (None when none is left)."""
    rest = conjuncts[:anchored] + conjuncts[anchored + 1 :]
    if not rest:
        return None
    return compile_condition(rest[0] if len(rest) == 1 else ast.And(rest))


class FilterSet(Generic[K]):
    """A mutable set of filters, each registered under a key (e.g. a subscription id).

    ``add(key, filter)`` registers or replaces, ``remove(key)`` unregisters, and
    ``matching(payload, properties)`` returns the keys whose filter is TRUE for one
    publication.
    """

    def __init__(self) -> None:
        self._filters: dict[K, Filter] = {}
        self._groups: dict[str, _Group[K]] = {}
        self._unindexed: dict[str, _Group[K]] = {}
        self._indexes: dict[tuple[str, str], _Index[K]] = {}

    # -- registration -------------------------------------------------------------------

    def add(self, key: K, flt: Filter | str) -> Filter:
        """Register `flt` (a `Filter` or filter text) under `key`, replacing any previous.

        Text is compiled here, so an invalid filter raises `FilterError` (3150) now, at
        registration, not at publish time.
        """
        compiled = compile_filter(flt) if isinstance(flt, str) else flt
        if key in self._filters:
            self.remove(key)
        self._filters[key] = compiled
        group = self._groups.get(compiled.text)
        if group is None:
            group = self._new_group(compiled)
        group.keys.add(key)
        return compiled

    def remove(self, key: K) -> None:
        """Unregister `key`; raise `KeyError` if it is not registered."""
        compiled = self._filters.pop(key)
        group = self._groups[compiled.text]
        group.keys.discard(key)
        if not group.keys:
            self._drop_group(compiled.text, group)

    def discard(self, key: K) -> None:
        """Unregister `key` if it is registered."""
        if key in self._filters:
            self.remove(key)

    def get(self, key: K) -> Filter | None:
        """The filter registered under `key`, if any."""
        return self._filters.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._filters

    def __len__(self) -> int:
        return len(self._filters)

    def __iter__(self) -> Iterator[K]:
        return iter(self._filters)

    @property
    def distinct(self) -> int:
        """How many distinct filters (canonical texts) are registered."""
        return len(self._groups)

    @property
    def indexed(self) -> int:
        """How many distinct filters are filed in an index (evaluated only when relevant)."""
        return len(self._groups) - len(self._unindexed)

    def _new_group(self, compiled: Filter) -> _Group[K]:
        group: _Group[K] = _Group(compiled, compiled.condition)
        self._groups[compiled.text] = group
        conjuncts = _conjuncts(compiled.expr)
        chosen = self._best_anchor(_anchors(conjuncts))
        if chosen is None:
            self._unindexed[compiled.text] = group
            return group
        anchored, (subject, pinned) = chosen
        group.residual = _residual(conjuncts, anchored)
        kind = "range" if isinstance(pinned, _Range) else "equality"
        name = (kind, render(subject))
        index = self._indexes.get(name)
        if index is None:
            getter = compile_value(subject)
            index = _RangeIndex(getter) if kind == "range" else _EqualityIndex(getter)
            self._indexes[name] = index
        if isinstance(pinned, _Range):
            group.range = pinned
        else:
            group.values = pinned
        group.index = name
        index.add(compiled.text, group)
        return group

    def _best_anchor(self, anchors: list[tuple[int, _Anchor]]) -> tuple[int, _Anchor] | None:
        """The conjunct that will make this filter a candidate least often.

        An equality/IN conjunct beats a range; among equalities, the one whose values are
        shared by the fewest filters already filed (so `site = 7 AND status = 'on'` goes
        under `site`, not under the `'on'` that half the filters name); then fewer values.
        """
        best: tuple[int, _Anchor] | None = None
        best_score: tuple[int, int, int] | None = None
        for position, (subject, pinned) in anchors:
            if isinstance(pinned, _Range):
                score = (1, 0, position)
            else:
                index = self._indexes.get(("equality", render(subject)))
                crowd = 0
                if isinstance(index, _EqualityIndex):
                    crowd = sum(len(index.buckets.get(value, ())) for value in pinned)
                score = (0, crowd * 4 + len(pinned), position)
            if best_score is None or score < best_score:
                best, best_score = (position, (subject, pinned)), score
        return best

    def _drop_group(self, text: str, group: _Group[K]) -> None:
        del self._groups[text]
        if group.index is None:
            del self._unindexed[text]
            return
        index = self._indexes[group.index]
        index.remove(text, group)
        if not index.size:
            del self._indexes[group.index]

    # -- evaluation ---------------------------------------------------------------------

    def matching(
        self,
        payload: bytes | bytearray | memoryview,
        properties: Mapping[str, object] | None = None,
    ) -> set[K]:
        """The keys whose filter is TRUE for this publication."""
        return self.matching_message(Message(payload, properties))

    def matching_message(self, message: Message) -> set[K]:
        """Like `matching`, on a prepared `Message`."""
        return self.matching_within(message, 0.0)[0]

    def matching_within(self, message: Message, deadline: float) -> tuple[set[K], int]:
        """Like `matching_message`, but evaluating no filter once `time.perf_counter()` has
        passed `deadline` (0: no deadline), except the first: whatever the deadline, one
        filter is evaluated. Returns the matching keys and how many keys were not
        evaluated."""
        result: set[K] = set()
        groups = self._candidates(message)
        for position, group in enumerate(groups):
            if deadline and position and perf_counter() > deadline:
                return result, sum(len(g.keys) for g in groups[position:])
            condition = group.condition if group.index is None else group.residual
            if condition is None or condition(message) is True:
                result.update(group.keys)
        return result, 0

    def matching_charged(
        self, message: Message, budget: float, owners: Mapping[K, str]
    ) -> tuple[set[K], dict[str, int]]:
        """Like `matching_within`, with the time charged to the owners of the keys
        (`owners[key]`) rather than spent from one deadline, so that one owner's costly
        filters cannot use up another's time. Each owner's filters are evaluated until
        they have spent `budget` seconds (the first whatever it costs); a filter shared by
        several owners is evaluated while one of them is within budget and charged to each
        that is. Returns the matching keys and, per owner past its budget, how many of its
        keys were not evaluated. A `budget` of 0 bounds nothing."""
        if not budget:
            return self.matching_message(message), {}
        result: set[K] = set()
        spent: dict[str, float] = {}
        skipped: dict[str, int] = {}
        last = perf_counter()
        for group in self._candidates(message):
            live: list[K] = []
            for key in group.keys:
                owner = owners[key]
                if spent.get(owner, 0.0) < budget:
                    live.append(key)
                else:
                    skipped[owner] = skipped.get(owner, 0) + 1
            if not live:
                continue
            condition = group.condition if group.index is None else group.residual
            if condition is None or condition(message) is True:
                result.update(live)
            now = perf_counter()
            elapsed = now - last
            last = now
            for owner in {owners[key] for key in live}:
                spent[owner] = spent.get(owner, 0.0) + elapsed
        return result, skipped

    def _candidates(self, message: Message) -> list[_Group[K]]:
        """The groups that may be TRUE for `message`: the unindexed ones, then those its
        indexed values select."""
        groups: list[_Group[K]] = list(self._unindexed.values())
        for index in self._indexes.values():
            groups.extend(index.candidates(index.getter(message)))
        return groups

    def evaluate(
        self,
        payload: bytes | bytearray | memoryview,
        properties: Mapping[str, object] | None = None,
    ) -> dict[K, bool | None]:
        """Every key's TRUE/FALSE/UNKNOWN, evaluating every filter (no index): diagnostics."""
        message = Message(payload, properties)
        answers = {text: g.condition(message) for text, g in self._groups.items()}
        return {key: answers[f.text] for key, f in self._filters.items()}
