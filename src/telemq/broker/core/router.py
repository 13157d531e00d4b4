"""The router: publications in, retained, journaled and routed to the sessions that match.

Theory of operation
-------------------
For one PUBLISH from a client (`on_publish`):

1. A command topic (`SYSTEM.BROKER.*`) runs the MQ command instead (`mq.CommandHost`); a
   QoS 2 command runs on PUBREL, like any QoS 2 publication.
2. A topic under one of the broker's own prefixes (`$SYS/`, `$link/`, ...:
   security/reserved.py), or one the hooks deny, is dropped and counted in
   `$SYS/broker/publish/messages/denied`, and acknowledged as usual (MQTT 3.1.1 has no way
   to say no to a PUBLISH) or, at MQTT 5.0, with reason code 0x87 (not authorized).
3. QoS 0/1: `accept` retains it (`RetainedMessages`), appends its journal row and routes it:
   the registry gives the matching queues with their granted QoS (content filters included);
   each session gets one `Delivery` at min(publish QoS, granted QoS) (`Deliveries`).
   PUBACK waits for the commit of the journal row and the durable deliveries.
4. QoS 2 follows the seed's receiver rule: the message is stored (PUBREC after commit) but
   made available only on PUBREL (`on_release`), when it is journaled and routed in one
   transaction. Persistent subscribers get it, and a persistent publisher its PUBCOMP, after
   that commit; clean sessions do not wait for it, and a persistent session remembers the
   ids it released (`Flows.released`). Why, and the bookkeeping: releases.py.

Publications also come from inside the broker (`publish`: $SYS, command replies; wills.py),
over links and bridges (`on_link_publish`), and from the MQ commands (command_puts.py);
all go through `accept`. The router owns the journal's sequence numbers; sessions are read
from the `Sessions` room. With `[sparkplug] aware` on, a publication under `spBv1.0/` is
also shown to the Sparkplug room (sparkplug.py), which keeps the births as retained
certificates: one `startswith` per publication is all other topics pay.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ...commands import COMMAND_TOPICS, Requester
from ...network.envelope import identified
from ...protocol import (
    MessageReceived,
    MessageReleased,
    PacketType,
    Publish,
    ReasonCode,
    TopicLimits,
    topic_matches,
)
from ...protocol.properties import read_message_properties
from ...store import Op
from ...subscriptions import DeliveryOptions, Registry
from ..security.acl import Action
from ..security.hooks import Hooks
from ..security.reserved import reserved_topic_problem
from .committer import Committer
from .delivery import Deliveries
from .message import Delivery, Message
from .releases import complete_release, record_release
from .retained import RetainedMessages
from .session import Session
from .shares import Shares
from .sparkplug import SPARKPLUG_PREFIX, SparkplugAwareness
from .turns import ReadClock

if TYPE_CHECKING:
    from ...protocol.property_table import Properties
    from ..settings.config import JournalConfig
    from .session import Client
    from .stats import BrokerStats

log = logging.getLogger("telemq.broker")


class CommandRunner(Protocol):
    """Who runs the MQ commands published to `SYSTEM.BROKER.*` (the MQ command host,
    operations/mq.py; the wiring gives it). Called for command topics only, never on the
    path of an ordinary message, so a Protocol costs nothing there."""

    def run_for(
        self,
        client: Client,
        queue_topic: str,
        payload: bytes,
        qos: int,
        properties: Properties | None = None,
    ) -> None: ...

    def run_as(
        self,
        requester: Requester,
        queue_topic: str,
        payload: bytes,
        properties: Properties | None = None,
    ) -> None: ...


# What takes a copy that came over a link instead of the router (a copy for a queue,
# remote_queues.py): `(message, hand_off_now)`, returning the deliveries to hand off after
# the commit when `hand_off_now` is False, as `Router.accept` does.
Deliver = Callable[[Message, bool], list[tuple[Session, Delivery]]]

JOURNAL_CACHE_SIZE = 16384  # topics whose journal exclusion is remembered
IDENTIFIED_CACHE_SIZE = 4096  # publishers whose link envelope is remembered


def now_us() -> int:
    """UTC microseconds: the timestamps of messages and store records."""
    return time.time_ns() // 1000


class Router:
    """Accepts publications and routes them (see module docstring)."""

    __slots__ = (
        "_committer",
        "_deliveries",
        "_hooks",
        "_identified",
        "_journal_cache",
        "_journal_cache_limit",
        "_journal_exclude",
        "_journal_on",
        "_on_accepted",
        "_plain_excluded",
        "_publish_checked",
        "_read_clock",
        "_registry",
        "_retained",
        "_sessions",
        "_sparkplug",
        "_stats",
        "_topic_limits",
        "cache_bytes",
        "commands",
        "envelopes",
        "next_seq",
        "own",
        "shares",
    )

    def __init__(
        self,
        committer: Committer,
        stats: BrokerStats,
        hooks: Hooks,
        registry: Registry,
        sessions: dict[str, Session],
        deliveries: Deliveries,
        retained: RetainedMessages,
        journal: JournalConfig,
        commands: CommandRunner,
        topic_limits: TopicLimits,
        cache_bytes: int,
        read_clock: ReadClock,
        own: str = "",
        sparkplug: SparkplugAwareness | None = None,
    ) -> None:
        self.own = own  # this broker's name: the origin of the publications made here
        # [sparkplug] aware: asked for each publication under spBv1.0/ (sparkplug.py).
        self._sparkplug = sparkplug
        self._committer = committer
        self._topic_limits = topic_limits
        self._journal_cache_limit = cache_bytes  # 0 = no bound
        self._stats = stats
        self._hooks = hooks
        # Resolved once (hooks never change after start): read natively per message.
        self._publish_checked = bool(hooks.authorizers)
        self._on_accepted = hooks.accepted
        self._registry = registry
        self._sessions = sessions  # owned by the Sessions room: read only here
        self._deliveries = deliveries
        self._retained = retained
        self.commands = commands
        self._journal_on = journal.enabled
        self._journal_exclude = list(journal.exclude)
        # Only a filter that starts with "$" can match a topic that does (and only such a
        # topic: wildcards do not match "$" topics [MQTT-4.7.2-1]). With the default
        # exclusion, `$SYS/#`, every other topic is journaled without a lookup.
        self._plain_excluded = any(not f.startswith("$") for f in journal.exclude)
        self._journal_cache: dict[str, bool] = {}
        self.cache_bytes = 0  # characters of the topic names in the journal cache
        self._read_clock = read_clock  # the hub's: when the read being handled arrived
        self.next_seq = 1  # the journal's next sequence number
        self.shares = Shares(registry, sessions, deliveries)  # shared subscriptions' members
        # Sub point -> the telemq-* user properties that copies of a publication made here
        # carry over links (links.py fills it; a forwarded message has its own, `net`).
        self.envelopes: dict[str, bytes] = {}
        # (sub point, client id, user id) -> that envelope with the publisher's identity.
        self._identified: dict[tuple[str, str, str], bytes] = {}

    def set_envelope(self, sub_point: str, envelope: bytes) -> None:
        """The telemq-* user properties that copies of the publications made here at
        `sub_point` carry over links (set by the links room)."""
        self.envelopes[sub_point] = envelope

    def on_publish(self, client: Client, event: MessageReceived) -> None:
        publish = event.publish
        connection = client.connection
        session = client.session
        if session is None or connection is None:
            return
        committer = self._committer
        self._stats.publish_received += 1
        qos = publish.qos
        packet_id = publish.packet_id
        too_large = self._topic_limits.size_error(publish.topic)
        if too_large is not None:
            # MQTT 3.1.1 has no negative acknowledgement: an unusable topic ends the connection.
            client.close(f"PUBLISH refused: {too_large}", ReasonCode.TOPIC_NAME_INVALID)
            return
        if publish.topic in COMMAND_TOPICS and qos < 2:
            self.commands.run_for(client, publish.topic, publish.payload, qos, publish.properties)
            if qos == 1:
                committer.after(lambda: client.acknowledge(PacketType.PUBACK, packet_id))
            return
        topic = publish.topic
        if topic.startswith("$"):  # the broker's own prefixes: security/reserved.py
            reserved = reserved_topic_problem(topic, client.client_id)
            if reserved is not None:
                self._deny(client, publish, f"refused: {reserved}")
                return
        if self._publish_checked and not self._hooks.may(
            Action.PUBLISH, topic, client.user_id, client.client_id
        ):
            self._deny(client, publish, "denied")
            return
        if qos == 2:
            if not event.duplicate:
                message = self._message_from(client, publish)
                session.hold_incoming(packet_id, message)
                held = message.incoming_row(session.client_id, packet_id)
                committer.pending.ops.append((Op.PUT_INCOMING_ROW, (held,)))  # put_incoming_row
            committer.after(lambda: client.acknowledge(PacketType.PUBREC, packet_id))
            return
        message = self._message_from(client, publish)
        self.accept(message, hand_off_now=True)
        if qos == 1:
            committer.after(lambda: client.acknowledge(PacketType.PUBACK, packet_id))
        elif committer.pending:
            committer.schedule_lazy()  # nothing waits for a QoS 0 journal row

    def _deny(self, client: Client, publish: Publish, why: str) -> None:
        """A PUBLISH the client may not make: dropped (not retained, journaled or routed)
        and counted in `$SYS/broker/publish/messages/denied`; MQTT 5.0 says so in its
        PUBACK/PUBREC (0x87), 3.1/3.1.1 acknowledge as usual (the code is ignored)."""
        self._stats.publish_denied += 1
        log.info("client %r: publish to %r %s", client.client_id, publish.topic, why)
        packet_id = publish.packet_id
        denied = ReasonCode.NOT_AUTHORIZED
        committer = self._committer
        if publish.qos == 1:
            committer.after(lambda: client.acknowledge(PacketType.PUBACK, packet_id, denied))
        elif publish.qos == 2:
            committer.after(lambda: client.acknowledge(PacketType.PUBREC, packet_id, denied))

    def on_release(self, client: Client, event: MessageReleased) -> None:
        self.release(client, event, None)

    def release(
        self,
        client: Client,
        event: MessageReleased,
        exclude_queue: str | None,
        route: bool = True,
        deliver: Deliver | None = None,
    ) -> None:
        """A QoS 2 publication released by its PUBREL; `exclude_queue` gets no copy (the
        link it came by); with `route` False it only completes (a copy that looped); a
        `deliver` takes it instead of routing (a copy for a queue, remote_queues.py)."""
        session = client.session
        if session is None:
            return
        packet_id = event.packet_id
        message = event.message
        committer = self._committer
        if not isinstance(message, Message):
            # Nothing held under this id (released before, or never received): PUBCOMP.
            committer.after(lambda: client.acknowledge(PacketType.PUBCOMP, packet_id))
            return
        record_release(committer, session, packet_id, message)
        if message.topic in COMMAND_TOPICS:
            props = read_message_properties(message.properties) if message.properties else None
            self.commands.run_for(client, message.topic, message.payload, 2, props)
            committer.after(lambda: client.acknowledge(PacketType.PUBCOMP, packet_id))
            return
        if not route:
            hand_offs = []
        elif deliver is not None:
            hand_offs = deliver(message, False)
        else:
            hand_offs = self.accept(message, False, not message.sync, exclude_queue)
        complete_release(committer, self._deliveries, client, session, packet_id, hand_offs)

    def on_link_publish(
        self,
        client: Client,
        event: MessageReceived,
        message: Message,
        deliver: Deliver | None = None,
    ) -> None:
        """A publication that came over a link (links.py made `message`): as `on_publish`,
        without commands or the hooks (a link is trusted), and never back to its link; or,
        with `deliver`, taken by it instead of routed (QoS 2: at `release`)."""
        publish = event.publish
        session = client.session
        if session is None:
            return
        committer = self._committer
        packet_id = publish.packet_id
        qos = publish.qos
        self._stats.publish_received += 1
        self._stats.received_by_qos[qos] += 1
        if qos == 2:
            if not event.duplicate:
                session.hold_incoming(packet_id, message)
                held = message.incoming_row(session.client_id, packet_id)
                committer.pending.ops.append((Op.PUT_INCOMING_ROW, (held,)))  # put_incoming_row
            committer.after(lambda: client.acknowledge(PacketType.PUBREC, packet_id))
            return
        if deliver is None:
            self.accept(message, True, not message.sync, session.client_id)
        else:
            deliver(message, True)
        if qos == 1:
            committer.after(lambda: client.acknowledge(PacketType.PUBACK, packet_id))
        elif committer.pending:
            committer.schedule_lazy()

    def _message_from(self, client: Client, publish: Publish) -> Message:
        """The accepted publication of a PUBLISH being handled."""
        self._stats.received_by_qos[publish.qos] += 1
        message = Message(
            publish.topic,
            publish.payload,
            publish.qos,
            publish.retain,
            client.listener.sub_point,
            client.client_id,
            client.user_id,
            self._read_clock.received_us,
            frame_qos0=publish.frame,
        )
        if publish.properties is not None:  # MQTT 5.0
            message.take_properties(publish.properties)
        return message

    # -- publications from inside the broker ----------------------------------

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        sub_point: str = "",
        journal: bool = True,
        properties: bytes = b"",
    ) -> None:
        """Publish from inside the broker ($SYS, command replies), routed like any message;
        `properties`: its MQTT 5.0 properties (`protocol.message_properties`)."""
        message = Message(topic, payload, qos, retain, sub_point, "", "", now_us())
        message.properties = properties
        self.accept(message, hand_off_now=True, journal=journal)
        if self._committer.pending:
            self._committer.schedule_lazy()

    # -- accept and route -----------------------------------------------------

    def accept(
        self,
        message: Message,
        hand_off_now: bool,
        journal: bool = True,
        exclude_queue: str | None = None,
    ) -> list[tuple[Session, Delivery]]:
        """Retain, journal and route an accepted publication. With `hand_off_now` False the
        deliveries are returned instead of sent (a QoS 2 release sends them after its commit)."""
        if message.retain:
            self._retained.keep(message)
        if journal and self._journal_on and self._journaled(message.topic):
            seq = self.next_seq
            self.next_seq = seq + 1
            row = (
                seq,
                message.ts_us,
                message.topic,
                message.sub_point,
                message.qos,
                1 if message.retain else 0,
                bytearray(message.payload),  # see JournalRow
                message.client_id,
                message.user_id,
                bytearray(message.properties) if message.properties else 0,  # 0: none
            )
            if message.origin:  # made at another broker
                self._committer.pending.append_foreign_journal_row((*row, message.origin))
            else:  # WriteBatch.append_journal_row, inlined: once per publication.
                self._committer.pending.journal += row
        if self._on_accepted:
            self._hooks.notify(self._on_accepted, message)
        sparkplug = self._sparkplug
        if sparkplug is not None and message.topic.startswith(SPARKPLUG_PREFIX):
            return self._route_sparkplug(sparkplug, message, hand_off_now, exclude_queue)
        return self._route(message, hand_off_now, exclude_queue)

    def _route_sparkplug(
        self,
        sparkplug: SparkplugAwareness,
        message: Message,
        hand_off_now: bool,
        exclude_queue: str | None,
    ) -> list[tuple[Session, Delivery]]:
        """A publication under spBv1.0/: routed as any other, then a birth's certificate
        retained, not journaled (the birth is), and routed to `$sparkplug/` subscribers."""
        later = self._route(message, hand_off_now, exclude_queue)
        certificate = sparkplug.certificate_of(message)
        if certificate is not None:
            later += self.accept(certificate, hand_off_now, False)
        return later

    def _journaled(self, topic: str) -> bool:
        """Whether a publication on `topic` goes into the journal (`journal.exclude`)."""
        if not self._plain_excluded and not topic.startswith("$"):
            return True  # no exclusion can match it: nothing to look up or cache
        cached = self._journal_cache.get(topic)
        if cached is None:
            cached = not any(topic_matches(f, topic) for f in self._journal_exclude)
            size = self.cache_bytes + len(topic)
            limit = self._journal_cache_limit
            if len(self._journal_cache) > JOURNAL_CACHE_SIZE or (limit and size > limit):
                self._journal_cache.clear()
                size = len(topic)
            self.cache_bytes = size
            self._journal_cache[topic] = cached
        return cached

    def _route(
        self, message: Message, hand_off_now: bool, exclude_queue: str | None
    ) -> list[tuple[Session, Delivery]]:
        """Deliver to every matching queue once, at its highest matching QoS."""
        msg_qos = message.qos
        targets = self._registry.targets(
            message.sub_point,
            message.topic,
            message.payload,
            msg_qos,
            message.retain,
            message.client_id,
            message.user_id,
            message.properties,
            bool(message.net),
            message.origin or self.own,
        )
        registry = self._registry
        shares: dict[str, str] | None = None  # queue -> the shared group it was picked for
        options5: dict[str, DeliveryOptions] | None = None
        if registry.has_extras:  # MQTT 5.0 options or shared groups: only then looked up
            options5, groups = registry.extras(message.sub_point, message.topic)
            if groups:
                targets, options5, shares = self.shares.add_members(groups, targets or {}, options5)
        if not targets:
            return []
        sessions = self._sessions
        deliveries = self._deliveries
        later: list[tuple[Session, Delivery]] = []
        sync = message.sync  # a retained answer: RETAIN set for every subscriber
        onward: bytes | None = None  # the envelope of its copies over links, once needed
        for queue, (granted, rank) in targets.items():
            if queue == exclude_queue:
                continue
            qos = granted if granted < msg_qos else msg_qos
            session = sessions.get(queue)
            if session is None:
                continue
            retain = sync  # a live copy: RETAIN is for retained messages [MQTT-3.3.1-9]
            extra = b""  # MQTT 5.0: the Subscription Identifiers
            if options5 is not None:
                options = options5.get(queue)
                if options is not None:
                    if options.no_local and queue == message.client_id and not message.origin:
                        continue  # the publishing connection is this broker's, not a namesake's
                    retain = (message.retain and options.retain_as_published) or sync
                    extra = options.properties
                    if session.link:  # a proxy subscription: the copy crosses a link
                        if message.local_only:
                            continue
                        if onward is None:
                            onward = message.net or self._envelope_of(message)
                        extra = onward
                        session.counted().forwarded += 1
                    elif message.local_only and session.bridge:  # nor a bridge (PubOpt Local)
                        continue
            durable = session.persistent and durable_rank(rank, qos)
            if durable and qos == 0:
                qos = 1  # Pers / PersAsQueue: kept until acknowledged
            if qos == 0:
                client = session.client
                if client is None and session.target is None:
                    continue  # QoS 0 is not queued for offline sessions (as Mosquitto)
                if session.holding and hand_off_now:
                    deliveries.hold_qos0(session, message, retain, extra)
                elif not hand_off_now:
                    later.append((session, Delivery(message, 0, retain, 0, extra)))
                elif client is not None:
                    deliveries.send_qos0(client, message, retain, extra)
                else:
                    deliveries.to_target(session, Delivery(message, 0, retain, 0, extra))
                continue
            share = shares.get(queue, "") if shares is not None else ""
            delivery = deliveries.enqueue(
                session, message, qos, retain, durable, True, extra, share
            )
            if delivery is None:
                continue
            if hand_off_now:
                deliveries.pump(session)
            else:
                later.append((session, delivery))
        return later

    def _envelope_of(self, message: Message) -> bytes:
        """The envelope of the copies over links of `message`, made here: its sub point's,
        with the publisher's client id and user id (docs/network.md §6), built once per
        publisher; the sub point's own when both are ""."""
        envelope = self.envelopes[message.sub_point]
        client_id = message.client_id
        user_id = message.user_id
        if not client_id and not user_id:
            return envelope
        key = (message.sub_point, client_id, user_id)
        found = self._identified.get(key)
        if found is None:
            if len(self._identified) >= IDENTIFIED_CACHE_SIZE:
                self._identified.clear()
            found = self._identified[key] = identified(envelope, client_id, user_id)
        return found


def durable_rank(rank: int, qos: int) -> bool:
    """Design §5: Pers and PersAsQueue (on a durable session) always; PersAsPub at QoS >= 1."""
    return rank >= 2 or (rank == 1 and qos >= 1)
