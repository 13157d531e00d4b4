"""Which proxy subscriptions this broker asks of each neighbour (docs/network.md §5).

Theory of operation
-------------------
A publication reaches a subscriber on another broker only if every link on the way carries
a proxy subscription for it. Neighbour N must be asked for a `(sub point, topic filter)` pair
as long as something on this side needs it: a global subscription of this broker, or a proxy
subscription another neighbour asked of this broker (the tree beyond that neighbour needs
it). A proxy asked by N itself never goes back to N: N has the subscription already, and
asking back would make each keep the other's proxy alive for ever.

So the table counts, per neighbour and pair, its **contributors**, and only the edges matter:
a count going 0->1 sends `add`, 1->0 sends `remove`; a thousand subscribers of one filter
make one proxy. Pairs are compared as strings, never merged (`a/#` and `a/b` are two
proxies), as IBM MQ aggregates per topic string: a publication matching both still crosses
once, as a link session gets one copy per message.

The table remembers what it counted for each subscription id, so the caller just reports the
pair a subscription needs now (`set`), whatever happened to it: made, re-pointed in place
(same id, another filter or sub point), gone. Every method returns the difference between the
sets wanted per neighbour before and after the call, nothing else, so applying the changes in
order to the neighbours' view keeps it equal to `wanted`.

A contributor's source need not be a configured neighbour: the proxies of a link removed from
the configuration stay in its kept session (§11) and still count for the others until their
subscriptions go.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Literal

from ..protocol.topics import shared_subscription

Pair = tuple[str, str]  # (sub point, topic filter)

# Topics that never leave their broker: its own statistics and the link control channel.
LOCAL_ROOTS = ("$SYS", "$link")


@dataclass(frozen=True, slots=True, order=True)
class Change:
    """One control message to send: ask `neighbour` to add or remove a proxy."""

    neighbour: str
    op: Literal["add", "remove"]
    sub_point: str
    topic_filter: str


def proxy_pair(sub_point: str, topic_filter: str) -> Pair | None:
    """The pair a global subscription asks the neighbours for, or None when its topics never
    cross a link (`$SYS`, `$link`). `$share/{group}/{f}` asks for `f`: a shared group is
    per broker. `ValueError` for a malformed `$share/` filter (as `shared_subscription`)."""
    shared = shared_subscription(topic_filter)
    if shared is not None:
        topic_filter = shared[1]
    root = topic_filter.partition("/")[0]
    if root in LOCAL_ROOTS:
        return None
    return sub_point, topic_filter


class ProxyTable:
    """Per neighbour and pair, the number of subscriptions that need the pair proposed to
    that neighbour (see the module docstring)."""

    def __init__(self, neighbours: Iterable[str]) -> None:
        self._counts: dict[str, dict[Pair, int]] = {}
        self._subs: dict[Hashable, tuple[Pair, str]] = {}  # sub id -> (pair, source)
        for name in neighbours:
            self.add_neighbour(name)

    @property
    def neighbours(self) -> list[str]:
        return sorted(self._counts)

    def set(self, sub_id: Hashable, pair: Pair | None, source: str = "") -> list[Change]:
        """Subscription `sub_id` now needs `pair` (None: it is gone, or needs nothing, being
        `Local` or `$SYS`). `source`: "" for a subscription of this broker, the neighbour's
        name for a proxy that neighbour asked for (it counts for every neighbour but that
        one). Returns the changes to send."""
        old = self._subs.get(sub_id)
        new = None if pair is None else (pair, source)
        if old == new:
            return []
        before: dict[tuple[str, Pair], bool] = {}  # touched (neighbour, pair) -> was wanted
        if old is not None:
            del self._subs[sub_id]
            self._count(old, -1, before)
        if new is not None:
            self._subs[sub_id] = new
            self._count(new, 1, before)
        changes = []
        for (neighbour, (sub_point, topic_filter)), was in before.items():
            now = (sub_point, topic_filter) in self._counts[neighbour]
            if now != was:
                op: Literal["add", "remove"] = "add" if now else "remove"
                changes.append(Change(neighbour, op, sub_point, topic_filter))
        return sorted(changes)

    def add_neighbour(self, name: str) -> list[Change]:
        """A new neighbour: every contributor not from it counts for it. Returns its adds."""
        if not name:
            raise ValueError("a neighbour needs a name")
        if name in self._counts:
            raise ValueError(f"neighbour {name!r} is already in the proxy table")
        counts: dict[Pair, int] = {}
        for pair, source in self._subs.values():
            if source != name:
                counts[pair] = counts.get(pair, 0) + 1
        self._counts[name] = counts
        return [Change(name, "add", *pair) for pair in sorted(counts)]

    def remove_neighbour(self, name: str) -> list[Change]:
        """A neighbour is gone: what it was asked for, as removes (for the caller's accounts;
        nobody is left to send them to). The proxies it asked for still count for the
        others until their subscriptions are `set` to None."""
        counts = self._counts.pop(name, None)
        if counts is None:
            raise ValueError(f"neighbour {name!r} is not in the proxy table")
        return [Change(name, "remove", *pair) for pair in sorted(counts)]

    def wanted(self, neighbour: str) -> list[Pair]:
        """The whole set to ask of `neighbour`, sorted (a `sync`)."""
        return sorted(self._counts[neighbour])

    def count(self, neighbour: str, pair: Pair) -> int:
        """How many subscriptions need `pair` from `neighbour` (ListSubs' `Count`)."""
        return self._counts[neighbour].get(pair, 0)

    def _count(
        self, contribution: tuple[Pair, str], delta: int, before: dict[tuple[str, Pair], bool]
    ) -> None:
        pair, source = contribution
        for neighbour, counts in self._counts.items():
            if neighbour == source:
                continue
            before.setdefault((neighbour, pair), pair in counts)
            count = counts.get(pair, 0) + delta
            if count:
                counts[pair] = count
            else:
                del counts[pair]
