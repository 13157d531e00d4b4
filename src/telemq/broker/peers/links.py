"""The links room: this broker's connections to its neighbour telemq brokers.

Theory of operation
-------------------
A link (docs/network.md §3) is one MQTT 5.0 connection between two brokers, carrying both
directions, and on each side one persistent session, `$link/<neighbour>`, made at start
(`Sessions.ensure_link_session`) so that what is owed to the neighbour waits durably while
the link is down. The side whose `[[links]]` entry has `host` dials (`_dial`, dialer.py: full
jitter back-off); the other accepts the CONNECT through the `Sessions` gate (`refusal`,
`accepted`): the client id `$link/<name>`, the user of the entry, the broker name and the
link protocol version in the CONNECT's user properties must all agree.

The neighbours announce the brokers they reach (`reach`, network.topology): in the CONNECT's
user properties from the dialer, as the first `$link/control` message from the acceptor, and
again on every change. A link whose announcement would close a cycle is refused (at CONNECT)
or closed (on a later announcement), with an ERROR naming the cycle; links that came up
together are resolved the same way by every broker on the cycle (`Topology.drops`).

The room owns the topology, each link's state and counters, and the dialing tasks. It reads
sessions from `Sessions` and hands link connections' events to its own handler table
(`Client.handlers`): control messages are consumed here, everything else goes where a
client's events go. Proxy subscriptions are proxies.py's; retained answers to new proxies
and DeletePub across the network are retained_sync.py's (a retained answer that arrives is
passed on only if it is news here, `_open_envelope`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...network.control import (
    CONTROL_TOPIC,
    ControlError,
    DeleteRetained,
    ProxyChange,
    Reach,
    Sync,
    decode,
    encode,
)
from ...network.envelope import LinkInfo, closed_envelope, extend, loops, split_user_properties
from ...network.topology import Topology
from ...protocol import (
    Connect,
    ConnectAcknowledged,
    ConnectionClosed,
    DialConnection,
    MessageReceived,
    MessageReleased,
    PacketType,
    Properties,
    ReasonCode,
)
from ...protocol.peer5 import NO_EXPIRY
from ...protocol.properties import read_message_properties
from ..core.message import Message
from ..core.rooms import CoreRooms
from ..core.router import now_us
from ..core.session import Client, EventHandlers
from ..core.sessions import LINK_OWNER, LINK_PREFIX
from ..core.stats import PeerCounters
from ..settings.config import ListenerConfig
from ..settings.network import LinkConfig, dial_secret
from .connector import Backoff, cancel_all, dial_target, keep_dialing
from .proxies import ProxySubscriptions
from .remote_queues import RemoteQueues
from .retained_sync import RetainedSync

if TYPE_CHECKING:
    from ..core.session import Session

log = logging.getLogger("telemq.broker")

ONWARD_CACHE = 4096  # entries of `Links._onward`
LINK_PROTOCOL = "1"  # telemq-link: the version of what links say to each other
CYCLE_LOG_EVERY = 3600.0  # seconds between two log lines about the same refused cycle


@dataclass(slots=True)
class LinkState:
    """One neighbour, as this broker sees it (`$SYS/broker/links/<name>/...`)."""

    config: LinkConfig
    state: str = "down"  # connected, connecting, down, refused: <reason>
    client: Client | None = None  # the connection, once up
    backoff: Backoff = field(default_factory=lambda: Backoff(1.0, 30.0))
    last_cycle_log: float = -CYCLE_LOG_EVERY
    announced: list[list[str]] | None = None  # the reach last sent over this link
    messages_received: int = 0
    loops_logged: bool = False

    @property
    def session_id(self) -> str:
        """The session that holds what goes to this neighbour."""
        return LINK_PREFIX + self.config.name


class Links:
    """This broker's links (see module docstring); a broker without links has none."""

    def __init__(self, rooms: CoreRooms) -> None:
        self._rooms = rooms
        self._sessions = sessions = rooms.sessions
        config = rooms.config
        self.own = config.name
        self.links: dict[str, LinkState] = {
            link.name: LinkState(link, backoff=Backoff(link.reconnect_min, link.reconnect_max))
            for link in config.links
        }
        self.topology = Topology(self.own, list(self.links))
        self.retained_sync = RetainedSync(
            self.own,
            rooms.retained,
            rooms.deliveries,
            sessions.by_id,
            rooms.committer,
            self.topology.next_hop,
            lambda: list(self.links),
        )
        self.proxies = ProxySubscriptions(
            self.own,
            list(self.links),
            rooms.registry,
            rooms.subscriptions,
            rooms.sub_points,
            rooms.topic_limits,
            self._send_to,
            self.retained_sync.answer,
        )
        self.remote_queues = RemoteQueues(
            self.own,
            self.topology.next_hop,
            sessions,
            rooms.deliveries,
            rooms.committer,
            lambda user, queue: rooms.hooks.may_use_queue(user, "", queue),
            rooms.stats,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._ended: dict[Client, asyncio.Future[None]] = {}  # dialed connections' ends
        self._announced: dict[Client, object] = {}  # accepted CONNECTs' reach, until CONNACK
        # (path, sub point, sync tag) of arriving copies -> the envelope of their copies
        # onward: the same few paths come again and again.
        self._onward: dict[tuple[tuple[str, ...], str, str], bytes] = {}
        self.handlers: EventHandlers = dict(rooms.hub.event_handlers)
        self.handlers[MessageReceived] = self.on_publish
        self.handlers[MessageReleased] = self.on_release
        self.handlers[ConnectAcknowledged] = self.on_connack
        self.handlers[ConnectionClosed] = self.on_closed

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        """After the store is restored: links no longer configured stop collecting, the
        link sessions, what the restored subscriptions ask of the neighbours, then the
        dialing tasks."""
        self._quiesce_removed()
        if not self.links:
            return
        self._sessions.set_link_gate(self)
        router = self._rooms.router
        for sub_point in self._rooms.sub_points:
            router.set_envelope(sub_point, closed_envelope(LinkInfo((self.own,), sub_point)))
        deliveries = self._rooms.deliveries
        for name, link in self.links.items():
            session = self._sessions.configure_link_session(
                LINK_PREFIX + name, bridge=False, max_inflight=link.config.max_inflight
            )
            deliveries.set_link_limits(
                session.client_id, link.config.max_queued_messages, link.config.max_queued_bytes
            )
        self.proxies.start()
        for link in self.links.values():
            if link.config.dials:
                self._tasks.append(asyncio.get_running_loop().create_task(self._dial(link)))

    async def stop(self) -> None:
        await cancel_all(self._tasks)

    def counters(self) -> list[PeerCounters]:
        """Each link's state and traffic (`/metrics`)."""
        found = []
        for name, link in self.links.items():
            session = self._sessions.by_id.get(link.session_id)
            found.append(
                PeerCounters(
                    name,
                    link.state,
                    received=link.messages_received,
                    sent=0 if session is None else session.forwarded,
                    dropped=0 if session is None else session.dropped,
                    queued=0 if session is None else session.backlog,
                )
            )
        return found

    # -- what the MQ commands read of the network (operations/mq.py `Network`) ---------

    def known(self, name: str) -> bool:
        return self.topology.known(name)

    def proxies_asked(self) -> list[tuple[str, str, str, int]]:
        return self.proxies.asked()

    def delete_retained_everywhere(self, sub_point: str, topic: str) -> None:
        if self.links:
            self.retained_sync.delete_everywhere(sub_point, topic)

    def _quiesce_removed(self) -> None:
        """A link taken out of the configuration: its proxy subscriptions go, so its
        session collects nothing more, but what it holds stays (a link removed by mistake
        loses nothing) until the link is configured again or `telemq links forget` drops
        it with the broker stopped."""
        subscriptions = self._rooms.subscriptions
        for client_id, session in list(self._sessions.by_id.items()):
            name = client_id[len(LINK_PREFIX) :]
            if not client_id.startswith(LINK_PREFIX) or name in self.links:
                continue
            proxies = self._rooms.registry.of_queue(client_id)
            for subscription in proxies:
                subscriptions.remove(subscription)
            log.warning(
                "link %r is no longer configured: its %d proxy subscriptions are removed; its "
                "session keeps %d messages for it (configure the link again to deliver them, "
                "or drop them with `telemq links forget %s` while the broker is stopped)",
                name,
                len(proxies),
                session.backlog,
                name,
            )

    # -- dialing --------------------------------------------------------------

    def _dial(self, link: LinkState) -> Coroutine[Any, Any, None]:
        """Keep the link up (dialer.py); a refusal stays its state until it ends."""
        config = link.config
        target = dial_target(f"link {config.name!r}", config, list(self.links).index(config.name))

        def attempt() -> None:
            if not link.state.startswith("refused"):
                link.state = "connecting"

        def failed() -> None:
            if not link.state.startswith("refused"):
                link.state = "down"

        return keep_dialing(
            target,
            link.backoff,
            functools.partial(self._outbound, link),
            attempt,
            failed,
            lambda: link.state == "refused: cycle",
        )

    def _outbound(self, link: LinkState, ended: asyncio.Future[None]) -> Client:
        """The client-role connection of a dialed link, with the CONNECT it opens with."""
        hub = self._rooms.hub
        config = link.config
        password = dial_secret(config)
        connect = Connect(
            client_id=LINK_PREFIX + self.own,
            protocol_level=5,
            clean_session=False,
            keepalive=config.keepalive,
            username=config.username or None,
            password=password.encode("utf-8") if password is not None else None,
            protocol_name="MQTT",
            properties=Properties(
                session_expiry_interval=NO_EXPIRY,
                receive_maximum=config.max_inflight,
                user_properties=[
                    ("telemq-link", LINK_PROTOCOL),
                    ("telemq-broker", self.own),
                    ("telemq-reach", json.dumps(self.topology.announcement(config.name))),
                ],
            ),
        )
        limits = hub.limits

        def dial(now: float) -> DialConnection:
            return DialConnection(
                now=now,
                connect=connect,
                max_packet_size=limits.max_packet_size,
                connect_timeout=limits.connect_timeout,
                mqtt5=hub.limits5,
            )

        client = Client(hub, ListenerConfig(), dial, self.handlers)
        client.client_id = LINK_PREFIX + config.name
        client.user_id = LINK_OWNER
        self._ended[client] = ended
        return client

    # -- accepting (the `Sessions` gate) ---------------------------------------

    def refusal(self, client: Client, packet: Connect, user: str) -> str | None:
        name = packet.client_id[len(LINK_PREFIX) :]
        link = self.links.get(name)
        if link is None:
            return f"client id {packet.client_id!r}: no [[links]] entry names broker {name!r}"
        config = link.config
        if config.dials:
            return (
                f"links[{list(self.links).index(name)}] ({name!r}) dials this neighbour; "
                "remove host on one side"
            )
        props = packet.properties
        if props is None:
            return "a link speaks MQTT 5.0"
        announced = dict(props.user_properties)
        if announced.get("telemq-link") != LINK_PROTOCOL:
            return f"link protocol {announced.get('telemq-link')!r}, not {LINK_PROTOCOL!r}"
        broker_name = announced.get("telemq-broker")
        if broker_name != name:
            return f"client id {packet.client_id!r} announces broker {broker_name!r}"
        if user != config.user:
            return (
                f"announces broker {name!r} but logged in as {user!r} "
                f"(links[{list(self.links).index(name)}] expects {config.user!r})"
            )
        try:
            paths = json.loads(announced.get("telemq-reach", "[]"))
            cycle = self.topology.check(name, paths)
        except ValueError as error:
            return f"broker {name!r} announces an invalid reach: {error}"
        if cycle is not None:
            message = cycle.message(name)
            self._log_cycle(link, message)
            return message
        # Recorded once accepted: a connection this one takes over ends first (on_closed),
        # and must not take the new one's paths with it.
        self._announced[client] = paths
        return None

    def accepted(self, client: Client, session: Session) -> None:
        name = client.client_id[len(LINK_PREFIX) :]
        link = self.links[name]
        client.handlers = self.handlers
        cycle = self.topology.connect(name, self._announced.pop(client, []))
        if cycle is not None:  # another link came up in between
            self._drop_for_cycle(link, cycle.message(name), client)
            return
        self._up(link, client)

    # -- events of link connections -------------------------------------------

    def on_connack(self, client: Client, event: ConnectAcknowledged) -> None:
        link = self.links[client.client_id[len(LINK_PREFIX) :]]
        connection = client.connection
        if event.return_code != 0 or not isinstance(connection, DialConnection):
            reason = event.reason_string or ""
            link.state = f"refused: {reason or f'CONNACK 0x{event.return_code:02X}'}"
            if "would close the cycle" in reason or "own name" in reason:
                link.state = "refused: cycle"
            log.warning(
                "link %r refused by %s:%d: CONNACK 0x%02X %s",
                link.config.name,
                link.config.host,
                link.config.port,
                event.return_code,
                reason,
            )
            return
        session = self._sessions.attach_dialed(client, connection)
        self._rooms.deliveries.pump(session)  # what waited while the link was down
        # The neighbour's reach comes as its first control message; until then its paths
        # are not known here (the acceptor checked this broker's at CONNECT).
        self._up(link, client, reach_known=False)

    def on_publish(self, client: Client, event: MessageReceived) -> None:
        publish = event.publish
        if publish.topic == CONTROL_TOPIC:
            self._control(client, publish.payload)
            if publish.qos == 1:  # a stored one (delete-retained): acknowledged once applied
                packet_id = publish.packet_id
                committer = self._rooms.committer
                committer.after(lambda: client.acknowledge(PacketType.PUBACK, packet_id))
                committer.schedule()
            return
        link = self.links[client.client_id[len(LINK_PREFIX) :]]
        link.messages_received += 1
        props = publish.properties
        message = Message(
            publish.topic, publish.payload, publish.qos, publish.retain, "", "", "", now_us()
        )
        deliver = None
        if publish.qos == 2:
            # Held as it came, envelope included, and opened at PUBREL (`on_release`), so
            # that a restart in between finds the path in the stored message.
            if props is not None:
                message.take_properties(props)
        else:
            info = self._open_envelope(link, props, message)
            if info is None:
                if publish.qos == 1:  # dropped (a loop): acknowledged, or it comes again
                    client.acknowledge(PacketType.PUBACK, publish.packet_id)
                return
            if info.to:  # for a queue (remote_queues.py): put there or passed on
                deliver = self.remote_queues.deliver_for(info)
        self._rooms.router.on_link_publish(client, event, message, deliver)

    def on_release(self, client: Client, event: MessageReleased) -> None:
        """A QoS 2 copy's PUBREL: its envelope is opened now (see `on_publish`)."""
        link = self.links[client.client_id[len(LINK_PREFIX) :]]
        message = event.message
        route = True
        deliver = None
        if isinstance(message, Message):
            props = read_message_properties(message.properties) if message.properties else None
            info = self._open_envelope(link, props, message)
            route = info is not None
            if info is not None and info.to:
                deliver = self.remote_queues.deliver_for(info)
        self._rooms.router.release(client, event, client.client_id, route, deliver)

    def _open_envelope(
        self, link: LinkState, props: Properties | None, message: Message
    ) -> LinkInfo | None:
        """Take the envelope off the properties of a copy that came over `link` (`props`,
        as decoded) and give `message` the rest, its sub point, and the envelope its copies
        to further links carry; the envelope is returned. None when the copy has been here
        before (a loop: dropped, logged once per link), or is a retained answer this broker
        already holds. A copy for a queue (`telemq-to`) is not routed: remote_queues.py
        makes its envelope onward."""
        pairs = props.user_properties if props is not None else []
        try:
            info, rest = split_user_properties(pairs)
        except ValueError as error:
            log.error(
                "link %r: a publication with an invalid envelope: %s", link.config.name, error
            )
            info, rest = None, pairs
        if info is None:
            info = LinkInfo((link.config.name,))
        if info.to:
            if loops(info, self.own):
                log.error(
                    "link %r: a publication for queue %s came back (path %s): dropped",
                    link.config.name,
                    info.to,
                    ",".join(info.path),
                )
                return None
            if props is not None:
                props.user_properties = rest
                message.take_properties(props)
            message.origin = info.path[0]
            return info
        key = (info.path, info.sub_point, info.sync)
        onward = self._onward.get(key)
        if onward is None:
            if loops(info, self.own):
                if not link.loops_logged:
                    link.loops_logged = True
                    log.error(
                        "link %r: a publication came back (path %s): dropped; the links form "
                        "a cycle",
                        link.config.name,
                        ",".join(info.path),
                    )
                return None
            if len(self._onward) >= ONWARD_CACHE:
                self._onward.clear()
            onward = self._onward[key] = closed_envelope(extend(info, self.own))
        if props is not None:
            props.user_properties = rest
            message.take_properties(props)
        if info.sub_point and info.sub_point in self._rooms.sub_points:
            message.sub_point = info.sub_point
        message.net = onward
        message.origin = info.path[0]
        if info.sync:  # a retained answer: passed on only if it is news here
            message.sync = True
            if not self.retained_sync.is_news(message):
                return None
        return info

    def on_closed(self, client: Client, event: ConnectionClosed) -> None:
        name = client.client_id[len(LINK_PREFIX) :]
        link = self.links.get(name)
        self._sessions.on_closed(client, event)
        self._announced.pop(client, None)
        ended = self._ended.pop(client, None)
        if ended is not None and not ended.done():
            ended.set_result(None)
        if link is None or link.client is not client:
            return
        link.client = None
        link.announced = None
        if not link.state.startswith("refused"):
            link.state = "down"
        log.info("link %r down: %s", name, event.reason)
        self.topology.disconnect(name)
        self._announce_all()

    # -- reach ------------------------------------------------------------------

    def _up(self, link: LinkState, client: Client, reach_known: bool = True) -> None:
        link.client = client
        link.state = "connected" if reach_known else "connecting"
        link.backoff.connected()
        if reach_known:
            log.info("link %r up (%s)", link.config.name, client.peer)
        self._announce(link, force=True)
        if reach_known:
            self.proxies.send_sync(link.config.name)
            self._announce_all()
            self.remote_queues.pump_all()

    def _control(self, client: Client, payload: bytes) -> None:
        name = client.client_id[len(LINK_PREFIX) :]
        link = self.links[name]
        try:
            message = decode(payload)
        except ControlError as error:
            log.error("link %r: invalid control message: %s", name, error)
            client.close(f"invalid control message: {error}", ReasonCode.PROTOCOL_ERROR)
            return
        if isinstance(message, Reach):
            self._reach(link, client, message.paths)
        elif isinstance(message, (Sync, ProxyChange)):
            self.proxies.received(name, message)
        elif isinstance(message, DeleteRetained):
            if message.sub_point in self._rooms.sub_points:
                self._rooms.retained.delete(message.sub_point, message.topic)
            self.retained_sync.delete_everywhere(
                message.sub_point, message.topic, message.origin, came_by=name
            )

    def _send_to(self, neighbour: str, message: Sync | ProxyChange) -> bool:
        """A control message to a neighbour whose link is up (the proxies room's `send`)."""
        link = self.links.get(neighbour)
        if link is None or link.state != "connected":
            return False
        self._send_control(link, message)
        return True

    def _send_control(self, link: LinkState, message: Sync | ProxyChange | Reach) -> None:
        """A control message straight on the link's connection (QoS 0): in order with the
        other control messages; a connection that ends loses them, and the next one
        starts with a whole `sync` again."""
        client = link.client
        if client is None or client.connection is None or client.connection.closed:
            return
        client.connection.send_publish(CONTROL_TOPIC.encode("utf-8"), encode(message), False, b"")
        client.mark_dirty()

    def _reach(self, link: LinkState, client: Client, paths: list[list[str]]) -> None:
        name = link.config.name
        first = paths[0][0] if paths and paths[0] else ""
        if first != name:
            link.state = f"refused: found broker {first!r}"
            log.error(
                "links[%d] expects broker %r at %s:%d, found %r",
                list(self.links).index(name),
                name,
                link.config.host,
                link.config.port,
                first,
            )
            client.close(f"expected broker {name!r}, found {first!r}", ReasonCode.NOT_AUTHORIZED)
            return
        try:
            if link.state == "connected":
                cycle = self.topology.update(name, paths)
            else:
                cycle = self.topology.connect(name, paths)
                if cycle is None:
                    link.state = "connected"
                    log.info("link %r up (%s)", name, client.peer)
                    self.proxies.send_sync(link.config.name)
        except ValueError as error:
            client.close(f"invalid reach: {error}", ReasonCode.PROTOCOL_ERROR)
            return
        if cycle is not None:
            # Refused when it came up; otherwise links that came up together closed a cycle,
            # and the two ends of the link the tie-break picks drop it (`Topology.drops`).
            victim = name if link.state != "connected" else self.topology.drops(cycle)
            if victim is not None:
                self._drop_for_cycle(self.links[victim], cycle.message(victim))
            if link.state != "connected":
                return
        self._announce_all()
        self.remote_queues.pump_all()  # a broker behind this link may be reachable now

    def _drop_for_cycle(self, link: LinkState, message: str, client: Client | None = None) -> None:
        link.state = "refused: cycle"
        self._log_cycle(link, message)
        client = client or link.client
        if client is not None:
            client.close(message, ReasonCode.NOT_AUTHORIZED)

    def _announce(self, link: LinkState, force: bool = False) -> None:
        """Tell the neighbour what this broker reaches, if that changed (QoS 0, ahead of
        anything queued: reach updates must not wait behind a backlog)."""
        client = link.client
        if client is None or client.connection is None or client.connection.closed:
            return
        paths = self.topology.announcement(link.config.name)
        if not force and paths == link.announced:
            return
        link.announced = paths
        self._send_control(link, Reach(paths))

    def _announce_all(self) -> None:
        for link in self.links.values():
            if link.state == "connected":
                self._announce(link)

    def _log_cycle(self, link: LinkState, message: str) -> None:
        now = time.monotonic()
        if now - link.last_cycle_log >= CYCLE_LOG_EVERY:
            link.last_cycle_log = now
            log.error("%s", message)

    # -- $SYS -------------------------------------------------------------------

    def sys_values(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for name, link in self.links.items():
            prefix = f"links/{name}/"
            session = self._sessions.by_id.get(LINK_PREFIX + name)
            queued = 0 if session is None else session.backlog
            values[prefix + "state"] = link.state
            values[prefix + "messages/received"] = str(link.messages_received)
            if session is not None:
                values[prefix + "messages/sent"] = str(session.forwarded)
                values[prefix + "messages/dropped"] = str(session.dropped)
            values[prefix + "queued"] = str(queued)
            values[prefix + "reaches"] = ",".join(self.topology.reachable(name))
            values[prefix + "proxy subscriptions/in"] = str(
                self._rooms.registry.count_of_queue(LINK_PREFIX + name)
            )
            values[prefix + "proxy subscriptions/out"] = str(self.proxies.asked_of(name))
        if self.links:
            # Deliveries for queues on other brokers waiting here for a way there.
            values["remote queues/queued"] = str(self.remote_queues.queued())
        return values
