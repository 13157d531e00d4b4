"""Delivery: queues, the in-flight window and subscribers' acknowledgements.

Theory of operation
-------------------
A routed copy of a message is a `Delivery` owed to one session. QoS 0 copies go out at once
to a connected client that is reading, and are dropped otherwise (as Mosquitto does). QoS
1/2 copies join the session's queue, and `pump` moves them into the in-flight window
(`protocol.Flows`) while the client is connected, writable and the window has room. A
delivery to a persistent session is durable: its message is stored once (`Message.store_id`,
reference-counted by `Message.refs`) with one row per delivery, whose state follows the
exchange (queued, in flight under a packet id, released after PUBREC) and which the final
acknowledgement deletes, with the message when no delivery needs it any more.

A durable QoS 2 delivery is written only once its packet id is committed: after a crash it
must come back under that id with DUP=1, or the subscriber could take it for a new message
[MQTT-4.3.3]. The same reasoning makes the PUBREL of a durable delivery wait for the commit
of its "released" state.

`Deliveries` owns the ids of stored messages and deliveries; everything else it touches
belongs to the session it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...protocol import (
    Connection,
    DeliveryAcknowledged,
    DeliveryReceived,
    PacketIdsExhausted,
    PacketType,
)
from ...protocol.flows import Flows, InflightState
from ...protocol.properties import (
    CORRELATION_DATA,
    message_expiry_property,
    without_correlation_data,
)
from ...store import DeliveryRecord, DeliveryState
from .committer import Committer
from .message import Delivery, Message
from .session import NONE_HELD, Session

if TYPE_CHECKING:
    from .session import Client
    from .stats import BrokerStats

log = logging.getLogger("telemq.broker")


class Deliveries:
    """Outbound QoS state of every session (see module docstring)."""

    __slots__ = (
        "_committer",
        "_loop",
        "_max_queued",
        "_max_queued_bytes",
        "_stats",
        "link_limits",
        "next_delivery_id",
        "next_message_id",
    )

    def __init__(
        self,
        committer: Committer,
        loop: asyncio.AbstractEventLoop,
        stats: BrokerStats,
        max_queued: int,
        max_queued_bytes: int = 0,
    ) -> None:
        self._committer = committer
        self._loop = loop
        self._stats = stats
        self._max_queued = max_queued  # per session; 0 = unlimited
        self._max_queued_bytes = max_queued_bytes  # topic + payload per session; 0 = unlimited
        self.next_message_id = 1
        self.next_delivery_id = 1
        # Link sessions (links.py) -> their own (max queued, max queued bytes), 0: unlimited:
        # what waits for a neighbour broker is not one client's backlog.
        self.link_limits: dict[str, tuple[int, int]] = {}

    def set_link_limits(self, client_id: str, max_queued: int, max_queued_bytes: int) -> None:
        """A link session's own queue bounds (0: unlimited), in place of a client's."""
        self.link_limits[client_id] = (max_queued, max_queued_bytes)

    @property
    def max_queued(self) -> int:
        """Deliveries a session's queue holds beyond its in-flight window (0: no limit)."""
        return self._max_queued

    def send_qos0(self, client: Client, message: Message, retain: bool, extra: bytes = b"") -> bool:
        """Send a QoS 0 copy; False when it is dropped (the client is not reading, or, at
        MQTT 5.0, the message has expired or is too large for the client). `extra`: the
        copy's own 5.0 properties (`Delivery.properties`)."""
        if not client.writable:
            self._stats.messages_dropped += 1
            return False
        connection = client.connection
        if connection is None:
            return False
        if connection.peer5 is None:
            connection.send_frame_qos0(message.frame_qos0(retain))  # a no-op once closed
        else:
            properties = (
                message.properties5(time.time()) if message.expiry_at else message.properties
            )
            if properties is None:  # its Message Expiry Interval has passed
                self._count_dropped(expired=True)
                return False
            if extra and extra[0] == CORRELATION_DATA:  # the copy's own replaces the message's
                properties = without_correlation_data(properties)
            if not connection.send_publish(
                message.topic_bytes, message.payload, retain, extra + properties
            ):
                self._count_dropped(expired=False)
                return False
        self._stats.sent_by_qos[0] += 1
        client.mark_dirty()
        return True

    def _count_dropped(self, expired: bool) -> None:
        stats = self._stats
        stats.messages_dropped += 1
        if expired:
            stats.messages_expired += 1
        else:
            stats.messages_too_large += 1

    def enqueue(
        self,
        session: Session,
        message: Message,
        qos: int,
        retain: bool,
        durable: bool,
        live: bool = True,
        extra: bytes = b"",
        share: str = "",
    ) -> Delivery | None:
        """Queue a QoS 1/2 delivery (in the store when durable); the caller pumps. A live
        one waits behind retained messages being sent to the session (`Session.held`).
        None: the session's queue is full and the delivery was dropped."""
        limit = self._max_queued
        size = message.size
        max_bytes = self._max_queued_bytes
        if session.link:
            limit, max_bytes = self.link_limits.get(session.client_id, (limit, max_bytes))
        if (limit and len(session.queue) + len(session.held) >= limit) or (
            max_bytes and session.queued_bytes + size > max_bytes
        ):
            session.counted().dropped += 1
            self._stats.messages_dropped += 1
            return None
        delivery = Delivery(message, qos, retain, 0, extra)
        delivery.share = share
        if durable:
            pending = self._committer.pending
            if message.store_id == 0:
                message.store_id = self.next_message_id
                self.next_message_id += 1
                pending.put_message(message.to_stored())
            message.refs += 1
            delivery.delivery_id = self.next_delivery_id
            self.next_delivery_id += 1
            pending.put_delivery(
                DeliveryRecord(
                    delivery.delivery_id,
                    session.client_id,
                    message.store_id,
                    qos,
                    DeliveryState.QUEUED,
                    0,
                    retain,
                    _record_data(extra, share),
                )
            )
        if live and session.holding:
            session.hold(delivery)
        else:
            session.enqueue(delivery)
        session.queued_bytes += size
        return delivery

    def hold_qos0(
        self, session: Session, message: Message, retain: bool, extra: bytes = b""
    ) -> bool:
        """A live QoS 0 copy for a session being sent retained messages: held behind them
        (True); False when the session is not holding."""
        if not session.holding:
            return False
        session.hold(Delivery(message, 0, retain, 0, extra))
        return True

    def release_held(self, session: Session) -> None:
        """The retained messages are out: the live deliveries held behind them go on."""
        held = session.held
        if not held:
            return
        session.held = NONE_HELD
        for delivery in held:
            if delivery.qos == 0:
                self.send_qos0_to(session, delivery.message, delivery.retain, delivery.properties)
            else:
                session.enqueue(delivery)
        self.pump(session)

    def hand_off_all(self, hand_offs: list[tuple[Session, Delivery]]) -> None:
        for session, delivery in hand_offs:
            self.hand_off(session, delivery)

    def hand_off(self, session: Session, delivery: Delivery) -> None:
        """A delivery held back until a commit (a QoS 2 release) goes out now."""
        if delivery.qos == 0:
            message, retain, extra = delivery.message, delivery.retain, delivery.properties
            if not self.hold_qos0(session, message, retain, extra):
                self.send_qos0_to(session, message, retain, extra)
            return
        self.pump(session)

    def send_qos0_to(
        self, session: Session, message: Message, retain: bool, extra: bytes = b""
    ) -> None:
        """A QoS 0 copy to whatever takes the session's deliveries now (its client or its
        target); nothing when neither is there, as QoS 0 is never queued."""
        if session.client is not None:
            self.send_qos0(session.client, message, retain, extra)
        elif session.target is not None:
            self.to_target(session, Delivery(message, 0, retain, 0, extra))

    def to_target(self, session: Session, delivery: Delivery) -> bool:
        """Offer one delivery to the session's `DeliveryTarget`; True when it took it. A
        durable delivery it took is finished (deleted with its message's last reference)."""
        target = session.target
        if target is None:
            return False
        try:
            taken = target.take(
                delivery.message, delivery.qos, delivery.retain, delivery.properties
            )
        except Exception:
            log.exception("delivery target of %r failed; the message is dropped", session.client_id)
            taken = True  # never offered again: a failing target must not loop on it
            self._stats.messages_dropped += 1
        if not taken:
            if delivery.qos == 0:
                self._stats.messages_dropped += 1  # QoS 0 is never queued
            return False
        self._stats.sent_by_qos[delivery.qos] += 1
        if delivery.delivery_id:
            self._committer.pending.delete_delivery(delivery.delivery_id)
            self.release_message(delivery)
            self._committer.schedule()
        return True

    def _pump_to_target(self, session: Session) -> None:
        queue = session.queue
        while queue:
            # Out of the queue before the target sees it: a target that publishes (and so
            # pumps this session again) must not be offered the same delivery twice.
            delivery = queue.popleft()
            size = delivery.message.size
            session.queued_bytes -= size
            if not self.to_target(session, delivery):
                queue.appendleft(delivery)
                session.queued_bytes += size
                break

    def pump(self, session: Session) -> None:
        """Send queued deliveries while the client is connected and the window allows."""
        client = session.client
        queue = session.queue
        if client is None:
            if queue and session.target is not None:
                self._pump_to_target(session)
            return
        if not queue or not client.writable:
            return
        connection = client.connection
        if connection is None or connection.closed:
            return
        now = self._loop.time()
        wall = 0.0  # read once, when a message has an expiry
        committer = self._committer
        sent = 0
        sent_by_qos = self._stats.sent_by_qos
        wrote = False
        dropped: list[Delivery] = []
        while queue and session.has_window():
            delivery = queue.popleft()
            message = delivery.message
            session.queued_bytes -= message.size
            properties = message.properties
            if message.expiry_at:
                wall = wall or time.time()
                with_expiry = message.properties5(wall)
                if with_expiry is None:  # expired before its delivery started
                    self._count_dropped(expired=True)
                    dropped.append(delivery)
                    continue
                properties = with_expiry
            extra = delivery.properties
            if extra and extra[0] == CORRELATION_DATA and connection.peer5 is not None:
                properties = without_correlation_data(properties)  # the copy's own wins
            deferred = delivery.qos == 2 and bool(delivery.delivery_id)  # see module docstring
            try:
                packet_id = connection.deliver(
                    message.topic_bytes,
                    message.payload,
                    delivery.qos,
                    delivery.retain,
                    delivery,
                    now,
                    send=not deferred,
                    properties=extra + properties,
                )
            except PacketIdsExhausted:
                queue.appendleft(delivery)
                session.queued_bytes += message.size
                break
            if not packet_id:  # larger than the client's maximum packet size
                self._count_dropped(expired=False)
                dropped.append(delivery)
                continue
            sent += 1
            sent_by_qos[delivery.qos] += 1
            if delivery.delivery_id:
                wrote = True
                committer.pending.put_delivery(
                    DeliveryRecord(
                        delivery.delivery_id,
                        session.client_id,
                        message.store_id,
                        delivery.qos,
                        DeliveryState.INFLIGHT,
                        packet_id,
                        delivery.retain,
                        _record_data(delivery.properties, delivery.share),
                    )
                )
            if deferred:
                committer.after(_send_publish_later(client, connection, packet_id))
        if dropped:
            self._forget(dropped)
        if sent:
            client.mark_dirty()
            if wrote:
                committer.schedule()

    def on_acknowledged(self, client: Client, event: DeliveryAcknowledged) -> None:
        """PUBACK or PUBCOMP from a subscriber: the delivery is done; the window has room."""
        ref = event.ref
        self._stats.messages_acked += 1
        if isinstance(ref, Delivery) and ref.delivery_id:
            self._committer.pending.delete_delivery(ref.delivery_id)
            self.release_message(ref)
            self._committer.schedule()
        session = client.session
        if session is not None and session.queue:
            self.pump(session)

    def on_received(self, client: Client, event: DeliveryReceived) -> None:
        """PUBREC from a subscriber: PUBREL, once a durable delivery's new state is stored."""
        ref = event.ref
        session = client.session
        packet_id = event.packet_id
        if not (isinstance(ref, Delivery) and ref.delivery_id and session is not None):
            client.acknowledge(PacketType.PUBREL, packet_id)
            return
        self._committer.pending.put_delivery(
            DeliveryRecord(
                ref.delivery_id,
                session.client_id,
                ref.message.store_id,
                ref.qos,
                DeliveryState.RELEASED,
                packet_id,
                ref.retain,
                _record_data(ref.properties, ref.share),
            )
        )
        self._committer.after(lambda: client.acknowledge(PacketType.PUBREL, packet_id))

    def release_message(self, delivery: Delivery) -> None:
        """A durable delivery is gone: its stored message goes with the last of them."""
        message = delivery.message
        if not delivery.delivery_id or not message.store_id:
            return
        message.refs -= 1
        if message.refs <= 0:
            self._committer.pending.delete_message(message.store_id)
            message.store_id = 0
            message.refs = 0

    # -- a session's queue, changed here only (`max_queued_bytes` counts QoS 1/2 copies) --

    def restore_queued(self, session: Session, delivery: Delivery) -> None:
        """A queued delivery read back from the store at start."""
        session.enqueue(delivery)
        if delivery.qos:
            session.queued_bytes += delivery.message.size

    def take_out(self, session: Session, delivery: Delivery) -> None:
        """A queued or held delivery leaves its session (moved to another: shares.py)."""
        if delivery in session.queue:
            session.queue.remove(delivery)
        else:
            session.held.remove(delivery)
        if delivery.qos:
            session.queued_bytes -= delivery.message.size

    def keep_queued(self, session: Session, keep: Callable[[Delivery], bool]) -> list[Delivery]:
        """Only the queued and held deliveries `keep` admits stay; the others are
        returned (for `drop`), in queue order."""
        dropped: list[Delivery] = []
        if not (session.queue or session.held):
            return dropped
        kept: deque[Delivery] = deque()
        for delivery in session.queue:
            (kept if keep(delivery) else dropped).append(delivery)
        held: list[Delivery] = []
        for delivery in session.held:
            (held if keep(delivery) else dropped).append(delivery)
        session.queue = kept
        session.held = held
        session.queued_bytes = sum(d.message.size for d in (*kept, *held) if d.qos)
        return dropped

    def rename_in_flight(
        self, session: Session, rename: Callable[[bytes], bytes], keep_retain: bool
    ) -> None:
        """A bridge's restored in-flight copies, given the remote broker's topic names
        (`rename`), and RETAIN only when the bridge passes it on (`keep_retain`)."""
        for inflight in session.outbound.values():
            inflight.topic = rename(inflight.topic)
            inflight.retain = inflight.retain and keep_retain

    def clear_queued(self, session: Session) -> None:
        """A session is discarded: nothing waits in it any more (`forget_session` first
        releases what was durable)."""
        session.queue.clear()
        session.held.clear()
        session.queued_bytes = 0

    def forget(self, delivery: Delivery) -> None:
        """A delivery taken out of its session (moved elsewhere, shares.py): out of the
        store, with its message's reference."""
        self._forget([delivery])

    def drop_too_large(self, refs: list[object]) -> None:
        """In-flight deliveries an MQTT 5.0 client no longer takes (`Connection.accept`)."""
        dropped = [ref for ref in refs if isinstance(ref, Delivery)]
        for _ in dropped:
            self._count_dropped(expired=False)
        self._forget(dropped)

    def drop(self, dropped: list[Delivery]) -> None:
        """Deliveries taken out of a session (not authorized any more): forgotten for good."""
        self._stats.messages_dropped += len(dropped)
        self._forget(dropped)

    def _forget(self, dropped: list[Delivery]) -> None:
        """Deliveries that will never be made: out of the store, with their messages' last
        references."""
        pending = self._committer.pending
        wrote = False
        for delivery in dropped:
            if delivery.delivery_id:
                pending.delete_delivery(delivery.delivery_id)
                self.release_message(delivery)
                wrote = True
        if wrote:
            self._committer.schedule()

    def forget_session(self, session: Session) -> None:
        """A session is discarded: its durable deliveries' messages lose a reference each
        (their rows go with the session's record)."""
        for delivery in session.queue:
            self.release_message(delivery)
        for delivery in session.held:
            self.release_message(delivery)
        for inflight in session.outbound.values():
            ref = inflight.ref
            if isinstance(ref, Delivery):
                self.release_message(ref)


def in_flight_properties(delivery: Delivery, now: float) -> bytes:
    """The properties a delivery in flight is re-sent with to an MQTT 5.0 client: its own,
    then the message's (without their Correlation Data when the copy has its own) with
    what is left of the expiry interval, at least a second: a delivery that has started is
    completed, and must not look as if it never expires [MQTT-3.3.2-6]."""
    message = delivery.message
    properties = message.properties5(now) if message.expiry_at else message.properties
    if properties is None:
        properties = message_expiry_property(1) + message.properties
    extra = delivery.properties
    if extra and extra[0] == CORRELATION_DATA:
        properties = without_correlation_data(properties)
    return extra + properties


def refresh_in_flight(flows: Flows, now: float) -> None:
    """A session resumes: its in-flight messages with an expiry are re-sent with what is
    left of it, not with what was left at their first sending."""
    for inflight in flows.outbound.values():
        ref = inflight.ref
        if (
            isinstance(ref, Delivery)
            and ref.message.expiry_at
            and inflight.state is InflightState.PUBLISHED
        ):
            inflight.properties = in_flight_properties(ref, now)


_NO_DATA: dict[str, object] = {}  # shared by every record without data: never changed


def _record_data(extra: bytes, share: str) -> dict[str, object]:
    """A delivery record's data: its own 5.0 properties (subscription identifiers) and its
    shared subscription group, if any."""
    if not extra and not share:
        return _NO_DATA
    data: dict[str, object] = {}
    if extra:
        data["properties"] = extra.hex()
    if share:
        data["share"] = share
    return data


def restore_delivery(delivery: Delivery, data: dict[str, object]) -> None:
    """What `_record_data` kept, back on a restored delivery (unreadable parts ignored)."""
    value = data.get("properties")
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            delivery.properties = bytes.fromhex(value)
    share = data.get("share")
    if isinstance(share, str):
        delivery.share = share


def _send_publish_later(
    client: Client, connection: Connection, packet_id: int
) -> Callable[[], None]:
    def send() -> None:
        if connection.closed or client.connection is not connection:
            return  # re-sent with DUP=1 when the session reconnects
        frame = connection.publish_bytes(packet_id)
        if frame is not None:
            connection.send_bytes(frame)
            client.mark_dirty()

    return send
