"""Restart: the broker's memory rebuilt from what the store loaded.

Theory of operation
-------------------
The store is the durable mirror of the broker's state, so a restart replays it into the
rooms in dependency order: persistent sessions, then their subscriptions (a damaged record
is set aside and counted; so is one whose topic filter is beyond the topic limits, or whose
content filter is beyond `max_filter_size`, quarantined:
left in the store, not loaded, so lowering a limit never costs the memory it protects and
raising it again brings the subscription back), retained messages (quarantined likewise,
and beyond the retained quotas),
deliveries (queued, or in flight under their packet id and state, re-sent with DUP=1 on
reconnection), QoS 2 messages held for a PUBREL, and the ids of QoS 2 messages already
released (`Flows.released`).

One case needs action rather than replay: a QoS 2 message acknowledged with PUBREC to a
*clean* session that died with the broker. Its publisher will not send PUBREL (its session is
gone too), so the message is released now rather than lost, exactly as a PUBREL would have
released it: retained, journaled, routed, or run when it is an MQ command.
"""

from __future__ import annotations

import logging
import time

from ...commands import COMMAND_TOPICS, Requester
from ...protocol import TopicLimits
from ...protocol.flows import InflightState, release_digest
from ...protocol.peer5 import NO_EXPIRY
from ...store import DeliveryState, IncomingRecord, StoreState
from ...subscriptions import Registry, Subscription
from ..settings.config import LimitsConfig
from .committer import Committer
from .delivery import Deliveries, in_flight_properties, restore_delivery
from .message import Delivery, Message
from .releases import remember_release
from .retained import RetainedMessages
from .router import Router
from .session import Session
from .sessions import Sessions

log = logging.getLogger("telemq.broker")


def restore_state(
    state: StoreState,
    now: float,
    limits: LimitsConfig,
    sessions: Sessions,
    registry: Registry,
    retained: RetainedMessages,
    deliveries: Deliveries,
    router: Router,
    committer: Committer,
    topic_limits: TopicLimits,
) -> int:
    """Replay `state` into the rooms (see module docstring); returns how many records
    were set aside: damaged, or beyond the topic limits."""
    quarantined = state.quarantined
    router.next_seq = state.next_seq
    deliveries.next_message_id = state.next_message_id
    deliveries.next_delivery_id = state.next_delivery_id
    by_id = sessions.by_id
    wall_now = time.time()
    for session_record in state.sessions:
        restored = Session(
            session_record.client_id,
            True,
            limits.max_inflight,
            str(session_record.data.get("sub_point", "")),
        )
        data = session_record.data
        restored.user_id = str(data.get("user_id", ""))
        restored.created_us = int(_number(data.get("created_us"), 0))
        restored.expiry_interval = int(_number(data.get("expiry_interval"), NO_EXPIRY))
        if restored.expiry_interval != NO_EXPIRY:
            # Still connected when the broker stopped: its connection ended then, so now.
            restored.expires_at = _number(
                data.get("expires_at"), wall_now + restored.expiry_interval
            )
        sessions.restore(restored)
    for sub in state.subscriptions:
        try:
            subscription = Subscription.from_data(sub.data)
        except (KeyError, ValueError, TypeError) as error:
            log.error("skipping a damaged subscription record of %r: %s", sub.client_id, error)
            quarantined += 1
            continue
        if subscription.queue not in by_id or registry.get(subscription.key):
            continue
        too_large = topic_limits.size_error(subscription.topic)
        compiled = subscription.compiled
        max_size = limits.max_filter_size
        if too_large is None and compiled is not None and max_size and compiled.size > max_size:
            too_large = f"filter of size {compiled.size} (limit {max_size})"
        if too_large is not None:
            log.warning(
                "subscription of %r to %.100r quarantined (not loaded, kept in the store): %s",
                subscription.queue,
                subscription.topic,
                too_large,
            )
            quarantined += 1
            continue
        registry.add(subscription)
    for record in state.retained:
        too_large = topic_limits.size_error(record.topic)
        if too_large is not None:
            log.warning(
                "retained message on %.100r quarantined (not loaded, kept in the store): %s",
                record.topic,
                too_large,
            )
            quarantined += 1
            continue
        kept = Message(
            record.topic,
            record.payload,
            record.qos,
            True,
            record.sub_point,
            str(record.data.get("client_id", "")),
            str(record.data.get("user_id", "")),
            record.ts_us,
        )
        kept.expiry_at = float(record.data.get("expiry_at", 0.0) or 0.0)
        kept.origin = str(record.data.get("origin", ""))
        kept.properties = record.properties
        kept.local_only = record.local_only  # PubOpt Local: never answered to a neighbour
        beyond = retained.restore(kept)
        if beyond is not None:
            log.warning(
                "retained message on %.100r quarantined (not loaded, kept in the store): beyond %s",
                record.topic,
                beyond,
            )
            quarantined += 1
    _restore_deliveries(state, now, by_id, deliveries)
    orphans: list[IncomingRecord] = []
    released: list[IncomingRecord] = []
    for incoming in state.incoming:
        if incoming.released:
            released.append(incoming)
            continue
        holder = by_id.get(incoming.client_id)
        held = Message.from_stored(incoming.message)
        held.store_id = 0
        if holder is None:
            orphans.append(incoming)
        else:
            holder.hold_incoming(incoming.packet_id, held)
    _restore_released(released, by_id, committer)
    for incoming in orphans:
        held = Message.from_stored(incoming.message)
        held.store_id = 0
        committer.pending.delete_incoming(incoming.client_id, incoming.packet_id)
        if held.topic in COMMAND_TOPICS:
            requester = Requester(held.client_id, held.user_id, held.sub_point, 2)
            router.commands.run_as(requester, held.topic, held.payload)
        else:
            router.accept(held, hand_off_now=True)
    if orphans:
        committer.schedule()
    log.info(
        "restored %d sessions, %d subscriptions, %d retained messages, %d queued "
        "deliveries; next journal seq %d",
        len(by_id),
        len(state.subscriptions),
        len(state.retained),
        len(state.deliveries),
        router.next_seq,
    )
    if state.quarantined:
        log.error("the store set aside %d damaged records at load", state.quarantined)
    return quarantined


def _restore_deliveries(
    state: StoreState, now: float, by_id: dict[str, Session], deliveries: Deliveries
) -> None:
    messages = {mid: Message.from_stored(stored) for mid, stored in state.messages.items()}
    wall_now = time.time()
    for record in state.deliveries:
        target = by_id.get(record.client_id)
        message = messages.get(record.message_id)
        if target is None or message is None:
            continue
        message.refs += 1
        delivery = Delivery(message, record.qos, record.retain, record.delivery_id)
        if record.data:
            restore_delivery(delivery, record.data)
        if record.state == DeliveryState.QUEUED or record.packet_id == 0:
            deliveries.restore_queued(target, delivery)
        else:
            target.track(
                record.qos,
                message.topic_bytes,
                message.payload,
                record.retain,
                delivery,
                now,
                packet_id=record.packet_id,
                state=(
                    InflightState.RELEASED
                    if record.state == DeliveryState.RELEASED
                    else InflightState.PUBLISHED
                ),
                properties=in_flight_properties(delivery, wall_now),  # as re-sent at 5.0
            )


def _restore_released(
    records: list[IncomingRecord], by_id: dict[str, Session], committer: Committer
) -> None:
    """Released QoS 2 ids, oldest first, back into their sessions' flows (a record of a
    session that is gone is deleted: it must never be released again)."""
    for record in sorted(records, key=lambda r: r.message.ts_us):
        holder = by_id.get(record.client_id)
        if holder is None:
            committer.pending.delete_incoming(record.client_id, record.packet_id)
            committer.schedule()
            continue
        stored = record.message
        digest = release_digest(stored.topic.encode("utf-8"), stored.payload, stored.retain)
        remember_release(committer, holder, record.packet_id, digest, 0)


def _number(value: object, default: float) -> float:
    """A number from a session record, or `default` when absent or not a number."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return default
