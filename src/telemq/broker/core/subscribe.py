"""SUBSCRIBE and UNSUBSCRIBE, and what every subscription change entails.

Theory of operation
-------------------
The registry (`subscriptions.Registry`) is pure data; `SubscriptionManager` is the broker's
side of it. MQTT SUBSCRIBE and UNSUBSCRIBE are handled here; MQ RegSub and DeregSub change the
registry in `commands`, whose host reports each change here (`saved`, `removed`). Either way a
change of a persistent session's subscription goes into the pending batch at once, hooks
hear of it, and a new subscription gets the retained messages it matches (`send_retained`).

The retained messages are taken and queued when the subscription is made, before any later
publication can be routed to it: a live message never overtakes the retained one it
replaced, nor arrives twice [MQTT-4.6.0-5], and a persistent session keeps them if the
client goes before the SUBACK [MQTT-3.3.1-6]. A clean session's SUBACK goes first, as
Mosquitto's does; a persistent session's waits until its subscriptions are durable, and the
retained messages may precede it (MQTT 3.1.1 §3.8.4 allows it).

A large set of retained messages (more than `RETAINED_SLICE`) is sent a slice per turn of
the event loop, so one wildcard subscription over many retained topics never holds the
other clients. Until its last slice, the session's live deliveries are held behind it
(`Session.holding`, `Deliveries.release_held`): the order stays retained first, then live.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol

from ...protocol import (
    NO_LOCAL,
    RETAIN_AS_PUBLISHED,
    RETAIN_HANDLING,
    RETAIN_HANDLING_SHIFT,
    SUBACK_FAILURE,
    SUBSCRIPTION_QOS,
    Connection,
    ProtocolLevel,
    ReasonCode,
    SubAck,
    SubscribeRequested,
    TopicLimits,
    UnsubAck,
    UnsubscribeRequested,
    is_wildcard_filter,
    shared_subscription,
)
from ...protocol.peer5 import ServerLimits5
from ...protocol.topics import SHARE_PREFIX
from ...store import SubscriptionRecord
from ...subscriptions import (
    PERSISTENCE_RANK,
    Identity,
    Registry,
    Subscription,
    delivery_options,
    filter_properties,
)
from ..security.acl import Action
from ..security.hooks import Hooks
from .committer import Committer
from .delivery import Deliveries
from .message import Message
from .retained import RetainedMessages
from .router import durable_rank
from .session import Session

if TYPE_CHECKING:
    from .session import Client
    from .stats import BrokerStats

log = logging.getLogger("telemq.broker")

RETAINED_SLICE = 256  # retained messages sent per turn of the event loop
LINK_TOPICS = "$link/"  # the links' control topics (links.py): no client subscribes there


class SubscriptionListener(Protocol):
    """Hears every subscription change, before the hooks (the links room: proxies)."""

    def subscription_saved(self, subscription: Subscription) -> None: ...

    def subscription_removed(self, subscription: Subscription) -> None: ...


class SubscriptionManager:
    """The broker's side of the subscription registry (see module docstring)."""

    def __init__(
        self,
        qmgr_name: str,
        committer: Committer,
        hooks: Hooks,
        registry: Registry,
        sessions: dict[str, Session],
        deliveries: Deliveries,
        retained: RetainedMessages,
        topic_limits: TopicLimits,
        stats: BrokerStats,
        max_subscriptions: int,
        limits5: ServerLimits5 | None = None,
        shared_available: bool = True,
    ) -> None:
        self._qmgr_name = qmgr_name
        self._limits5 = limits5
        # `$share/...` filters are shared subscriptions (at every protocol level, as in
        # Mosquitto and EMQX) unless the configuration says they are not available.
        self._shared_available = shared_available
        self._topic_limits = topic_limits
        self._stats = stats
        self._max_subscriptions = max_subscriptions  # per session; 0 = unlimited
        self._committer = committer
        self._hooks = hooks
        self._registry = registry
        self._sessions = sessions  # owned by the Sessions room: read only here
        self._deliveries = deliveries
        self._retained = retained
        self.listener: SubscriptionListener | None = None  # links.py, when configured

    def quota_problem(self, queue: str, count: int) -> str | None:
        """None when `queue` may gain `count` subscriptions; else why not, counted in
        `$SYS/broker/subscriptions/refused`."""
        limit = self._max_subscriptions
        if not limit:
            return None
        held = self._registry.count_of_queue(queue)
        if held + count <= limit:
            return None
        self._stats.subscriptions_refused += count
        return (
            f"queue {queue!r} holds {held} subscriptions; {count} more would pass "
            f"limits.max_subscriptions_per_client ({limit})"
        )

    # -- MQTT -----------------------------------------------------------------

    def on_subscribe(self, client: Client, event: SubscribeRequested) -> None:
        session = client.session
        connection = client.connection
        if session is None or connection is None:
            return
        packet = event.packet
        codes: list[int] = []
        registry = self._registry
        hooks = self._hooks
        identity = Identity(self._qmgr_name, session.client_id, "")
        limits = self._topic_limits
        limits5 = self._limits5 if connection.peer5 is not None else None
        props = packet.properties  # 5.0: at most one Subscription Identifier, for all filters
        subscription_id = 0
        if props is not None and props.subscription_identifiers:
            subscription_id = props.subscription_identifiers[0]
        if limits5 is not None and self._shared_available:
            malformed = _malformed_share(packet.topics, limits)
            if malformed:  # before any filter is subscribed: the error changes nothing
                client.close(malformed, ReasonCode.PROTOCOL_ERROR)
                return
        retained_for: list[Subscription] = []  # those that get the retained messages
        for topic_filter, options in packet.topics:
            # 5.0: subscription options, whose bits 0-1 are the QoS; 3.1/3.1.1: the QoS.
            qos = options & SUBSCRIPTION_QOS
            code5 = ReasonCode.TOPIC_FILTER_INVALID
            problem = limits.filter_error(topic_filter)
            if problem is None and limits5 is not None:
                qos = min(qos, limits5.maximum_qos)
                unavailable, why = _unavailable(topic_filter, limits5)
                if why is not None:
                    code5, problem = unavailable, why
            if problem is None and topic_filter.startswith(LINK_TOPICS):
                code5, problem = ReasonCode.NOT_AUTHORIZED, "$link/ topics are the links'"
            share_name, matched = "", topic_filter  # what the ACL and the trie see
            if problem is None and self._shared_available:
                try:
                    shared = shared_subscription(topic_filter)
                except ValueError as error:
                    problem = str(error)
                else:
                    if shared is not None:
                        share_name, matched = shared
                        if options & NO_LOCAL:  # [MQTT-3.8.3-4]
                            client.close(
                                f"No Local on shared subscription {topic_filter!r}",
                                ReasonCode.PROTOCOL_ERROR,
                            )
                            return
            if problem is None and not hooks.may(
                Action.SUBSCRIBE, matched, client.user_id, client.client_id
            ):
                code5, problem = ReasonCode.NOT_AUTHORIZED, "not authorized"
                self._stats.subscribe_denied += 1
            if problem:
                log.info("client %r: refused subscription: %s", session.client_id, problem)
                codes.append(_refusal(connection, qos, code5))
                continue
            if connection.bridge and not share_name:  # a bridge's (0x83/0x84): see Connection
                options |= NO_LOCAL | RETAIN_AS_PUBLISHED
            key = (identity, topic_filter, session.sub_point, "")
            subscription = registry.get(key)
            if subscription is None and self.quota_problem(session.client_id, 1) is not None:
                log.info(
                    "client %r: refused subscription to %.100r: subscription quota (%d)",
                    session.client_id,
                    topic_filter,
                    self._max_subscriptions,
                )
                codes.append(_refusal(connection, qos, ReasonCode.QUOTA_EXCEEDED))
                continue
            # 5.0: Retain Handling 0 sends the retained messages, 1 only to a new
            # subscription, 2 never; at 3.1/3.1.1 the bits are 0.
            handling = (options & RETAIN_HANDLING) >> RETAIN_HANDLING_SHIFT
            # Never for a shared subscription (MQTT 5.0 §4.8.2).
            wants_retained = not share_name and (
                handling == 0 or (handling == 1 and subscription is None)
            )
            if subscription is None:
                subscription = Subscription(
                    id=registry.new_id(),
                    identity=identity,
                    topic=topic_filter,
                    sub_point=session.sub_point,
                    owner=client.user_id,
                    qos=qos,
                    created_at=time.time(),
                    mqtt=True,
                    share_name=share_name,
                )
                _set_options5(subscription, options, subscription_id)
                registry.add(subscription)
            else:
                subscription.qos = qos  # an identical filter replaces [MQTT-3.8.4-3]
                _set_options5(subscription, options, subscription_id)
                registry.changed(subscription)
            if wants_retained:
                retained_for.append(subscription)
            self.saved(subscription)
            codes.append(qos)
        packet_id = packet.packet_id

        def acknowledge() -> None:
            if connection.closed or client.session is not session:
                return
            connection.send(SubAck(packet_id, codes))
            client.mark_dirty()

        # See the module docstring for the order of SUBACK and retained messages.
        if session.persistent:
            for subscription in retained_for:
                self.send_retained(subscription)
            self._committer.after(acknowledge)
        else:
            acknowledge()
            for subscription in retained_for:
                self.send_retained(subscription)

    def on_unsubscribe(self, client: Client, event: UnsubscribeRequested) -> None:
        session = client.session
        connection = client.connection
        if session is None or connection is None:
            return
        identity = Identity(self._qmgr_name, session.client_id, "")
        codes: list[int] = []  # MQTT 5.0 only: one reason code per filter
        for topic_filter in event.packet.topics:
            subscription = self._registry.get((identity, topic_filter, session.sub_point, ""))
            if subscription is not None:
                self.remove(subscription)
                codes.append(ReasonCode.NORMAL_DISCONNECTION)  # 0: success
            else:
                codes.append(ReasonCode.NO_SUBSCRIPTION_EXISTED)
        packet_id = event.packet.packet_id

        def answer() -> None:
            if not connection.closed:
                connection.send(UnsubAck(packet_id, codes))
                client.mark_dirty()

        self._committer.after(answer)

    # -- every subscription change --------------------------------------------

    def saved(self, subscription: Subscription) -> None:
        """A subscription was added or changed in the registry."""
        if self.listener is not None:
            self.listener.subscription_saved(subscription)
        session = self._sessions.get(subscription.queue)
        if session is not None and session.persistent:
            self._committer.pending.put_subscription(
                SubscriptionRecord(subscription.queue, str(subscription.id), subscription.to_data())
            )
            self._committer.schedule()
        if self._hooks.subscribed:
            self._hooks.notify(self._hooks.subscribed, subscription)

    def removed(self, subscription: Subscription) -> None:
        """A subscription was taken out of the registry."""
        if self.listener is not None:
            self.listener.subscription_removed(subscription)
        session = self._sessions.get(subscription.queue)
        if session is not None and session.persistent:
            self._committer.pending.delete_subscription(subscription.queue, str(subscription.id))
            self._committer.schedule()
        if self._hooks.unsubscribed:
            self._hooks.notify(self._hooks.unsubscribed, subscription)

    def remove(self, subscription: Subscription) -> None:
        self._registry.remove(subscription)
        self.removed(subscription)

    def remove_queue(self, queue: str) -> None:
        """Every subscription of a session that ends (its records go with the session's)."""
        removed = self._registry.remove_queue(queue)
        if removed and self.listener is not None:
            for subscription in removed:
                self.listener.subscription_removed(subscription)
        if removed and self._hooks.unsubscribed:
            for subscription in removed:
                self._hooks.notify(self._hooks.unsubscribed, subscription)

    def expire(self, now: float) -> int:
        """Remove the subscriptions whose MQ expiry (UTC seconds) has passed."""
        expired = self._registry.expired(now)
        for subscription in expired:
            self.remove(subscription)
            log.info(
                "subscription %r of queue %r on %r expired",
                subscription.name or subscription.id,
                subscription.queue,
                subscription.topic,
            )
        return len(expired)

    # -- retained messages for a new subscription ----------------------------

    def send_retained(self, subscription: Subscription) -> int:
        """Send the retained messages matching the subscription (its topic and filter) to
        its queue; returns how many (for a large set: how many are on their way, before
        the content filter has seen the later slices)."""
        messages = self._retained.matching(subscription.sub_point, subscription.topic)
        session = self._sessions.get(subscription.queue)
        if not messages or session is None:
            return 0
        job = _RetainedJob(subscription, session, messages)
        if len(messages) <= RETAINED_SLICE:
            self._send_slice(job)
            self._report(job)
            return job.sent
        # A large set goes a slice per turn of the event loop; meanwhile the session's live
        # deliveries wait behind it (`Session.holding`), so none overtakes a retained one.
        session.holding += 1
        self._send_slice(job)
        asyncio.get_running_loop().call_soon(self._continue, job)
        return len(messages)

    def _continue(self, job: _RetainedJob) -> None:
        session = job.session
        if (
            self._sessions.get(session.client_id) is session
            and self._registry.by_id(job.subscription.id) is job.subscription
        ):
            self._send_slice(job)
            self._committer.schedule()
            if job.position < len(job.messages):
                asyncio.get_running_loop().call_soon(self._continue, job)
                return
            self._report(job)
        # Done, or the session or the subscription is gone: what waited behind goes on.
        session.holding -= 1
        if not session.holding:
            self._deliveries.release_held(session)

    def _send_slice(self, job: _RetainedJob) -> None:
        """The next `RETAINED_SLICE` messages of `job` to its session."""
        subscription = job.subscription
        session = job.session
        deliveries = self._deliveries
        # MQTT always marks retained copies; MQ only for InformIfRet (IsRetainedPub).
        mark = subscription.mqtt or "InformIfRet" in subscription.options
        rank = PERSISTENCE_RANK[subscription.persistence]
        limit = deliveries.max_queued
        # MQTT 5.0: the subscription's identifier (and MQ's CorrelId) go with each copy.
        extra = delivery_options([subscription]).properties if subscription.has_options5 else b""
        end = job.position + RETAINED_SLICE
        for message in job.messages[job.position : end]:
            if subscription.compiled is not None and not subscription.admits(
                message.payload,
                {
                    "Topic": message.topic,
                    "QoS": message.qos,
                    "Retain": True,
                    "ClientId": message.client_id,
                    "UserId": message.user_id,
                    "SubPoint": message.sub_point,
                    "Broker": message.origin or self._qmgr_name,
                    **filter_properties(message.properties),
                },
            ):
                continue
            qos = min(message.qos, subscription.qos)
            durable = session.persistent and durable_rank(rank, qos)
            if durable and qos == 0:
                qos = 1
            job.sent += 1
            if qos == 0:
                deliveries.send_qos0_to(session, message, mark, extra)
                continue
            if limit and len(session.queue) >= limit:
                deliveries.pump(session)  # into the in-flight window first, if there is room
            if deliveries.enqueue(session, message, qos, mark, durable, False, extra) is None:
                job.dropped += 1
        job.position = min(end, len(job.messages))
        if session.queue:
            deliveries.pump(session)

    def _report(self, job: _RetainedJob) -> None:
        if job.dropped:
            # Counted in $SYS/broker/messages/dropped by `enqueue`; said here as well.
            log.warning(
                "queue %r: %d of %d retained messages matching %r dropped: the queue is full "
                "(limits.max_queued_messages = %d)",
                job.session.client_id,
                job.dropped,
                len(job.messages),
                job.subscription.topic,
                self._deliveries.max_queued,
            )


class _RetainedJob:
    """The retained messages one new subscription is being sent, and how far it got."""

    __slots__ = ("dropped", "messages", "position", "sent", "session", "subscription")

    def __init__(self, subscription: Subscription, session: Session, messages: list[Message]):
        self.subscription = subscription
        self.session = session
        self.messages = messages
        self.position = 0
        self.sent = 0
        self.dropped = 0


def _refusal(connection: Connection, qos: int, code5: ReasonCode) -> int:
    """The SUBACK code of a refused subscription: `code5` at 5.0, 0x80 at 3.1.1; and at 3.1,
    which has no failure code, the QoS: granted, and nothing is delivered."""
    if connection.peer5 is not None:
        return code5
    return SUBACK_FAILURE if connection.protocol_level >= ProtocolLevel.MQTT_3_1_1 else qos


def _malformed_share(topics: list[tuple[str, int]], limits: TopicLimits) -> str:
    """MQTT 5.0: why a SUBSCRIBE is a protocol error for a `$share/` filter without a share
    name or without a topic filter (`$share/g/`, `$share/g`) [MQTT-4.8.2-1, -2], "" when
    none is. A filter invalid as any filter (`$share/g+/a`) gets SUBACK 0x8F instead, as
    every invalid filter does, and 3.1/3.1.1, which cannot say protocol error, 0x80."""
    for topic_filter, _options in topics:
        if topic_filter.startswith(SHARE_PREFIX) and limits.filter_error(topic_filter) is None:
            try:
                shared_subscription(topic_filter)
            except ValueError as error:
                return f"SUBSCRIBE: {error}"
    return ""


def _unavailable(topic_filter: str, limits: ServerLimits5) -> tuple[ReasonCode, str | None]:
    """A 5.0 subscription to a feature this server does not offer: its code and why."""
    if topic_filter.startswith("$share/") and not limits.shared_subscription_available:
        return (
            ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
            "shared subscriptions are not available",
        )
    if not limits.wildcard_subscription_available and is_wildcard_filter(topic_filter):
        return (
            ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
            "wildcard subscriptions are not available",
        )
    return ReasonCode.NORMAL_DISCONNECTION, None


def _set_options5(subscription: Subscription, options: int, subscription_id: int) -> None:
    """The MQTT 5.0 options of a SUBSCRIBE's filter (all 0 at 3.1/3.1.1)."""
    subscription.no_local = bool(options & NO_LOCAL)
    subscription.retain_as_published = bool(options & RETAIN_AS_PUBLISHED)
    subscription.subscription_id = subscription_id
