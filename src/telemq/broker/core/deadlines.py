"""One event-loop timer for the deadlines of every connection: a wheel of ticks.

Theory of operation
-------------------
A connection has one deadline at a time that matters (`Connection.next_timer`: the CONNECT
timeout, keep-alive expiry at 1.5 x the keep-alive, an MQTT 3.1 re-send). An event-loop
timer for each (a TimerHandle, its bound callback, the loop's own timer under it) costs about
600 bytes per idle connection. Instead, a broker's `Deadlines` files each connection under
the first tick (a multiple of `TICK` seconds) after its deadline, and keeps one loop timer
at the earliest tick in use. When a tick comes, each connection filed under it is called
back (`Timed.deadline_reached`); one whose deadline moved later meanwhile (each packet
received moves its keep-alive) is filed again under its new tick by that callback. So an
idle connection costs one entry in one bucket and one call per deadline, a busy one nothing
per packet beyond comparing its deadline with its tick, and a deadline is acted on at most
`TICK` late. A connection that ends, or whose deadline moves earlier, leaves its bucket
(`remove`). A bucket is a list, and each connection knows its place in it
(`Timed.deadline_slot`): leaving moves the last one into the hole, so filing and removing
are O(1) at 8 bytes of list and 8 of slot, where a dict entry took about 40.
"""

from __future__ import annotations

import asyncio
import heapq
from typing import Final, Protocol

# Seconds per tick: how late a deadline may be acted on (keep-alives are whole seconds).
TICK: Final = 0.1
# A timer may fire this much before its time (the loop's clock resolution).
EARLY: Final = 0.001


class Cancellable(Protocol):
    """The loop's timer handle. uvloop's is not an `asyncio.TimerHandle`, and the compiled
    build checks declared classes when it stores one: a protocol it does not check."""

    def cancel(self) -> None: ...


class Timed(Protocol):
    """What is filed: a connection's client, called back at its tick. `deadline_slot` is
    its index in its bucket's list, kept by `Deadlines` alone."""

    deadline_slot: int

    def deadline_reached(self, bucket: Bucket) -> None: ...


class Bucket:
    """The connections filed under one tick. A connection keeps a reference to its bucket
    (shared with the others there), not the tick: no number of its own to keep."""

    __slots__ = ("filed", "tick")

    def __init__(self, tick: int) -> None:
        self.tick = tick
        self.filed: list[Timed] = []  # in filing order until one leaves (`remove`)


class Deadlines:
    """The deadlines of one broker's connections (see the module docstring)."""

    __slots__ = ("_buckets", "_fired", "_loop", "_ticks", "_timer", "_timer_tick")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._buckets: dict[int, Bucket] = {}  # by tick
        self._ticks: list[int] = []  # heap of the ticks in `_buckets`
        self._timer: Cancellable | None = None
        self._timer_tick = 0
        self._fired = 0  # the last tick handled: nothing is filed at or before it

    @staticmethod
    def tick_of(due: float) -> int:
        """The tick a deadline at `due` (loop time) is acted on."""
        return int(due / TICK) + 1

    def file(self, timed: Timed, due: float) -> Bucket:
        """File `timed` to be called back at the tick of `due`; returns its bucket."""
        tick = int(due / TICK) + 1
        if tick <= self._fired:
            tick = self._fired + 1
        buckets = self._buckets
        bucket = buckets.get(tick)
        if bucket is None:
            bucket = buckets[tick] = Bucket(tick)
            heapq.heappush(self._ticks, tick)
            if self._timer is None or tick < self._timer_tick:
                self._arm(tick)
        filed = bucket.filed
        timed.deadline_slot = len(filed)
        filed.append(timed)
        return bucket

    @staticmethod
    def remove(timed: Timed, bucket: Bucket) -> None:
        """`timed`, filed in `bucket`, is not to be called back (an emptied bucket stays
        until its tick). Nothing happens if it is not there (its tick is being handled)."""
        filed = bucket.filed
        slot = timed.deadline_slot
        if slot >= len(filed) or filed[slot] is not timed:
            return
        last = filed.pop()
        if last is not timed:
            filed[slot] = last
            last.deadline_slot = slot

    @property
    def filed(self) -> int:
        """How many connections wait for a tick."""
        return sum(len(bucket.filed) for bucket in self._buckets.values())

    def close(self) -> None:
        """Stop the timer (the broker stops); what is filed is dropped."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._buckets.clear()
        self._ticks.clear()

    def _arm(self, tick: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_tick = tick
        self._timer = self._loop.call_at(tick * TICK, self._fire)

    def _fire(self) -> None:
        self._timer = None
        current = int((self._loop.time() + EARLY) / TICK)
        ticks = self._ticks
        buckets = self._buckets
        while ticks and ticks[0] <= current:
            tick = heapq.heappop(ticks)
            self._fired = tick
            bucket = buckets.pop(tick)
            filed = bucket.filed
            bucket.filed = []  # what files or removes itself now touches another list
            for timed in filed:
                timed.deadline_reached(bucket)
        if ticks and (not self._armed() or ticks[0] < self._timer_tick):
            self._arm(ticks[0])

    def _armed(self) -> bool:
        """Whether a timer waits (asked in a method of its own: in `_fire`, which set the
        timer to None, the type checker would take it for None still, and so would the
        compiled build, though a callback may have armed one since)."""
        return self._timer is not None
