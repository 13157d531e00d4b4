"""Which brokers lie behind each link, and which link would close a cycle (docs/network.md §4).

Theory of operation
-------------------
A publication crosses each link once and never goes back. That is loop-free only while the
links form a tree: one path between any two brokers. So every broker keeps, per link, the
paths to the brokers reachable through it (what the neighbour announced), and refuses a link
that would make a second path to a broker it already reaches: that second path and the first
one, joined at this broker, are a cycle. A path naming this broker is a cycle too (or two
brokers share a name: the same refusal either way).

Announcements use split horizon: a broker tells neighbour N only the paths it knows through
its other links, its own name first. N learns nothing about itself from them, so a tree never
looks like a cycle, and a real cycle shows up as soon as news of some broker arrives over two
links.

Links coming up at the same moment each pass their own check, and the cycle they form shows
in the reach updates that follow. Those are recorded even when they close a cycle: were a
broker to refuse them, the news would stop there and the ends of the link to drop might never
learn of the cycle (a ring of eight brokers does that). So a broker on the cycle reports it
and passes the news on; every broker on it sees the cycle (as a set of consecutive pairs,
whatever its rotation or direction) and `tie_break` makes them pick the same link, which its
two ends drop (`drops`). While the cycle lasts a broker may be reachable two ways: the next
hop is the shorter, and each announcement carries one path per broker, so announcements stay
as small as the network. A link dropped that way is the last-sorting one of its cycle, so the
rest of the cycle still joins its two ends: breaking cycles never splits the network.

Only connected links count for the cycle check and next hops. The last paths of each link are
also kept, connected or not (`remembered`, saved in the link session record), so `known`
still accepts a `QMgrName` of a broker behind a link that is down: deliveries to it wait for
the link rather than being refused as unknown.

Announcements come from the network, so their shape is checked (`ValueError`) before any use.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from dataclasses import dataclass

Path = tuple[str, ...]  # broker names, the neighbour first


@dataclass(frozen=True, slots=True)
class Cycle:
    """A cycle a link would close: `brokers` starts at this broker and goes around (through
    the refused link first), not repeating the first at the end. `known` is the broker found
    again, reachable through link `through`; both "" when a path named this broker."""

    brokers: tuple[str, ...]
    known: str = ""
    through: str = ""

    def message(self, link: str) -> str:
        """The log line (and the refusal's Reason String) for refusing `link` over it: either
        link of this broker on the cycle (`seen_from`)."""
        cycle = self.seen_from(link)
        own = cycle.brokers[0]
        loop = " - ".join((*cycle.brokers, own))
        if not cycle.known:
            return (
                f"link {link!r} refused: it would close the cycle {loop} (it announces this "
                f"broker's own name {own!r}: the links form a cycle, or two brokers share a name)"
            )
        return (
            f"link {link!r} refused: it would close the cycle {loop} "
            f"({cycle.known!r} is already reachable through link {cycle.through!r})"
        )

    def seen_from(self, link: str) -> Cycle:
        """The same cycle told from `link`, this broker's other link on it: a tie-break
        (`Topology.drops`) may drop that one rather than the link the cycle was found over
        (`brokers[1]`). Then it goes round the other way, and what is already reachable
        through the link it was found over is the broker found again, or `link` itself
        when that path named this broker."""
        brokers = self.brokers
        if len(brokers) < 3 or link == brokers[1] or link != brokers[-1]:
            return self
        return Cycle((brokers[0], *reversed(brokers[1:])), self.known or link, brokers[1])


def tie_break(cycle: Cycle) -> tuple[str, str]:
    """The link of `cycle` to drop: of its consecutive pairs of brokers, each sorted, the one
    that sorts last. The same for every broker that sees the cycle."""
    brokers = cycle.brokers
    following = (*brokers[1:], brokers[0])
    return max((min(a, b), max(a, b)) for a, b in zip(brokers, following, strict=True))


class Topology:
    """Per link, the paths announced over it; the cycle check, next hops and split-horizon
    announcements of broker `own` (see the module docstring)."""

    def __init__(self, own: str, neighbours: Iterable[str]) -> None:
        self.own = own
        self.neighbours = frozenset(neighbours)
        if own in self.neighbours:
            raise ValueError(f"broker {own!r} cannot be its own neighbour")
        self._up: dict[str, tuple[Path, ...]] = {}  # connected links: what they announced
        self._remembered: dict[str, tuple[Path, ...]] = {}  # last paths, connected or not
        # Every broker named over a connected link -> {link: the shortest path to it there}.
        self._routes: dict[str, dict[str, Path]] = {}

    # -- what the neighbours are told

    def announcement(self, to: str) -> list[list[str]]:
        """What to announce to neighbour `to`: this broker, then this broker before the best
        path to every broker known through the other connected links (split horizon), none
        naming `to` (it would refuse them)."""
        best: list[Path] = []
        for name, via in self._routes.items():
            paths = [path for link, path in via.items() if link != to and to not in path]
            if paths and name != to:
                best.append(min(paths, key=_rank))
        return [[self.own], *([self.own, *path] for path in sorted(best, key=_rank))]

    # -- what they tell

    def check(self, link: str, paths: object) -> Cycle | None:
        """The cycle that accepting `paths` (a JSON-like list of paths, each a list of names
        starting with `link`) over `link` would close, or None. `ValueError` when malformed."""
        return self._cycle(link, self._parse(link, paths))

    def connect(self, link: str, paths: object) -> Cycle | None:
        """Link `link` comes up announcing `paths`: recorded, or refused (nothing recorded)
        when it would close a cycle, returned. A link already up is replaced."""
        parsed = self._parse(link, paths)
        self.disconnect(link)
        cycle = self._cycle(link, parsed)
        if cycle is None:
            self._record(link, parsed)
        return cycle

    def update(self, link: str, paths: object) -> Cycle | None:
        """A reach update over connected link `link`. Recorded even when it closes a cycle
        (returned): only the ends of the `tie_break` link act on it (`drops`), and the others
        must pass the news on for them to see it. Paths naming this broker are left out."""
        if link not in self._up:
            raise ValueError(f"reach update over link {link!r}, which is not connected")
        parsed = self._parse(link, paths)
        cycle = self._cycle(link, parsed)
        self._record(link, tuple(path for path in parsed if self.own not in path))
        return cycle

    def disconnect(self, link: str) -> None:
        """Link `link` is down: its paths no longer count (but stay `remembered`)."""
        if self._up.pop(link, None) is not None:
            self._rebuild()

    def remember(self, link: str, paths: object) -> None:
        """The last paths of down link `link`, from its session record after a restart."""
        if link in self._up:
            raise ValueError(f"link {link!r} is connected: its paths come from the neighbour")
        self._remembered[link] = self._parse(link, paths)

    def drops(self, cycle: Cycle) -> str | None:
        """The neighbour this broker must drop to break `cycle`, if it is an end of the
        `tie_break` link."""
        first, second = tie_break(cycle)
        if first == self.own:
            return second
        if second == self.own:
            return first
        return None

    # -- questions

    def connected(self, link: str) -> bool:
        return link in self._up

    def next_hop(self, broker: str) -> str | None:
        """The connected link through which `broker` is reachable (the shortest way, then the
        first link by name); None for this broker and for brokers behind no connected link."""
        via = self._routes.get(broker)
        if not via:
            return None
        return min(via, key=lambda link: (len(via[link]), link))

    def reachable(self, link: str) -> list[str]:
        """The brokers reachable through `link`, the neighbour first ([] when it is down)."""
        return list(dict.fromkeys(name for path in self._up.get(link, ()) for name in path))

    def remembered(self, link: str) -> list[list[str]]:
        """The last paths recorded for `link`, connected or not (for its session record)."""
        return [list(path) for path in self._remembered.get(link, ())]

    def known(self, broker: str) -> bool:
        """May a `QMgrName` name `broker`: this broker, a neighbour, or a broker on any path
        recorded, even over a link that is down now."""
        if broker == self.own or broker in self.neighbours or broker in self._routes:
            return True
        return any(broker in path for paths in self._remembered.values() for path in paths)

    # -- inside

    def _record(self, link: str, parsed: tuple[Path, ...]) -> None:
        self._up[link] = parsed
        self._remembered[link] = parsed
        self._rebuild()

    def _rebuild(self) -> None:
        routes: dict[str, dict[str, Path]] = {}
        for link, paths in self._up.items():
            for path in paths:
                for index, name in enumerate(path):
                    via = routes.setdefault(name, {})
                    if link not in via or index + 1 < len(via[link]):
                        via[link] = path[: index + 1]
        self._routes = routes

    def _cycle(self, link: str, parsed: tuple[Path, ...]) -> Cycle | None:
        """The first broker of `parsed` (path by path, nearest first) that is this one or is
        reachable through another link closes the cycle. The brokers before it are reachable
        through no other link, so the two halves share none: the cycle is simple."""
        for path in parsed:
            for index, name in enumerate(path):
                if name == self.own:
                    return Cycle((self.own, *path[:index]))
                others = [
                    (_rank(back), through, back)
                    for through, back in self._routes.get(name, {}).items()
                    if through != link
                ]
                if others:
                    _, through, back = min(others)
                    cycle = (self.own, *path[: index + 1], *reversed(back[:-1]))
                    return Cycle(cycle, name, through)
        return None

    def _parse(self, link: str, paths: object) -> tuple[Path, ...]:
        """`paths` checked and made tuples: a non-empty list of non-empty lists of non-empty
        names, the first exactly [link], every one starting with `link`, none naming a broker
        twice, no two ending at the same broker (the neighbour's own table has no cycle)."""
        if link not in self.neighbours:
            raise ValueError(f"{link!r} is not a link of broker {self.own!r}")
        where = f"reach over link {link!r}"
        if not isinstance(paths, list | tuple) or not paths:
            raise ValueError(f"{where}: expected a non-empty list of paths, got {_short(paths)}")
        parsed: list[Path] = []
        ends: dict[str, int] = {}
        for index, path in enumerate(paths):
            if not isinstance(path, list | tuple) or not path:
                raise ValueError(f"{where}: paths[{index}] is not a non-empty list: {_short(path)}")
            for name in path:
                if not isinstance(name, str) or not name:
                    raise ValueError(f"{where}: paths[{index}] holds {_short(name)}, not a name")
            if path[0] != link:
                raise ValueError(f"{where}: paths[{index}] {_short(path)} does not start there")
            if len(set(path)) != len(path):
                raise ValueError(f"{where}: paths[{index}] {_short(path)} names a broker twice")
            end = path[-1]
            if end in ends:
                raise ValueError(f"{where}: paths[{ends[end]}] and [{index}] both lead to {end!r}")
            ends[end] = index
            parsed.append(tuple(path))
        if parsed[0] != (link,):
            raise ValueError(f"{where}: paths[0] must be [{link!r}], the neighbour's own name")
        return tuple(parsed)


def _rank(path: Path) -> tuple[int, Path]:
    return len(path), path


def _short(value: object) -> str:
    return reprlib.repr(value)
