"""Messages, deliveries and sessions: the broker's in-memory state.

A `Message` is one accepted publication, shared by every delivery of it; it
caches its encoded QoS 0 frames so that fan-out to many subscribers encodes
once. A `Delivery` is one copy of a message owed to one session at one QoS. A
`Session` outlives connections when it is persistent (clean session = 0): it
keeps the subscriptions, the QoS flows (`protocol.Flows`) and the queue of
deliveries waiting for a connection or for room in the in-flight window.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Protocol

from ...protocol import Flows, encode_publish
from ...protocol.peer5 import NO_EXPIRY
from ...protocol.properties import Properties, message_expiry_property, message_properties
from ...store import StoredMessage

if TYPE_CHECKING:
    from .client_protocol import Client


class Message:
    """An accepted publication (see module docstring)."""

    __slots__ = (
        "_frames",
        "client_id",
        "expiry_at",
        "local_only",
        "net",
        "origin",
        "payload",
        "properties",
        "qos",
        "refs",
        "retain",
        "size",
        "store_id",
        "sub_point",
        "sync",
        "topic",
        "topic_bytes",
        "ts_us",
        "user_id",
    )

    def __init__(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        sub_point: str,
        client_id: str,
        user_id: str,
        ts_us: int,
        topic_bytes: bytes | None = None,
        frame_qos0: bytes | None = None,
    ) -> None:
        """`frame_qos0`: the message's QoS 0 PUBLISH without RETAIN, when already encoded."""
        self.topic = topic
        self.topic_bytes = topic_bytes if topic_bytes is not None else topic.encode("utf-8")
        self.payload = payload
        self.size = len(self.topic_bytes) + len(payload)  # what it counts against quotas
        self.qos = qos
        self.retain = retain
        self.sub_point = sub_point
        self.client_id = client_id
        self.user_id = user_id
        self.ts_us = ts_us
        self.store_id = 0  # id in the store's messages table; 0 = not stored there
        self.refs = 0  # durable deliveries that reference store_id
        # UTC seconds after which the message is gone: a retained copy (MQ Expiry, MQTT 5.0's
        # Message Expiry Interval), and a queued one not yet sent (5.0); 0 = never.
        self.expiry_at = 0.0
        # MQTT 5.0 properties forwarded to subscribers (`protocol.message_properties`): b""
        # for none, and for every message published at 3.1/3.1.1.
        self.properties = b""
        # A publication that came over a link: the telemq-* user properties its copies
        # to further links start with (the path so far and this broker; links.py). b"":
        # made here.
        self.net = b""
        # The broker it was made at, when not this one (a link's copy: the first of its
        # path). Journaled, and `Properties.Broker` to filters (docs/network.md §6).
        self.origin = ""
        self.local_only = False  # MQ PubOpt Local: not for the other brokers
        # A retained copy answering a new proxy subscription (retained_sync.py): delivered
        # with RETAIN set, not journaled again.
        self.sync = False
        self._frames: list[bytes | None] = [frame_qos0, None]

    def frame_qos0(self, retain: bool) -> bytes:
        """The QoS 0 PUBLISH of this message, encoded once per RETAIN flag."""
        index = 1 if retain else 0
        frame = self._frames[index]
        if frame is None:
            frame = self._frames[index] = encode_publish(
                self.topic_bytes, self.payload, 0, retain, False, 0
            )
        return frame

    def take_properties(self, props: Properties) -> None:
        """An MQTT 5.0 PUBLISH's (or will's) properties: what is forwarded, and when the
        message expires (counted from its receipt)."""
        self.properties = message_properties(props)
        if props.message_expiry_interval is not None:
            self.expiry_at = self.ts_us / 1e6 + props.message_expiry_interval

    def properties5(self, now: float) -> bytes | None:
        """The properties of a PUBLISH of this message to an MQTT 5.0 client, with what is
        left of its expiry interval; None when it has expired."""
        expiry_at = self.expiry_at
        if not expiry_at:
            return self.properties
        remaining = math.ceil(expiry_at - now)
        if remaining <= 0:
            return None
        return message_expiry_property(remaining) + self.properties

    def to_stored(self) -> StoredMessage:
        return StoredMessage(
            id=self.store_id,
            topic=self.topic,
            payload=self.payload,
            qos=self.qos,
            retain=self.retain,
            sub_point=self.sub_point,
            client_id=self.client_id,
            user_id=self.user_id,
            ts_us=self.ts_us,
            properties=self.properties,
            expiry_at=self.expiry_at,
        )

    @classmethod
    def from_stored(cls, stored: StoredMessage) -> Message:
        message = cls(
            stored.topic,
            stored.payload,
            stored.qos,
            stored.retain,
            stored.sub_point,
            stored.client_id,
            stored.user_id,
            stored.ts_us,
        )
        message.store_id = stored.id
        message.properties = stored.properties
        message.expiry_at = stored.expiry_at
        return message


class Delivery:
    """One copy of a message owed to a session; `delivery_id` 0 = memory only.
    `properties`: what this copy adds to the message's MQTT 5.0 properties (the matching
    subscriptions' identifiers, an MQ CorrelId as Correlation Data: `subscriptions.options5`),
    encoded; b"" for none. `share`: the shared subscription
    group it came through ("" for none)."""

    __slots__ = ("delivery_id", "message", "properties", "qos", "retain", "share")

    def __init__(
        self,
        message: Message,
        qos: int,
        retain: bool,
        delivery_id: int = 0,
        properties: bytes = b"",
    ) -> None:
        self.message = message
        self.qos = qos
        self.retain = retain
        self.delivery_id = delivery_id
        self.properties = properties
        self.share = ""  # the shared subscription group it was given through (shares.py)


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


class Session:
    """State of one client id (see module docstring). Deliveries go to `client` while one is
    connected, or to `target` (a session with a target has no client).

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
        "flows",
        "forwarded",
        "held",
        "holding",
        "link",
        "persistent",
        "queue",
        "queued_bytes",
        "sub_point",
        "subscriptions",
        "target",
        "user_id",
    )

    def __init__(
        self, client_id: str, persistent: bool, max_inflight: int, sub_point: str = ""
    ) -> None:
        self.client_id = client_id
        self.persistent = persistent
        self.expiry_interval = NO_EXPIRY if persistent else 0
        self.expires_at = 0.0
        self.created_us = 0  # UTC microseconds, kept in the store record
        self.sub_point = sub_point
        self.user_id = ""
        self.subscriptions: dict[str, int] = {}  # topic filter -> granted QoS
        self.flows = Flows(max_inflight)
        self.queue: deque[Delivery] = deque()
        self.queued_bytes = 0  # topic and payload bytes queued (limits.max_queued_bytes)
        # Live deliveries held while retained ones are sent in slices (subscribe.py).
        self.holding = 0  # retained sets still being sent
        self.held: list[Delivery] = []
        self.client: Client | None = None
        self.target: DeliveryTarget | None = None
        self.dropped = 0  # deliveries refused by its full queue
        self.forwarded = 0  # a link's: copies routed to the neighbour (`$SYS` messages/sent)
        self.link = False  # the session of a link to a neighbour broker (links.py)
        self.bridge = False  # the session of a bridge to another MQTT broker (bridges.py)

    @property
    def backlog(self) -> int:
        """Deliveries not yet done: queued, and sent but not acknowledged."""
        return len(self.queue) + len(self.flows.outbound)
