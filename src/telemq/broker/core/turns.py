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

A small read of QoS 2 packets is answered in two halves while commits are cheap
(`Committer.answer_early`, `worth_answering_early`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

from ...protocol import Event, MessageReceived, MessageReleased
from .committer import Committer, WriteShare

C = TypeVar("C")  # the client a read came from (session.py's `Client`)

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


def handle_read(
    committer: Committer,
    handlers: dict[type, Callable[[C, Any], None]],
    client: C,
    events: list[Event],
) -> None:
    """A read's `events`, each to its handler in order; a small read of QoS 2 packets in
    two halves while commits are cheap, the first answered before the second is handled
    (`Committer.answer_early`, `worth_answering_early`)."""
    half = committer.early_answer_point(len(events))
    if half and worth_answering_early(events[0]):
        for event in events[:half]:
            handlers[type(event)](client, event)
        committer.answer_early()
        events = events[half:]
    for event in events:
        handlers[type(event)](client, event)


def worth_answering_early(first: Event) -> bool:
    """Whether a read that begins with `first` is worth answering in two halves: one of
    QoS 2 PUBLISHes or PUBRELs. The client answers the first half's PUBRECs (PUBCOMPs) with
    the packets that carry those messages on while the broker handles the second half. A
    read of QoS 1 PUBLISHes is not: early PUBACKs only bring the next PUBLISHes sooner, for
    one commit more a read (17% more CPU a message at the same rate, q1_w10)."""
    if isinstance(first, MessageReleased):
        return True
    return isinstance(first, MessageReceived) and first.publish.qos == 2
