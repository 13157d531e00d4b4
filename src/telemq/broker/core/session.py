"""A session: the state of one client id, `Session`, and where its deliveries go.

A `Session` is the state of one client id. It outlives connections when it is persistent
(clean session = 0): it keeps the subscriptions, the QoS flows (it is a `protocol.Flows`,
the table a connection attaches, so one object per client id instead of two) and the
queue of deliveries waiting for a connection or for room in the in-flight window (changed
by `Deliveries` only). Its deliveries go to its `client` (client.py) while one is
connected, or to a `DeliveryTarget` (an in-process subscriber, the way to a queue on
another broker).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final, Protocol

from ...protocol import Flows
from ...protocol.peer5 import NO_EXPIRY
from .message import Delivery, Message

if TYPE_CHECKING:
    from .client import Client


class DeliveryTarget(Protocol):
    """Something other than a client connection that takes a session's deliveries: an
    in-process subscriber (`embedded.py`), or the way to a queue on another broker
    (`remote_queues.py`).

    `take` returns True when the message is delivered (for QoS 1/2: acknowledged, or handed
    on durably in the same commit), False when the target cannot take it now; it then stays
    queued until the session is pumped again (`Deliveries.pump`). `properties`: the copy's
    own MQTT 5.0 properties (`Delivery.properties`: a CorrelAsId subscription's Correlation
    Data, an envelope). It runs on the event loop and must not block.
    """

    def take(self, message: Message, qos: int, retain: bool, properties: bytes) -> bool: ...


# The queue and the held deliveries of every session that has none: never appended to
# (`Session.enqueue`, `Session.hold` replace them first), only read, emptied, or replaced.
NO_QUEUE: Final[deque[Delivery]] = deque()
NONE_HELD: Final[list[Delivery]] = []


class Session(Flows):
    """State of one client id (see module docstring): its QoS flows (the base class), its
    queue and its delivery. Deliveries go to `client` while one is connected, or to
    `target` (a session with a target has no client).

    A persistent session lasts `expiry_interval` seconds after its connection ends (MQTT
    5.0's Session Expiry Interval; `NO_EXPIRY` for 3.1/3.1.1 and MQ queues): `expires_at`
    is then when, in UTC seconds, and 0 while connected or forever.
    """

    __slots__ = (
        "bridge",
        "client",
        "client_id",
        "created_us",
        "dropped",
        "expires_at",
        "expiry_interval",
        "forwarded",
        "held",
        "holding",
        "link",
        "persistent",
        "queue",
        "queued_bytes",
        "sub_point",
        "target",
        "user_id",
    )

    def __init__(
        self, client_id: str, persistent: bool, max_inflight: int, sub_point: str = ""
    ) -> None:
        super().__init__(max_inflight)
        # The flags together: the compiled build packs neighbouring booleans into one word.
        self.persistent = persistent
        self.link = False  # the session of a link to a neighbour broker (links.py)
        self.bridge = False  # the session of a bridge to another MQTT broker (bridges.py)
        self.client_id = client_id
        self.expiry_interval = NO_EXPIRY if persistent else 0
        self.expires_at = 0.0
        self.created_us = 0  # UTC microseconds, kept in the store record
        self.sub_point = sub_point
        self.user_id = ""
        # Both start as the shared empties (a deque is 624 bytes even empty, and most
        # sessions never queue): `enqueue` and `hold` give a session its own at its first.
        self.queue: deque[Delivery] = NO_QUEUE
        self.queued_bytes = 0  # topic and payload bytes queued (limits.max_queued_bytes)
        # Live deliveries held while retained ones are sent in slices (subscribe.py).
        self.holding = 0  # retained sets still being sent
        self.held: list[Delivery] = NONE_HELD
        self.client: Client | None = None
        self.target: DeliveryTarget | None = None
        self.dropped = 0  # deliveries refused by its full queue
        self.forwarded = 0  # a link's: copies routed to the neighbour (`$SYS` messages/sent)

    def enqueue(self, delivery: Delivery) -> None:
        """`delivery` at the end of the queue, the session's own made at its first."""
        queue = self.queue
        if queue is NO_QUEUE:
            queue = self.queue = deque()
        queue.append(delivery)

    def hold(self, delivery: Delivery) -> None:
        """`delivery` held behind retained messages being sent (`holding`)."""
        held = self.held
        if held is NONE_HELD:
            held = self.held = []
        held.append(delivery)

    @property
    def backlog(self) -> int:
        """Deliveries not yet done: queued, and sent but not acknowledged."""
        return len(self.queue) + len(self.outbound)
