"""Messages and deliveries: what the broker holds of a publication, and each copy it owes.

A `Message` is one accepted publication, shared by every delivery of it; it caches its
encoded QoS 0 frames so that fan-out to many subscribers encodes once. A `Delivery` is one
copy of a message owed to one session at one QoS. They know nothing of sessions or
connections: every room reads them, the rooms that own a queue hold them. A
`DeliveryTarget` is where a session's deliveries go when no client connection takes them.
"""

from __future__ import annotations

import math
from typing import Protocol

from ...protocol import encode_publish
from ...protocol.properties import message_expiry_property, message_properties
from ...protocol.property_table import Properties
from ...store import IncomingRow, StoredMessage


class Message:
    """An accepted publication (see module docstring)."""

    __slots__ = (
        "_frame",
        "_frame_retained",
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
        # The flags side by side: the compiled build packs neighbouring flags in one word.
        self.retain = retain
        self.local_only = False  # MQ PubOpt Local: not for the other brokers
        # A retained copy answering a new proxy subscription (retained_sync.py): delivered
        # with RETAIN set, not journaled again.
        self.sync = False
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
        # Its QoS 0 PUBLISH frames, without and with RETAIN: two fields, not a list (an
        # object the less per publication, and per retained message kept).
        self._frame = frame_qos0
        self._frame_retained: bytes | None = None

    def frame_qos0(self, retain: bool) -> bytes:
        """The QoS 0 PUBLISH of this message, encoded once per RETAIN flag."""
        frame = self._frame_retained if retain else self._frame
        if frame is None:
            frame = encode_publish(self.topic_bytes, self.payload, 0, retain, False, 0)
            if retain:
                self._frame_retained = frame
            else:
                self._frame = frame
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

    def incoming_row(self, client_id: str, packet_id: int) -> IncomingRow:
        """This message held as `client_id`'s QoS 2 `packet_id`, not yet released, as the
        store's row (`IncomingRow`): what an `IncomingRecord` of `to_stored` holds, made
        without either object, once per QoS 2 publication."""
        properties = self.properties
        expiry = self.expiry_at
        return (
            client_id,
            packet_id,
            self.store_id,
            self.topic,
            bytearray(self.payload),
            self.qos,
            1 if self.retain else 0,
            self.sub_point,
            self.client_id,
            self.user_id,
            self.ts_us,
            bytearray(properties) if properties else 0,
            expiry if expiry else 0,
            0,
        )

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
