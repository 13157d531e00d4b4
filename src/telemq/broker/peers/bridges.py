"""The bridges room: this broker's connections to MQTT brokers that are not telemq.

Theory of operation
-------------------
A bridge (docs/network.md §8) is a `[[bridges]]` entry in the style of Mosquitto's
`connection` section: one remote broker, dialed as an ordinary MQTT 3.1, 3.1.1 or 5.0
client (`protocol.DialConnection`, re-dialed with back-off by dialer.py), and `topics`
rules (`network.bridge_rules`) saying what crosses, which way, and under which names.

Outgoing (`out`, `both`): the bridge's local session `$bridge/<name>` is persistent and
never expires, so what is owed to the remote broker waits durably while it is away. It
subscribes here to each outgoing rule's local filter, at the rule's QoS, with Retain As
Published; these subscriptions are made (and those no rule asks for any more removed) at
start. Deliveries leave through the session's connection like any client's; the dialer
renames each topic on the way out (`rename`: the first outgoing rule that matches, local
prefix off, remote prefix on), and the in-flight copy keeps the remote name. In-flight
copies restored from the store carry the local name, and are renamed once at start.

Incoming (`in`, `both`): after every CONNACK the bridge subscribes on the remote broker to
each incoming rule's remote filter. What arrives is renamed back (the first incoming rule
whose remote filter matches) and accepted as a publication from the network: routed,
retained and journaled here, never sent back out by the bridge it came in by (the router's
`exclude_queue`), not given to RegOpt `Local` subscriptions, and passed on over links.

Loops: a `both` rule would echo (out to the remote, back in by the remote subscription).
At 5.0 the remote subscriptions have No Local. At 3.1/3.1.1 `try_private` (the default)
sends the CONNECT's level as 0x80 | level, which Mosquitto and telemq take as a bridge's
(No Local and Retain As Published on its subscriptions); a remote that refuses it with
CONNACK 1 is dialed again with the plain level, as Mosquitto's bridge falls back. Without
private mode an echoed copy reaches local subscribers once more; it never loops, since it
does not go back out by its bridge.

The room owns each bridge's state and counters and the dialing tasks; the sessions and
subscriptions it reads belong to their rooms.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from ...network.bridge_rules import BridgeRule
from ...network.envelope import LinkInfo, sealed_envelope
from ...protocol import (
    Connect,
    ConnectAcknowledged,
    ConnectionClosed,
    ConnectReturnCode,
    DialConnection,
    MessageReceived,
    MessageReleased,
    PacketType,
    Properties,
    Publish,
    SubscribeAcknowledged,
    UnsubscribeAcknowledged,
    Will,
    encode,
    subscription_options,
    topic_matches,
)
from ...protocol.peer5 import NO_EXPIRY
from ...subscriptions import Identity, Subscription
from ..core.message import Message
from ..core.rooms import CoreRooms
from ..core.router import now_us
from ..core.session import Client, EventHandlers
from ..core.sessions import BRIDGE_PREFIX, LINK_OWNER
from ..core.stats import PeerCounters
from ..settings.config import ListenerConfig
from ..settings.network import BRIDGE_PROTOCOLS, BridgeConfig, dial_secret
from .connector import Backoff, cancel_all, dial_target, keep_dialing

log = logging.getLogger("telemq.broker")

RENAME_CACHE = 4096  # topics per bridge whose remote name is remembered
NOTIFICATION_TOPIC = "$SYS/broker/connection/{}/state"  # Mosquitto's


@dataclass(slots=True)
class BridgeState:
    """One bridge, as this broker sees it (`$SYS/broker/bridges/<name>/...`)."""

    config: BridgeConfig
    rules: list[BridgeRule]
    backoff: Backoff
    remote_client_id: str
    private: bool  # the next CONNECT says 0x80 | level (try_private, until refused)
    state: str = "down"  # connected, connecting, down, refused: <reason>
    client: Client | None = None
    messages_received: int = 0
    unmapped: int = 0  # arrivals no incoming rule names (dropped)

    @property
    def session_id(self) -> str:
        return BRIDGE_PREFIX + self.config.name


class Bridges:
    """This broker's bridges (see module docstring); a broker without bridges has none."""

    def __init__(self, rooms: CoreRooms) -> None:
        self._rooms = rooms
        self._sessions = rooms.sessions
        self._subscriptions = rooms.subscriptions
        self.own = rooms.config.name
        self.bridges: dict[str, BridgeState] = {}
        for config in rooms.config.bridges:
            self.bridges[config.name] = BridgeState(
                config,
                config.rules(),
                Backoff(config.reconnect_min, config.reconnect_max),
                config.client_id or f"{self.own}.{config.name}",
                private=config.try_private and config.protocol != "5",
            )
        # What arrives by a bridge enters the network as a publication made here, by the
        # bridge's session (its client id, `$bridge/<name>`, is the journal's).
        self._envelopes = {
            name: sealed_envelope(LinkInfo((self.own,), "", client_id=bridge.session_id))
            for name, bridge in self.bridges.items()
        }
        self._renames: dict[str, dict[bytes, bytes]] = {name: {} for name in self.bridges}
        self._tasks: list[asyncio.Task[None]] = []
        self._ended: dict[Client, asyncio.Future[None]] = {}
        self.handlers: EventHandlers = dict(rooms.hub.event_handlers)
        self.handlers[ConnectAcknowledged] = self.on_connack
        self.handlers[MessageReceived] = self.on_publish
        self.handlers[MessageReleased] = self.on_release
        self.handlers[SubscribeAcknowledged] = self.on_suback
        self.handlers[UnsubscribeAcknowledged] = self.on_unsuback
        self.handlers[ConnectionClosed] = self.on_closed

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        """After the store is restored: sessions of bridges no longer configured go, each
        bridge's session and local subscriptions are made as its rules say, and dialing
        starts."""
        self._forget_removed()
        loop = asyncio.get_running_loop()
        for bridge in self.bridges.values():
            session = self._sessions.configure_link_session(bridge.session_id, bridge=True)
            self._subscribe_locally(bridge)
            # Restored in-flight copies carry local names: the remote broker gets its own.
            self._rooms.deliveries.rename_in_flight(
                session,
                functools.partial(self._remote_name, bridge),
                bridge.config.outgoing_retain,
            )
            self._tasks.append(loop.create_task(self._dial(bridge)))

    async def stop(self) -> None:
        await cancel_all(self._tasks)

    def _forget_removed(self) -> None:
        """A bridge taken out of the configuration leaves nothing behind: its session
        (queue and subscriptions) would otherwise fill up for ever."""
        for client_id, session in list(self._sessions.by_id.items()):
            if client_id.startswith(BRIDGE_PREFIX):
                name = client_id[len(BRIDGE_PREFIX) :]
                if name not in self.bridges:
                    log.warning(
                        "bridge %r is no longer configured: its session and %d queued "
                        "messages are dropped",
                        name,
                        session.backlog,
                    )
                    self._sessions.discard(session)

    def _subscribe_locally(self, bridge: BridgeState) -> None:
        """The session's subscriptions: one per outgoing rule's local filter, at its QoS."""
        registry = self._rooms.registry
        queue = bridge.session_id
        wanted: dict[str, int] = {}
        for rule in bridge.rules:
            if rule.outgoing:
                wanted[rule.local_filter] = max(rule.qos, wanted.get(rule.local_filter, 0))
        for stale in registry.of_queue(queue):
            if stale.topic not in wanted:
                self._subscriptions.remove(stale)
        identity = Identity(self.own, queue)
        for topic_filter, qos in wanted.items():
            existing = registry.get((identity, topic_filter, "", ""))
            if existing is not None:
                if existing.qos != qos:
                    existing.qos = qos
                    registry.changed(existing)
                    self._subscriptions.saved(existing)
                continue
            subscription = Subscription(
                id=registry.new_id(),
                identity=identity,
                topic=topic_filter,
                sub_point="",
                owner=LINK_OWNER,
                qos=qos,
                created_at=time.time(),
                mqtt=True,
                retain_as_published=True,
            )
            registry.add(subscription)
            self._subscriptions.saved(subscription)

    # -- names ------------------------------------------------------------------

    def _remote_name(self, bridge: BridgeState, topic: bytes) -> bytes:
        """The remote name of a local topic (the dialer's `rename`)."""
        renames = self._renames[bridge.config.name]
        remote = renames.get(topic)
        if remote is None:
            local = topic.decode("utf-8")
            name = local
            for rule in bridge.rules:
                if rule.outgoing and topic_matches(rule.local_filter, local):
                    name = rule.to_remote(local) or local
                    break
            if len(renames) >= RENAME_CACHE:
                renames.clear()
            remote = renames[topic] = name.encode("utf-8")
        return remote

    @staticmethod
    def _local_name(bridge: BridgeState, remote: str) -> str | None:
        for rule in bridge.rules:
            if rule.incoming and topic_matches(rule.remote_filter, remote):
                return rule.to_local(remote)
        return None

    # -- dialing --------------------------------------------------------------

    def _dial(self, bridge: BridgeState) -> Coroutine[Any, Any, None]:
        config = bridge.config
        index = list(self.bridges).index(config.name)
        target = dial_target(f"bridge {config.name!r}", config, index, "bridges")

        def attempt() -> None:
            bridge.state = "connecting"

        def failed() -> None:
            bridge.state = "down"

        return keep_dialing(
            target,
            bridge.backoff,
            functools.partial(self._outbound, bridge),
            attempt,
            failed,
            lambda: bridge.state.startswith("refused"),
        )

    def _outbound(self, bridge: BridgeState, ended: asyncio.Future[None]) -> Client:
        hub = self._rooms.hub
        config = bridge.config
        level = BRIDGE_PROTOCOLS[config.protocol]
        password = dial_secret(config)
        will = None
        if config.notifications:
            will = Will(NOTIFICATION_TOPIC.format(bridge.remote_client_id), b"0", 1, True)
        connect = Connect(
            client_id=bridge.remote_client_id,
            protocol_level=level,
            clean_session=config.cleansession,
            keepalive=config.keepalive,
            will=will,
            username=config.username or None,
            password=password.encode("utf-8") if password is not None else None,
            protocol_name="MQIsdp" if level == 3 else "MQTT",
            properties=(
                Properties(session_expiry_interval=0 if config.cleansession else NO_EXPIRY)
                if level == 5
                else None
            ),
        )
        limits = hub.limits
        private = bridge.private

        def dial(now: float) -> DialConnection:
            return DialConnection(
                connect,
                now=now,
                bridge=private,
                max_packet_size=limits.max_packet_size,
                connect_timeout=limits.connect_timeout,
                mqtt5=hub.limits5 if level == 5 else None,
                rename=functools.partial(self._remote_name, bridge),
                outgoing_retain=config.outgoing_retain,
            )

        client = Client(hub, ListenerConfig(), dial, self.handlers)
        client.client_id = bridge.session_id
        client.user_id = LINK_OWNER
        self._ended[client] = ended
        return client

    def _bridge_of(self, client: Client) -> BridgeState:
        return self.bridges[client.client_id[len(BRIDGE_PREFIX) :]]

    # -- events of bridge connections -------------------------------------------

    def on_connack(self, client: Client, event: ConnectAcknowledged) -> None:
        bridge = self._bridge_of(client)
        config = bridge.config
        connection = client.connection
        if event.return_code != 0 or not isinstance(connection, DialConnection):
            if (
                event.return_code == ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION
                and bridge.private
            ):
                bridge.private = False  # as Mosquitto's bridge: the plain level next
                bridge.state = "down"
                log.info(
                    "bridge %r: %s:%d refused the private level; dialing again without it",
                    config.name,
                    config.host,
                    config.port,
                )
                return
            reason = event.reason_string or f"CONNACK 0x{event.return_code:02X}"
            bridge.state = f"refused: {reason}"
            log.warning(
                "bridge %r refused by %s:%d: %s", config.name, config.host, config.port, reason
            )
            return
        session = self._sessions.attach_dialed(client, connection)
        bridge.client = client
        bridge.state = "connected"
        bridge.backoff.connected()
        log.info("bridge %r up (%s:%d)", config.name, config.host, config.port)
        self._subscribe_remotely(bridge, connection)
        if config.notifications:
            self._notify(bridge, connection, b"1")
        self._rooms.deliveries.pump(session)  # what waited while the bridge was down
        client.mark_dirty()

    def _subscribe_remotely(self, bridge: BridgeState, connection: DialConnection) -> None:
        """SUBSCRIBE to what the incoming rules ask for; UNSUBSCRIBE what only outgoing
        rules name, which an earlier configuration may have subscribed to (as Mosquitto)."""
        level5 = connection.protocol_level == 5
        incoming: dict[str, int] = {}
        for rule in bridge.rules:
            if rule.incoming:
                incoming[rule.remote_filter] = max(rule.qos, incoming.get(rule.remote_filter, 0))
        if incoming:
            connection.subscribe(
                [
                    (
                        topic_filter,
                        subscription_options(qos, no_local=True, retain_as_published=True)
                        if level5
                        else qos,
                    )
                    for topic_filter, qos in incoming.items()
                ]
            )
        stale = {
            rule.remote_filter
            for rule in bridge.rules
            if not rule.incoming and rule.remote_filter not in incoming
        }
        if stale and not bridge.config.cleansession:
            connection.unsubscribe(sorted(stale))

    def _notify(self, bridge: BridgeState, connection: DialConnection, state: bytes) -> None:
        """Mosquitto's bridge notifications: retained 1 or 0, here and on the remote (where
        the CONNECT's will sets 0 when the connection is lost)."""
        topic = NOTIFICATION_TOPIC.format(bridge.remote_client_id)
        if not connection.closed:
            connection.send_bytes(encode(Publish(topic, state, 0, True), connection.protocol_level))
        self._rooms.router.publish(topic, state, 0, True, journal=False)

    def on_publish(self, client: Client, event: MessageReceived) -> None:
        bridge = self._bridge_of(client)
        publish = event.publish
        local = self._local_name(bridge, publish.topic)
        if local is None:  # no incoming rule names it (a subscription made elsewhere)
            bridge.unmapped += 1
            if publish.qos == 1:
                client.acknowledge(PacketType.PUBACK, publish.packet_id)
            elif publish.qos == 2:
                client.acknowledge(PacketType.PUBREC, publish.packet_id)
            return
        bridge.messages_received += 1
        message = Message(
            local, publish.payload, publish.qos, publish.retain, "", client.client_id, "", now_us()
        )
        if publish.properties is not None:
            message.take_properties(publish.properties)
        message.net = self._envelopes[bridge.config.name]
        self._rooms.router.on_link_publish(client, event, message)

    def on_release(self, client: Client, event: MessageReleased) -> None:
        message = event.message
        if isinstance(message, Message):
            # held in the store without it
            message.net = self._envelopes[self._bridge_of(client).config.name]
        self._rooms.router.release(client, event, client.client_id)

    def on_suback(self, client: Client, event: SubscribeAcknowledged) -> None:
        bridge = self._bridge_of(client)
        refused = [code for code in event.return_codes if code >= 0x80]
        if refused:
            log.warning(
                "bridge %r: the remote broker refused %d of its subscriptions (codes %s)",
                bridge.config.name,
                len(refused),
                ", ".join(f"0x{code:02X}" for code in refused),
            )

    def on_unsuback(self, client: Client, event: UnsubscribeAcknowledged) -> None:
        """Nothing to do: a stale remote subscription is gone, or was not there."""

    def on_closed(self, client: Client, event: ConnectionClosed) -> None:
        bridge = self._bridge_of(client)
        self._sessions.on_closed(client, event)
        ended = self._ended.pop(client, None)
        if ended is not None and not ended.done():
            ended.set_result(None)
        if bridge.client is not None and bridge.client is not client:
            return  # a connection the current one replaced
        if not bridge.state.startswith("refused"):
            bridge.state = "down"
        if bridge.client is None:
            return  # it never got as far as CONNACK
        bridge.client = None
        log.info("bridge %r down: %s", bridge.config.name, event.reason)
        if bridge.config.notifications:
            self._rooms.router.publish(
                NOTIFICATION_TOPIC.format(bridge.remote_client_id), b"0", 0, True, journal=False
            )

    # -- $SYS and /metrics -------------------------------------------------------

    def counters(self) -> list[PeerCounters]:
        """Each bridge's state and traffic (`/metrics`)."""
        found = []
        for name, bridge in self.bridges.items():
            session = self._sessions.by_id.get(bridge.session_id)
            found.append(
                PeerCounters(
                    name,
                    bridge.state,
                    received=bridge.messages_received,
                    sent=None,
                    dropped=bridge.unmapped,
                    queued=0 if session is None else session.backlog,
                )
            )
        return found

    def sys_values(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for name, bridge in self.bridges.items():
            prefix = f"bridges/{name}/"
            session = self._sessions.by_id.get(bridge.session_id)
            queued = 0 if session is None else session.backlog
            values[prefix + "state"] = bridge.state
            values[prefix + "messages/received"] = str(bridge.messages_received)
            values[prefix + "messages/unmapped"] = str(bridge.unmapped)
            values[prefix + "queued"] = str(queued)
        return values
