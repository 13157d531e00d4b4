"""Sessions: a CONNECT's session, takeover, wills and the end of connections.

Theory of operation
-------------------
`Sessions` owns the map of client id -> `Session`, the table of open client connections and
the count of connected ones. Whether a CONNECT is accepted, and as which user, is decided
first (`Admission`, admission.py); an accepted one comes here (`accept`): a session with the
same client id is taken over (its old connection closed, its will published), a clean
session starts empty and a persistent one resumes with its subscriptions, queue and
in-flight messages.

A session belongs to the user who created it (`Session.user_id`, "" for anonymous clients,
kept in the store); `Admission` refuses another user's CONNECT with its client id, so it can
neither resume, discard nor take over the session. A resumed session keeps only what its
user may read (subscriptions another user registered for it, queued and in-flight
messages): the ACL may have changed since (`_recheck`).

When a connection ends without DISCONNECT its will is published (wills.py); a clean session
ends with its connection, a persistent one waits for the next: for ever at MQTT 3.1/3.1.1,
for its Session Expiry Interval at 5.0 (kept in the store, so that it holds across a
restart; housekeeping ends the sessions whose time is up, `expire`). An MQ queue is a
session too (`ensure_queue`), persistent and owned by the user whose RegSub created it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from ...protocol import (
    Connect,
    ConnectionClosed,
    DialConnection,
    DisconnectRequested,
    ReasonCode,
)
from ...protocol.flows import InflightState
from ...protocol.peer5 import NO_EXPIRY
from ...store import SessionRecord
from ...subscriptions import (
    BRIDGE_QUEUE_PREFIX,
    LINK_QUEUE_PREFIX,
    REMOTE_QUEUE_PREFIX,
    Registry,
)
from ..security.acl import Action
from ..security.hooks import Hooks
from .committer import Committer
from .delivery import Deliveries, refresh_in_flight
from .message import Delivery, DeliveryTarget
from .router import Router, now_us
from .session import Session
from .subscribe import SubscriptionManager
from .wills import Wills

if TYPE_CHECKING:
    from ..settings.config import LimitsConfig
    from .session import Client
    from .stats import BrokerStats

log = logging.getLogger("telemq.broker")

# The owner of in-process sessions (embedded.py): not a user name any CONNECT can carry.
EMBEDDED_OWNER = "\x00embedded"
# Links to neighbour brokers (links.py): the client ids reserved for them, and the owner of
# their sessions (`$link/<neighbour>`), which only the links room hands to a connection.
LINK_PREFIX = LINK_QUEUE_PREFIX
LINK_OWNER = "\x00link"
# Bridges to other MQTT brokers (bridges.py): their local sessions, `$bridge/<name>`, also
# owned by LINK_OWNER; no client may take such a client id.
BRIDGE_PREFIX = BRIDGE_QUEUE_PREFIX
# Deliveries on their way to queues on other brokers (remote_queues.py): `$remote/C/Q`.
REMOTE_PREFIX = REMOTE_QUEUE_PREFIX


class LinkGate(Protocol):
    """Who decides on a CONNECT with a `$link/` client id (the links room): `Admission`
    asks for its `refusal`, `accept` tells it the link is `accepted`."""

    def refusal(self, client: Client, packet: Connect, user: str) -> str | None:
        """Why this connection may not be the link it claims to be; None: it may. The gate
        logs its refusals itself (a link refused as a cycle is dialed again and again)."""

    def accepted(self, client: Client, session: Session) -> None:
        """The link is connected: its session is the client's, CONNACK queued."""


class Sessions:
    """Every session and connection (see module docstring)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        limits: LimitsConfig,
        committer: Committer,
        stats: BrokerStats,
        hooks: Hooks,
        registry: Registry,
        deliveries: Deliveries,
        max_session_expiry: int = NO_EXPIRY,
    ) -> None:
        self._loop = loop
        self._limits = limits
        self._max_expiry = max_session_expiry
        self._committer = committer
        self._stats = stats
        self._hooks = hooks
        self._registry = registry
        self.by_id: dict[str, Session] = {}
        self.clients = ClientTable()
        self.connected = 0  # clients past CONNECT
        self._local_count = 0  # in-process sessions opened (their client ids)
        self.deliveries = deliveries
        self.link_gate: LinkGate | None = None  # set by the links room, when configured
        # Sessions named with one of these prefixes deliver to a target made for them when
        # they are made or restored (the links room's `$remote/` sessions).
        self.queue_targets: dict[str, Callable[[Session], DeliveryTarget]] = {}
        self.router: Router  # see attach
        self.subscriptions: SubscriptionManager
        self.wills: Wills

    def attach(self, router: Router, subscriptions: SubscriptionManager, wills: Wills) -> None:
        """The rooms that read `by_id` (and so are made after this one), for wills and for
        the subscriptions of sessions that end."""
        self.router = router
        self.subscriptions = subscriptions
        self.wills = wills

    # -- connections ----------------------------------------------------------

    def opened(self, client: Client) -> None:
        self.clients.add(client)

    def gone(self, client: Client) -> None:
        self.clients.discard(client)
        connection = client.connection
        if connection is not None:
            self._stats.connection_ended(connection.bytes_received, connection.bytes_sent)

    def on_disconnect(self, client: Client, event: DisconnectRequested) -> None:
        if not event.keeps_will:
            client.will = None
        session = client.session
        expiry = event.session_expiry_interval
        if expiry is not None and session is not None and session.persistent:
            session.expiry_interval = min(expiry, self._max_expiry)
            self._save(session)

    def accept(
        self,
        client: Client,
        packet: Connect,
        client_id: str,
        user_id: str,
        link: bool,
        auth_data: bytes | None,
    ) -> None:
        """A CONNECT that `Admission` accepted as `user_id`: the client takes over the
        session of `client_id` or starts a new one, and CONNACK is queued. `link`: a link's
        connection (the gate let it in); `auth_data`: the last data of its enhanced
        authentication, for CONNACK."""
        connection = client.connection
        assert connection is not None
        peer5 = connection.peer5
        # MQTT 5.0: the session lasts as long as the client asks, up to the configured cap;
        # 3.1/3.1.1: a persistent session (clean session 0) lasts until the client ends it.
        if peer5 is not None:
            expiry = min(peer5.session_expiry_interval, self._max_expiry)
            assigned = client_id if not packet.client_id else None
            granted = expiry if expiry != peer5.session_expiry_interval else None
            too_large = connection.connack_problem(assigned, granted, auth_data)
            if too_large:  # before anything changes: no takeover, no session
                self.on_closed(client, connection.close(too_large, ReasonCode.PACKET_TOO_LARGE))
                return
        else:
            expiry = 0 if packet.clean_session else NO_EXPIRY
            assigned = None
            granted = None
        limits = self._limits
        hooks = self._hooks
        client.client_id = client_id
        client.user_id = user_id
        client.will = packet.will
        session = self.by_id.get(client_id)
        if session is not None and session.client is not None and session.client is not client:
            log.info("client %r taken over by a new connection from %s", client_id, client.peer)
            session.client.close(
                "session taken over by a new connection with the same client id",
                ReasonCode.SESSION_TAKEN_OVER,
            )
        session = self.by_id.get(client_id)
        present = False
        if packet.clean_session or session is None or not session.persistent:
            if session is not None:
                self.discard(session)
            sub_point = client.listener.sub_point
            if expiry:
                session = self._new_persistent(client_id, sub_point, user_id, expiry)
            else:
                session = Session(client_id, False, limits.max_inflight, sub_point)
                session.user_id = user_id
                self.by_id[client_id] = session
        else:
            present = True
            if session.expires_at or session.expiry_interval != expiry:
                session.expires_at = 0.0  # connected: it does not expire
                session.expiry_interval = expiry
                self._save(session)
        self.wills.cancel(client_id)  # a new connection to the session, in time
        if present and hooks.authorizers and not link:
            self._recheck(session, client)
        session.client = client
        client.session = session
        self.connected += 1
        self._stats.clients_total_ever += 1
        if present and peer5 is not None and session.outbound:
            refresh_in_flight(session, time.time())
        oversized = connection.accept(
            present,
            session,
            self._loop.time(),
            assigned_client_id=assigned,
            session_expiry_interval=granted,
            authentication_data=auth_data,
        )
        if log.isEnabledFor(logging.DEBUG):  # `peer` is text made when asked
            log.debug(
                "client %r connected from %s (level %d, clean %s, keepalive %d)",
                client_id,
                client.peer,
                packet.protocol_level,
                packet.clean_session,
                packet.keepalive,
            )
        if oversized:  # in flight, and beyond the Maximum Packet Size this client has now
            self.deliveries.drop_too_large(oversized)
        if hooks.session_up:
            hooks.notify(hooks.session_up, client_id, user_id, present)
        if link and self.link_gate is not None:
            self.link_gate.accepted(client, session)
        if session.queue:
            self.deliveries.pump(session)

    def _new_persistent(
        self, client_id: str, sub_point: str, user_id: str, expiry: int = NO_EXPIRY
    ) -> Session:
        session = Session(client_id, True, self._limits.max_inflight, sub_point)
        session.user_id = user_id
        session.expiry_interval = expiry
        session.created_us = now_us()
        self.by_id[client_id] = session
        self._save(session)
        return session

    def _save(self, session: Session) -> None:
        """The session's record: who owns it, and how long it outlives its connection."""
        data: dict[str, object] = {
            "sub_point": session.sub_point,
            "user_id": session.user_id,
            "created_us": session.created_us,
        }
        if session.expiry_interval != NO_EXPIRY:
            data["expiry_interval"] = session.expiry_interval
        if session.expires_at:
            data["expires_at"] = session.expires_at
        self._committer.pending.put_session(SessionRecord(session.client_id, data))
        self._committer.schedule()

    def expire(self, now: float) -> int:
        """End the disconnected sessions whose expiry interval has passed (housekeeping)."""
        expired = [
            session
            for session in self.by_id.values()
            if session.expires_at and session.expires_at <= now and session.client is None
        ]
        for session in expired:
            log.info("session %r expired", session.client_id)
            self.discard(session)
        return len(expired)

    def open_local(self, target: DeliveryTarget, sub_point: str) -> Session:
        """A clean session without a connection, delivering to `target` (embedded.py)."""
        self._local_count += 1
        client_id = f"telemq-local-{self._local_count}"
        while client_id in self.by_id:
            self._local_count += 1
            client_id = f"telemq-local-{self._local_count}"
        session = Session(client_id, False, self._limits.max_inflight, sub_point)
        session.user_id = EMBEDDED_OWNER
        session.target = target
        self.by_id[client_id] = session
        return session

    def ensure_link_session(self, client_id: str) -> Session:
        """The persistent session of a link (`$link/<neighbour>`) or a bridge
        (`$bridge/<name>`): it holds what is owed to the other broker while the connection
        is down, and never expires."""
        session = self.by_id.get(client_id)
        if session is None:
            session = self._new_persistent(client_id, "", LINK_OWNER)
        return session

    def configure_link_session(
        self, client_id: str, *, bridge: bool, max_inflight: int = 0
    ) -> Session:
        """The session of a configured link (or bridge), made if new and marked as one;
        `max_inflight` > 0: the link's own in-flight window instead of a client's."""
        session = self.ensure_link_session(client_id)
        if bridge:
            session.bridge = True
        else:
            session.link = True
        if max_inflight > 0:
            session.configured_inflight = max_inflight
        return session

    def set_link_gate(self, gate: LinkGate) -> None:
        """The links room decides who may connect as a link (`$link/<name>`)."""
        self.link_gate = gate

    def attach_dialed(self, client: Client, connection: DialConnection) -> Session:
        """A connection this broker dialed (a link, a bridge; `client.client_id` names its
        session) was accepted: it becomes its persistent session's connection, taking over
        one still there, with the session's flows (what was in flight is re-sent)."""
        session = self.ensure_link_session(client.client_id)
        if session.client is not None and session.client is not client:
            session.client.close("connection re-established", ReasonCode.SESSION_TAKEN_OVER)
        session.client = client
        client.session = session
        self.connected += 1
        oversized = connection.attach(session, self._loop.time())
        if oversized:
            self.deliveries.drop_too_large(oversized)
        return session

    def ensure_queue(self, queue: str, owner: str) -> Session:
        """An MQ queue = a session: RegSub for a queue with no session creates a durable one,
        owned by the user who asked."""
        session = self.by_id.get(queue)
        if session is None:
            session = self._new_persistent(queue, "", owner)
            self._give_target(session)
        return session

    def restore(self, session: Session) -> None:
        """A persistent session loaded from the store."""
        self.by_id[session.client_id] = session
        self._give_target(session)

    def _give_target(self, session: Session) -> None:
        for prefix, make in self.queue_targets.items():
            if session.client_id.startswith(prefix):
                session.target = make(session)
                return

    def _recheck(self, session: Session, client: Client) -> None:
        """A session resumed: keep only what its user may read, so neither a subscription
        another user registered for its queue nor a change of the ACL reaches around it."""
        user = client.user_id
        hooks = self._hooks
        for subscription in self._registry.of_queue(session.client_id):
            if subscription.owner != user and not hooks.may(
                Action.SUBSCRIBE, subscription.topic, user, client.client_id
            ):
                log.info(
                    "client %r (user %r): subscription to %r removed: not authorized",
                    client.client_id,
                    user,
                    subscription.topic,
                )
                self.subscriptions.remove(subscription)
        # Queued and in-flight messages too, whoever the session belonged to: a queue made
        # by RegSub has no user, and in-flight PUBLISHes are re-sent on resume.
        readable: dict[str, bool] = {}

        def may_read(topic: str) -> bool:
            allowed = readable.get(topic)
            if allowed is None:
                allowed = readable[topic] = hooks.may(
                    Action.SUBSCRIBE, topic, user, client.client_id
                )
            return allowed

        dropped = self.deliveries.keep_queued(session, lambda d: may_read(d.message.topic))
        outbound = session.outbound
        for packet_id, inflight in list(outbound.items()):
            # A QoS 2 message whose PUBREC came is already the client's: PUBREL goes on.
            if inflight.state is InflightState.PUBLISHED and not may_read(
                inflight.topic.decode("utf-8", "replace")
            ):
                del outbound[packet_id]
                if isinstance(inflight.ref, Delivery):
                    dropped.append(inflight.ref)
        self.deliveries.drop(dropped)
        if dropped:
            log.info(
                "client %r (user %r): %d queued or in-flight messages dropped: not authorized",
                client.client_id,
                user,
                len(dropped),
            )

    def discard(self, session: Session) -> None:
        """Forget a session entirely (clean session start, or clean session end)."""
        self.wills.session_ended(session.client_id)
        self.subscriptions.remove_queue(session.client_id)
        committer = self._committer
        if session.persistent:
            self.deliveries.forget_session(session)
            committer.pending.delete_session(session.client_id)
            committer.schedule()
        elif session.incoming:
            # QoS 2 messages received but never released: a clean session's state ends
            # with it, so they are dropped, as the client drops its side.
            for packet_id in session.incoming:
                committer.pending.delete_incoming(session.client_id, packet_id)
            committer.schedule()
        session.incoming.clear()
        self.deliveries.clear_queued(session)
        session.outbound.clear()
        if self.by_id.get(session.client_id) is session:
            del self.by_id[session.client_id]

    # -- the end of a connection ------------------------------------------------

    def on_closed(self, client: Client, event: ConnectionClosed) -> None:
        session = client.session
        if event.graceful:
            if log.isEnabledFor(logging.DEBUG):  # a call the less per connection
                log.debug("client %r disconnected", client.client_id)
        else:
            log.log(
                logging.DEBUG if client.quiet_end else logging.INFO,
                "closed connection %s (client %r): %s [%s]",
                client.peer,
                client.client_id or "-",
                event.reason,
                event.code.label,
            )
        will = client.will
        client.will = None
        if will is not None and session is not None:
            # A DISCONNECT of reason 0 dropped it (`on_disconnect`); any other end publishes
            # it, after its delay when the session outlives the connection (wills.py).
            kept = 0.0
            if session.client is client and session.persistent:
                interval = session.expiry_interval
                kept = float("inf") if interval == NO_EXPIRY else float(interval)
            self.wills.connection_ended(
                will, client.client_id, client.user_id, client.listener.sub_point, kept
            )
        if session is not None:
            self.connected -= 1
            hooks = self._hooks
            if hooks.session_down:
                hooks.notify(hooks.session_down, client.client_id, event.graceful, event.reason)
            if session.client is client:
                session.client = None
                if self._registry.has_shared:  # its group messages, to other members
                    self.router.shares.reshare(session)
                if not session.persistent or not session.expiry_interval:
                    self.discard(session)
                elif session.expiry_interval != NO_EXPIRY:
                    session.expires_at = time.time() + session.expiry_interval
                    self._save(session)
        client.session = None

    def close_all(self, reason: str) -> None:
        """Close every connection (a store failure: their acknowledgements will not come, so
        they retry on reconnection instead of waiting forever)."""
        for client in list(self.clients):
            client.close(reason, ReasonCode.UNSPECIFIED_ERROR)


class ClientTable:
    """The open connections (see the module docstring): a list and each client's index in
    it (`Client.slot`). Adding appends; removing moves the last client into the hole, so
    both are O(1) and the order is arbitrary, as a set's. Iterate over a copy (`list`) to
    close clients while going through them."""

    __slots__ = ("_clients",)

    def __init__(self) -> None:
        self._clients: list[Client] = []

    def add(self, client: Client) -> None:
        if client.slot < 0:
            client.slot = len(self._clients)
            self._clients.append(client)

    def discard(self, client: Client) -> None:
        slot = client.slot
        clients = self._clients
        if slot < 0 or slot >= len(clients) or clients[slot] is not client:
            return
        last = clients.pop()
        if last is not client:
            clients[slot] = last
            last.slot = slot
        client.slot = -1

    def __contains__(self, client: Client) -> bool:
        slot = client.slot
        return 0 <= slot < len(self._clients) and self._clients[slot] is client

    def __len__(self) -> int:
        return len(self._clients)

    def __iter__(self) -> Iterator[Client]:
        return iter(self._clients)
