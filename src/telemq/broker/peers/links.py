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
again on every change. A link whose announcement would close a cycle is refused (at CONNECT,
`refusal`) or closed (on a later announcement), with an ERROR naming the cycle; links that
came up together are resolved the same way by every broker on the cycle (`Topology.drops`).

The room owns the topology, each link's state (`LinkState`) and counters, and the dialing
tasks. It reads sessions from `Sessions` and hands link connections' events to its own
handler table (`Client.handlers`): what arrives goes to `Arrivals` (arrivals.py: the
envelope taken off, then where a client's publications go), control messages on to
`LinkControl` (link_control.py: reach, cycles, proxy and DeletePub messages), and the
connection's CONNACK and end come here. Proxy subscriptions are proxies.py's; retained
answers to new proxies and DeletePub across the network are retained_sync.py's.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from ...network.control import ProxyChange, Sync
from ...network.envelope import LinkInfo, sealed_envelope
from ...network.topology import Topology
from ...protocol import (
    Connect,
    ConnectAcknowledged,
    ConnectionClosed,
    DialConnection,
    MessageReceived,
    MessageReleased,
    Properties,
)
from ...protocol.peer5 import NO_EXPIRY
from ..core.rooms import CoreRooms
from ..core.session import Client, EventHandlers
from ..core.sessions import LINK_OWNER, LINK_PREFIX
from ..core.stats import PeerCounters
from ..settings.config import ListenerConfig
from ..settings.network import dial_secret
from .arrivals import Arrivals
from .connector import Backoff, cancel_all, dial_target, keep_dialing
from .link_control import LinkControl, LinkState, cycle_log_due
from .proxies import ProxySubscriptions
from .remote_queues import RemoteQueues
from .retained_sync import RetainedSync

if TYPE_CHECKING:
    from ..core.session import Session

log = logging.getLogger("telemq.broker")

LINK_PROTOCOL = "1"  # telemq-link: the version of what links say to each other


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
        self.control = LinkControl(
            self.links,
            self.topology,
            rooms,
            self.proxies,
            self.retained_sync,
            self.remote_queues,
        )
        self.arrivals = Arrivals(
            self.own, self.links, rooms, self.control, self.retained_sync, self.remote_queues
        )
        self.handlers: EventHandlers = dict(rooms.hub.event_handlers)
        self.handlers[MessageReceived] = self.arrivals.on_publish
        self.handlers[MessageReleased] = self.arrivals.on_release
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
            router.set_envelope(sub_point, sealed_envelope(LinkInfo((self.own,), sub_point)))
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
        """Keep the link up (connector.py); a refusal stays its state until it ends."""
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
        """Why the CONNECT of `client` may not be the link it claims to be (None: it may),
        logged here: a WARNING, or for a cycle the ERROR of `LinkControl.log_cycle`, at most
        once an hour, since the neighbour dials again and again."""
        refusal = self._refusal(client, packet, user)
        if refusal is not None and not client.quiet_end:
            log.warning("link from %s refused: %s", client.peer, refusal)
        return refusal

    def _refusal(self, client: Client, packet: Connect, user: str) -> str | None:
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
            self.control.log_cycle(link, message)
            client.quiet_end = True  # the refusal's own lines at DEBUG
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
            self.control.drop_for_cycle(link, cycle.message(name), client)
            return
        self.control.up(link, client)

    # -- events of link connections -------------------------------------------

    def on_connack(self, client: Client, event: ConnectAcknowledged) -> None:
        link = self.links[client.client_id[len(LINK_PREFIX) :]]
        connection = client.connection
        if event.return_code != 0 or not isinstance(connection, DialConnection):
            reason = event.reason_string or ""
            link.state = f"refused: {reason or f'CONNACK 0x{event.return_code:02X}'}"
            if "would close the cycle" in reason or "own name" in reason:
                # Dialed again every reconnect_max seconds and refused the same way: one
                # line an hour, and the connection's end at DEBUG.
                link.state = "refused: cycle"
                client.quiet_end = True
                if not cycle_log_due(link):
                    return
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
        self.control.up(link, client, reach_known=False)

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
        self.control.announce_all()

    def _send_to(self, neighbour: str, message: Sync | ProxyChange) -> bool:
        """A control message to a neighbour whose link is up (the proxies room's `send`)."""
        link = self.links.get(neighbour)
        if link is None or link.state != "connected":
            return False
        self.control.send(link, message)
        return True

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
