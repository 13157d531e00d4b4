"""One client's share of the event loop's turns and of the store's backlog.

Theory of operation
-------------------
A read handles at most the client's `read_budget` of packets; the rest waits in the
connection's decoder, reading pauses, and the next slice runs in a later turn, after the
other clients' callbacks. The budget starts at READ_BUDGET and, for a client whose reads
are held, follows what its slices cost: as many packets as take about READ_SLICE seconds
(cheap QoS 0 publications: hundreds; SUBSCRIBEs checked against the ACL: tens), within
READ_BUDGET_MIN..READ_BUDGET_MAX. A read of READ_TURN_BYTES or more ends the client's turn
too, whatever its packets: more is waiting, and uvloop hands a full buffer's successor over
at once (up to 32 reads of 256,000 bytes in a row), so without it a flood of large
publications would hold the loop for all of them. A client whose writes fill the store's
backlog is paused until the running commit ends (`ClientHub.pause_for_store`).

What a client keeps of this once it was held, paused or charged is its `Throttling`, made
then: an idle connection carries none. The `ReadClock` is the time of the read being
handled, read once per read.
"""

from __future__ import annotations

from typing import Final

from .committer import WriteShare

# Final: constants the compiled build inlines where they are used.
READ_BUDGET: Final = 256
READ_BUDGET_MIN: Final = 16
READ_BUDGET_MAX: Final = 4096
READ_SLICE: Final = 0.002  # seconds
READ_TURN_BYTES: Final = 65536


class ReadClock:
    """UTC microseconds of the read being handled: the packets of one read arrived
    together, so the clock is read once per read (by the hub) and every message of the read
    is stamped with it (by the router)."""

    __slots__ = ("received_us",)

    def __init__(self) -> None:
        self.received_us = 0


class Throttling(WriteShare):
    """One client's share of loop turns and of the store's backlog once it needed one (see
    READ_BUDGET, `ClientHub.pause_for_store`): its writes in the batch behind a running
    commit (the base class, which `Committer.charge` counts), the packets a read handles,
    whether the next slice is scheduled, how often reads were held and the client was
    paused. Made at its first held read, pause or charge: an idle connection carries none."""

    __slots__ = ("read_budget", "reads_held", "slice_scheduled", "store_pauses")

    def __init__(self) -> None:
        super().__init__()
        self.slice_scheduled = False
        self.read_budget = READ_BUDGET
        self.reads_held = 0
        self.store_pauses = 0

    def fit_budget(self, took: float) -> None:
        """A whole slice of `read_budget` packets took `took` seconds: the budget becomes
        what fits READ_SLICE, at most halved or doubled, within its bounds."""
        budget = self.read_budget
        fitted = int(budget * READ_SLICE / took) if took > 0 else budget * 2
        fitted = max(budget // 2, min(budget * 2, fitted))
        self.read_budget = max(READ_BUDGET_MIN, min(READ_BUDGET_MAX, fitted))
