"""The control side of links: what brokers say to each other on `$link/control`, and reach.

Theory of operation
-------------------
Beside the publications they carry, links carry control messages (network/control.py) on
the `$link/control` topic, sent QoS 0 straight on the link's connection, ahead of anything
queued and in order with each other (`send`); a connection that ends loses them, and the
next one starts with whole announcements again. What arrives (`received`) is one of:

- `Reach`: the brokers the neighbour reaches (network.topology). The acceptor sends its own
  as its first control message, and both sides again on every change (`announce_all`).
  The first one from a dialed neighbour must name the broker the `[[links]]` entry expects;
  until it comes a dialed link is "connecting". A reach that would close a cycle refuses
  the link (when it comes up) or drops the link the tie-break picks (`Topology.drops`, the
  same on every broker of the cycle), with an ERROR naming the cycle, logged at most once
  an hour per link (`log_cycle`; the dialing side's WARNING about a neighbour's refusal
  shares that hour, links.py), and the closed connection only at DEBUG.
- `Sync` and `ProxyChange`: the proxy subscriptions the neighbour asks of this broker, for
  the proxies room (proxies.py), which sends its own through the links room's `_send_to`.
- `DeleteRetained`: DeletePub across the network, applied here and passed on
  (retained_sync.py).

A link that comes up (`up`) announces its reach, sends its whole proxy set and lets the
remote queues try again (remote_queues.py). `LinkState` is each neighbour's state as the
links room (links.py) keeps it; this class changes only its connection state and the
announcement last sent. It owns nothing else: the topology, the links and the other rooms
are the links room's, handed over when it is built.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

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
from ...network.topology import Topology
from ...protocol import ReasonCode
from ..core.rooms import CoreRooms
from ..core.session import Client
from ..core.sessions import LINK_PREFIX
from ..settings.network import LinkConfig
from .connector import Backoff
from .proxies import ProxySubscriptions
from .remote_queues import RemoteQueues
from .retained_sync import RetainedSync

log = logging.getLogger("telemq.broker")

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


class LinkControl:
    """The control messages of every link, and the reach they announce (see module
    docstring)."""

    def __init__(
        self,
        links: dict[str, LinkState],
        topology: Topology,
        rooms: CoreRooms,
        proxies: ProxySubscriptions,
        retained_sync: RetainedSync,
        remote_queues: RemoteQueues,
    ) -> None:
        self._links = links  # the links room's
        self._topology = topology  # the links room's
        self._rooms = rooms
        self._proxies = proxies
        self._retained_sync = retained_sync
        self._remote_queues = remote_queues

    def up(self, link: LinkState, client: Client, reach_known: bool = True) -> None:
        """`client` is the link's connection now; with `reach_known` False (a dialed link)
        it is connected once the neighbour's first reach came (`_reach`)."""
        link.client = client
        link.state = "connected" if reach_known else "connecting"
        link.backoff.connected()
        if reach_known:
            log.info("link %r up (%s)", link.config.name, client.peer)
            link.last_cycle_log = -CYCLE_LOG_EVERY  # a cycle after this is news again
        self._announce(link, force=True)
        if reach_known:
            self._proxies.send_sync(link.config.name)
            self.announce_all()
            self._remote_queues.pump_all()

    def received(self, client: Client, payload: bytes) -> None:
        """A control message from the link of `client`, applied."""
        name = client.client_id[len(LINK_PREFIX) :]
        link = self._links[name]
        try:
            message = decode(payload)
        except ControlError as error:
            log.error("link %r: invalid control message: %s", name, error)
            client.close(f"invalid control message: {error}", ReasonCode.PROTOCOL_ERROR)
            return
        if isinstance(message, Reach):
            self._reach(link, client, message.paths)
        elif isinstance(message, (Sync, ProxyChange)):
            self._proxies.received(name, message)
        elif isinstance(message, DeleteRetained):
            if message.sub_point in self._rooms.sub_points:
                self._rooms.retained.delete(message.sub_point, message.topic)
            self._retained_sync.delete_everywhere(
                message.sub_point, message.topic, message.origin, came_by=name
            )

    def send(self, link: LinkState, message: Sync | ProxyChange | Reach) -> None:
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
                list(self._links).index(name),
                name,
                link.config.host,
                link.config.port,
                first,
            )
            client.close(f"expected broker {name!r}, found {first!r}", ReasonCode.NOT_AUTHORIZED)
            return
        topology = self._topology
        try:
            if link.state == "connected":
                cycle = topology.update(name, paths)
            else:
                cycle = topology.connect(name, paths)
                if cycle is None:
                    link.state = "connected"
                    log.info("link %r up (%s)", name, client.peer)
                    link.last_cycle_log = -CYCLE_LOG_EVERY  # a cycle after this is news again
                    self._proxies.send_sync(link.config.name)
        except ValueError as error:
            client.close(f"invalid reach: {error}", ReasonCode.PROTOCOL_ERROR)
            return
        if cycle is not None:
            # Refused when it came up; otherwise links that came up together closed a cycle,
            # and the two ends of the link the tie-break picks drop it (`Topology.drops`).
            victim = name if link.state != "connected" else topology.drops(cycle)
            if victim is not None:
                self.drop_for_cycle(self._links[victim], cycle.message(victim))
            if link.state != "connected":
                return
        self.announce_all()
        self._remote_queues.pump_all()  # a broker behind this link may be reachable now

    def drop_for_cycle(self, link: LinkState, message: str, client: Client | None = None) -> None:
        """The link would close a cycle: refused, logged, and its connection closed (its
        end at DEBUG: the ERROR says it all)."""
        link.state = "refused: cycle"
        self.log_cycle(link, message)
        client = client or link.client
        if client is not None:
            client.quiet_end = True
            client.close(message, ReasonCode.NOT_AUTHORIZED)

    def _announce(self, link: LinkState, force: bool = False) -> None:
        """Tell the neighbour what this broker reaches, if that changed (QoS 0, ahead of
        anything queued: reach updates must not wait behind a backlog)."""
        client = link.client
        if client is None or client.connection is None or client.connection.closed:
            return
        paths = self._topology.announcement(link.config.name)
        if not force and paths == link.announced:
            return
        link.announced = paths
        self.send(link, Reach(paths))

    def announce_all(self) -> None:
        """This broker's reach, to every connected neighbour it changed for."""
        for link in self._links.values():
            if link.state == "connected":
                self._announce(link)

    def log_cycle(self, link: LinkState, message: str) -> None:
        """An ERROR about a cycle, at most once every `CYCLE_LOG_EVERY` seconds per link."""
        if cycle_log_due(link):
            log.error("%s", message)


def cycle_log_due(link: LinkState) -> bool:
    """Whether a line about `link` refused as a cycle may be logged now: at most one every
    `CYCLE_LOG_EVERY` seconds, whichever side refused (a refused link is dialed again every
    `reconnect_max` seconds, and each attempt is refused the same way). True marks it
    logged."""
    now = time.monotonic()
    if now - link.last_cycle_log < CYCLE_LOG_EVERY:
        return False
    link.last_cycle_log = now
    return True
