"""The broker: sessions, routing, retained messages, durability, listeners.

Theory of operation
-------------------
All broker state lives in memory, owned by the event-loop thread; the store is
its durable mirror, written through the `Committer` (group commit). For one
PUBLISH from a client:

1. `Client.data_received` feeds the bytes to its sans-IO `Connection`, which
   returns `MessageReceived`.
2. `_accept_publication` builds a `Message`, updates the retained store,
   appends the journal record, and routes: the subscription trie gives the
   matching sessions with their granted QoS; each gets one `Delivery` at
   min(publish QoS, granted QoS). Deliveries to persistent sessions at QoS >= 1
   are written to the store (message once, one row per delivery).
3. QoS 0 and QoS 1 deliveries go to connected subscribers at once; PUBACK is
   sent only after the batch holding the journal record and the durable
   deliveries is committed.
4. QoS 2 follows the seed's receiver rule: the message is stored (PUBREC after
   commit) but made available only on PUBREL, when it is journaled and routed in
   one transaction. Persistent subscribers get it, and a persistent publisher its
   PUBCOMP, after that commit. Clean sessions do not wait for it: a crash before it
   leaves the stored message unreleased, and it is released at restart (the clean
   publisher's session is gone, and so are the clean subscribers' that had it), so
   nobody gets it twice and the journal has it once. That commit comes within
   `RELEASE_COMMIT_WITHIN` seconds, or with the next one. A PUBLISH retried with
   the same packet id while held is acknowledged again and never accepted twice.

Subscribers acknowledge with PUBACK/PUBREC/PUBCOMP; completed durable
deliveries are deleted, and a stored message with no remaining delivery too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from .. import __version__
from ..commands import COMMAND_TOPICS, RESPONSE_PREFIX, PutResult, Requester
from ..filters import FilterError
from ..filters import Message as FilterMessage
from ..protocol import (
    SUBACK_FAILURE,
    Connection,
    ConnectionClosed,
    ConnectRequested,
    ConnectReturnCode,
    DeliveryAcknowledged,
    DeliveryReceived,
    DisconnectRequested,
    Event,
    MessageReceived,
    MessageReleased,
    PacketIdsExhausted,
    PacketType,
    ProtocolLevel,
    Publish,
    SubAck,
    SubscribeRequested,
    UnsubAck,
    UnsubscribeRequested,
    topic_filter_error,
    topic_matches,
)
from ..protocol.flows import InflightState, release_digest
from ..store import (
    DeliveryRecord,
    DeliveryState,
    IncomingRecord,
    RetainedRecord,
    SessionRecord,
    Store,
    StoreState,
    StoreStats,
    SubscriptionRecord,
    SyncMode,
    consumers,
    open_store,
)
from ..subscriptions import PERSISTENCE_RANK, Identity, Registry, Subscription
from .auth import Action, Authorizer
from .client import Client
from .committer import Committer
from .config import BrokerConfig, ListenerConfig, build_authorizer
from .mq import CommandHost, reply_payload, reply_topic, run_command, wants_reply
from .session import Delivery, Message, Session
from .tls import server_context

log = logging.getLogger("telemq.broker")

# Seconds within which a clean session's QoS 2 release (its journal row) is committed when
# nothing waits for it: soon, and usually sooner with the next publication's commit.
RELEASE_COMMIT_WITHIN = 0.002


class BrokerStats:
    """Counters published under $SYS."""

    __slots__ = (
        "bytes_received_closed",
        "bytes_sent_closed",
        "clients_total_ever",
        "commands",
        "journal_trimmed",
        "messages_dropped",
        "messages_received",
        "messages_sent",
        "publish_denied",
        "publish_received",
        "publish_sent",
    )

    def __init__(self) -> None:
        self.messages_received = 0  # PUBLISH packets accepted from clients
        self.messages_sent = 0  # PUBLISH packets sent to clients
        self.messages_dropped = 0  # deliveries dropped (queue full, slow consumer)
        self.publish_received = 0
        self.publish_sent = 0
        self.clients_total_ever = 0
        self.publish_denied = 0  # PUBLISH packets dropped by the ACL
        self.commands = 0  # MQ command messages executed
        self.journal_trimmed = 0  # journal rows deleted by retention
        self.bytes_received_closed = 0  # bytes of connections that have ended
        self.bytes_sent_closed = 0


def _now_us() -> int:
    return time.time_ns() // 1000


class Broker:
    """An MQTT broker on an event loop (see module docstring)."""

    def __init__(self, config: BrokerConfig, store: Store | None = None) -> None:
        config.validate()
        self.config = config
        self._store = store
        self.loop: asyncio.AbstractEventLoop  # set by start()
        self.connected = 0  # clients past CONNECT
        self.sessions: dict[str, Session] = {}
        self.clients: set[Client] = set()
        self.registry = Registry()
        self.sub_points = {"", *config.sub_points}
        self.command_host = CommandHost(self)
        authorizer = build_authorizer(config)
        # An authorizer with nothing to check (no users, no rules) stays out of the hot path.
        self.authorizer: Authorizer | None = (
            None
            if authorizer.open and not authorizer.has_users and authorizer.allow_anonymous
            else authorizer
        )
        self.retained: dict[str, dict[str, Message]] = {}  # sub point -> topic -> message
        self.stats = BrokerStats()
        self._received_us = 0  # UTC microseconds of the read being handled
        self._event_handlers = self._event_handlers_by_type()
        self._paused_for_store: list[Client] = []  # see pause_for_store
        self.dirty_clients: list[Client] = []
        self._flush_scheduled = False
        self._servers: list[asyncio.Server] = []
        self._executor: ThreadPoolExecutor | None = None
        self.committer: Committer  # set by start()
        self._next_seq = 1
        self._next_message_id = 1
        self._next_delivery_id = 1
        self._journal_on = config.journal.enabled
        self._journal_exclude = list(config.journal.exclude)
        self._journal_cache: dict[str, bool] = {}
        self._started_at = time.monotonic()
        self._sys_task: asyncio.Task[None] | None = None
        self._housekeeping_task: asyncio.Task[None] | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._stopping = False
        self.store_stats = StoreStats()
        self.quarantined = 0
        self.bound_ports: list[int] = []

    # -- lifecycle --------------------------------------------------------

    @property
    def store(self) -> Store:
        assert self._store is not None
        return self._store

    async def start(self) -> None:
        """Open the store, rebuild state from it, and start listening."""
        self.loop = asyncio.get_running_loop()
        config = self.config
        if self._store is None:
            self._store = open_store(
                config.store.kind, config.store.data_dir, SyncMode(config.store.sync)
            )
        state = await self.loop.run_in_executor(None, self.store.load)
        if config.store.kind != "memory":
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="telemq-store")
        self.committer = Committer(
            self.store,
            self.loop,
            self._executor,
            self._store_failed,
            config.store.linger,
            send=self.flush_dirty,
        )
        self._restore(state)
        if self.authorizer is not None:
            for warning in self.authorizer.warnings:
                log.warning("configuration: %s", warning)
        for index, listener in enumerate(config.listeners):
            tls = server_context(listener, f"listeners[{index}]")
            server = await self.loop.create_server(
                self._client_factory(listener),
                listener.host,
                listener.port,
                reuse_address=True,
                backlog=4096,
                ssl=tls,
                # A peer that never completes the handshake is dropped like one that never
                # sends CONNECT.
                ssl_handshake_timeout=config.limits.connect_timeout if tls else None,
            )
            self._servers.append(server)
            # uvloop returns a list where asyncio's stubs say tuple, and the compiled build
            # checks the declared type: read the attribute untyped.
            sockets: Sequence[socket.socket] = cast(Any, server).sockets
            for sock in sockets:
                host, port = sock.getsockname()[:2]
                self.bound_ports.append(port)
                log.info(
                    "listening on %s:%s (MQTT 3.1/3.1.1%s, sub point %r)",
                    host,
                    port,
                    " over TLS" if tls is not None else "",
                    listener.sub_point,
                )
        if config.sys.interval > 0:
            self._sys_task = self.loop.create_task(self._sys_loop())
        self._housekeeping_task = self.loop.create_task(self._housekeeping())
        journal = config.journal
        if journal.enabled and (journal.max_age or journal.max_rows):
            self._retention_task = self.loop.create_task(self._retention_loop())
        self._started_at = time.monotonic()

    def _client_factory(self, listener: ListenerConfig) -> Callable[[], Client]:
        return lambda: Client(self, listener)

    async def stop(self) -> None:
        """Stop listening, close every client, commit what is pending, close the store."""
        if self._stopping:
            return
        self._stopping = True
        for server in self._servers:
            server.close()
        for task in (self._sys_task, self._housekeeping_task, self._retention_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for client in list(self.clients):
            if client.transport is not None:
                client.flush()
                client.transport.close()
        if hasattr(self, "committer"):  # stop() before start() has nothing to commit
            await self.committer.drain()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._store is not None:
            self._store.close()
        log.info("stopped")

    def _store_failed(self, error: BaseException) -> None:
        # Acknowledgements that depended on the failed batch are not sent; closing
        # every client makes them retry on reconnection instead of waiting forever.
        for client in list(self.clients):
            client.close(f"store failure: {error}")

    # -- restart ----------------------------------------------------------

    def _restore(self, state: StoreState) -> None:
        now = self.loop.time()
        max_inflight = self.config.limits.max_inflight
        self._next_seq = state.next_seq
        self._next_message_id = state.next_message_id
        self._next_delivery_id = state.next_delivery_id
        self.quarantined = state.quarantined
        for session_record in state.sessions:
            restored = Session(
                session_record.client_id,
                True,
                max_inflight,
                str(session_record.data.get("sub_point", "")),
            )
            restored.user_id = str(session_record.data.get("user_id", ""))
            self.sessions[session_record.client_id] = restored
        for sub in state.subscriptions:
            try:
                subscription = Subscription.from_data(sub.data)
            except (KeyError, ValueError, TypeError, FilterError) as error:
                log.error("skipping a damaged subscription record of %r: %s", sub.client_id, error)
                self.quarantined += 1
                continue
            if subscription.queue not in self.sessions or self.registry.get(subscription.key):
                continue
            self.registry.add(subscription)
        for retained in state.retained:
            kept = Message(
                retained.topic,
                retained.payload,
                retained.qos,
                True,
                retained.sub_point,
                str(retained.data.get("client_id", "")),
                str(retained.data.get("user_id", "")),
                retained.ts_us,
            )
            kept.expiry_at = float(retained.data.get("expiry_at", 0.0) or 0.0)
            self.retained.setdefault(retained.sub_point, {})[retained.topic] = kept
        messages = {mid: Message.from_stored(stored) for mid, stored in state.messages.items()}
        for record in state.deliveries:
            target = self.sessions.get(record.client_id)
            message = messages.get(record.message_id)
            if target is None or message is None:
                continue
            message.refs += 1
            delivery = Delivery(message, record.qos, record.retain, record.delivery_id)
            if record.state == DeliveryState.QUEUED or record.packet_id == 0:
                target.queue.append(delivery)
            else:
                target.flows.track(
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
                )
        orphans: list[IncomingRecord] = []
        released: list[IncomingRecord] = []
        for incoming in state.incoming:
            if incoming.released:
                released.append(incoming)
                continue
            holder = self.sessions.get(incoming.client_id)
            held = Message.from_stored(incoming.message)
            held.store_id = 0
            if holder is None:
                orphans.append(incoming)
            else:
                holder.flows.hold_incoming(incoming.packet_id, held)
        self._restore_released(released)
        for incoming in orphans:
            # A QoS 2 message acknowledged with PUBREC to a clean session that died
            # with the broker: its publisher will not send PUBREL (its session is
            # gone too), so the message is released now rather than lost, exactly as a
            # PUBREL would have released it (retained, journaled, routed; a command runs).
            held = Message.from_stored(incoming.message)
            held.store_id = 0
            self.committer.pending.delete_incoming(incoming.client_id, incoming.packet_id)
            if held.topic in COMMAND_TOPICS:
                requester = Requester(held.client_id, held.user_id, held.sub_point, 2)
                self._run_command_as(requester, held.topic, held.payload)
            else:
                self._accept(held, hand_off_now=True)
        if orphans:
            self.committer.schedule()
        log.info(
            "restored %d sessions, %d subscriptions, %d retained messages, %d queued "
            "deliveries; next journal seq %d",
            len(self.sessions),
            len(state.subscriptions),
            len(state.retained),
            len(state.deliveries),
            self._next_seq,
        )
        if state.quarantined:
            log.error("the store set aside %d damaged records at load", state.quarantined)

    def _restore_released(self, records: list[IncomingRecord]) -> None:
        """Released QoS 2 ids, oldest first, back into their sessions' flows (a record of a
        session that is gone is deleted: it must never be released again)."""
        for record in sorted(records, key=lambda r: r.message.ts_us):
            holder = self.sessions.get(record.client_id)
            if holder is None:
                self.committer.pending.delete_incoming(record.client_id, record.packet_id)
                self.committer.schedule()
                continue
            stored = record.message
            digest = release_digest(stored.topic.encode("utf-8"), stored.payload, stored.retain)
            self._remember_release(holder, record.packet_id, digest, 0)

    # -- client bookkeeping -------------------------------------------------

    def client_opened(self, client: Client) -> None:
        self.clients.add(client)

    def client_gone(self, client: Client) -> None:
        self.clients.discard(client)
        if client.connection is not None:
            self.stats.bytes_received_closed += client.connection.bytes_received
            self.stats.bytes_sent_closed += client.connection.bytes_sent

    def pause_for_store(self, client: Client) -> None:
        """Stop reading from `client` until the running commit ends (`Committer.backlogged`)."""
        transport = client.transport
        if transport is None or transport.is_closing():
            return
        transport.pause_reading()
        self._paused_for_store.append(client)
        self.committer.on_commit = self._resume_readers

    def _resume_readers(self) -> None:
        self.committer.on_commit = None
        paused = self._paused_for_store
        self._paused_for_store = []
        for client in paused:
            if client.transport is not None and not client.transport.is_closing():
                client.transport.resume_reading()

    def client_writable(self, client: Client) -> None:
        session = client.session
        if session is not None and session.client is client:
            self._pump(session)
            client.flush()

    def schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush_dirty)

    def flush_dirty(self) -> None:
        self._flush_scheduled = False
        dirty = self.dirty_clients
        self.dirty_clients = []
        for client in dirty:
            client.flush()

    # -- events -------------------------------------------------------------

    def handle_events(self, client: Client, events: Iterable[Event]) -> None:
        # One clock reading per read: the packets of one read arrived together.
        self._received_us = time.time_ns() // 1000
        handlers = self._event_handlers
        for event in events:
            handlers[type(event)](client, event)

    def _event_handlers_by_type(self) -> dict[type, Callable[[Client, Any], None]]:
        """Each event type's handler: one lookup per event, not a chain of type tests
        (a QoS 2 message makes four events). Covers the core's whole `Event` union."""
        return {
            MessageReceived: self._on_publish,
            DeliveryAcknowledged: self._on_delivery_done,
            DeliveryReceived: self._on_delivery_received,
            MessageReleased: self._on_release,
            SubscribeRequested: self._on_subscribe,
            UnsubscribeRequested: self._on_unsubscribe,
            ConnectRequested: self._on_connect_requested,
            DisconnectRequested: self._on_disconnect,
            ConnectionClosed: self._on_closed,
        }

    def _on_connect_requested(self, client: Client, event: ConnectRequested) -> None:
        if not self._authenticate_later(client, event):
            self._on_connect(client, event)

    def _on_disconnect(self, client: Client, event: DisconnectRequested) -> None:
        client.will = None

    # -- CONNECT / end of connection ---------------------------------------

    def _authenticate_later(self, client: Client, event: ConnectRequested) -> bool:
        """Check a password off the event loop (a key derivation takes a while).

        The connection buffers whatever follows CONNECT until it is answered; reading
        pauses meanwhile, and resumes with those bytes once the client is accepted.
        """
        authorizer = self.authorizer
        if (
            authorizer is None
            or event.packet.username is None
            or not authorizer.has_users
            or client.listener.use_identity_as_username
        ):
            return False
        if client.transport is not None:
            client.transport.pause_reading()
        packet = event.packet
        future = self.loop.run_in_executor(
            None, authorizer.authenticate, packet.username, packet.password
        )

        def done(result: asyncio.Future[bool]) -> None:
            if client.transport is not None and not client.transport.is_closing():
                client.transport.resume_reading()
            ok = not result.cancelled() and result.exception() is None and result.result()
            if client.connection is None or client.connection.closed:
                return
            if ok:
                self._on_connect(client, event, authenticated=True)
                client.data_received(b"")
            else:
                self._refuse(
                    client,
                    ConnectReturnCode.BAD_USERNAME_OR_PASSWORD,
                    f"bad user name or password for {packet.username!r}",
                )
            client.flush()

        future.add_done_callback(done)
        return True

    def _refuse(self, client: Client, code: ConnectReturnCode, reason: str) -> None:
        connection = client.connection
        assert connection is not None
        closed = connection.refuse(code, reason)
        self._on_closed(client, closed)

    def _on_connect(
        self, client: Client, event: ConnectRequested, authenticated: bool = False
    ) -> None:
        packet = event.packet
        connection = client.connection
        assert connection is not None
        limits = self.config.limits
        if limits.max_connections and self.connected >= limits.max_connections:
            self._refuse(
                client,
                ConnectReturnCode.SERVER_UNAVAILABLE,
                f"connection limit of {limits.max_connections} reached",
            )
            return
        authorizer = self.authorizer
        user_id = packet.username or ""
        if client.listener.use_identity_as_username:
            # The certificate vouches for the user; the password is not asked for.
            if client.certificate_user is None:
                self._refuse(
                    client, ConnectReturnCode.NOT_AUTHORIZED, "no client certificate identity"
                )
                return
            user_id = client.certificate_user
            authenticated = True
        if (
            not authenticated
            and authorizer is not None
            and not authorizer.authenticate(packet.username, packet.password)
        ):
            if packet.username is None:
                self._refuse(client, ConnectReturnCode.NOT_AUTHORIZED, "anonymous access is off")
            else:
                self._refuse(
                    client,
                    ConnectReturnCode.BAD_USERNAME_OR_PASSWORD,
                    f"bad user name or password for {packet.username!r}",
                )
            return
        client_id = packet.client_id or f"telemq-{uuid.uuid4().hex[:16]}"
        client.client_id = client_id
        client.user_id = user_id
        client.will = packet.will
        committer = self.committer
        session = self.sessions.get(client_id)
        if session is not None and session.client is not None and session.client is not client:
            old = session.client
            log.info("client %r taken over by a new connection from %s", client_id, client.peer)
            old.close("session taken over by a new connection with the same client id")
        session = self.sessions.get(client_id)
        present = False
        if packet.clean_session:
            if session is not None:
                self._discard_session(session)
            session = Session(client_id, False, limits.max_inflight, client.listener.sub_point)
            self.sessions[client_id] = session
        elif session is not None and session.persistent:
            present = True
        else:
            if session is not None:
                self._discard_session(session)
            session = Session(client_id, True, limits.max_inflight, client.listener.sub_point)
            session.user_id = client.user_id
            self.sessions[client_id] = session
            committer.pending.put_session(
                SessionRecord(
                    client_id,
                    {
                        "sub_point": session.sub_point,
                        "user_id": session.user_id,
                        "created_us": _now_us(),
                    },
                )
            )
            committer.schedule()
        if present and self.authorizer is not None:
            self._recheck_session(session, client)
        session.client = client
        client.session = session
        self.connected += 1
        self.stats.clients_total_ever += 1
        connection.accept(present, session.flows, self.loop.time())
        log.debug(
            "client %r connected from %s (level %d, clean %s, keepalive %d)",
            client_id,
            client.peer,
            packet.protocol_level,
            packet.clean_session,
            packet.keepalive,
        )
        if session.queue:
            self._pump(session)

    def _recheck_session(self, session: Session, client: Client) -> None:
        """A session resumed by a user other than the owner of its subscriptions: keep only
        what this user may read, so a client id is never a way around the ACL."""
        user = client.user_id
        for subscription in self.registry.of_queue(session.client_id):
            if subscription.owner != user and not self.may(
                "subscribe", subscription.topic, user, client.client_id
            ):
                log.info(
                    "client %r (user %r): subscription to %r removed: not authorized",
                    client.client_id,
                    user,
                    subscription.topic,
                )
                self.registry.remove(subscription)
                self.forget_subscription(subscription)
        # Queued and in-flight messages too, whoever the session belonged to: a queue made
        # by RegSub has no user, and in-flight PUBLISHes are re-sent on resume.
        readable: dict[str, bool] = {}

        def may_read(topic: str) -> bool:
            allowed = readable.get(topic)
            if allowed is None:
                allowed = readable[topic] = self.may("subscribe", topic, user, client.client_id)
            return allowed

        dropped: list[Delivery] = []
        if session.queue:
            kept: deque[Delivery] = deque()
            for delivery in session.queue:
                if may_read(delivery.message.topic):
                    kept.append(delivery)
                else:
                    dropped.append(delivery)
            session.queue = kept
        outbound = session.flows.outbound
        for packet_id, inflight in list(outbound.items()):
            # A QoS 2 message whose PUBREC came is already the client's: PUBREL goes on.
            if inflight.state is InflightState.PUBLISHED and not may_read(
                inflight.topic.decode("utf-8", "replace")
            ):
                del outbound[packet_id]
                if isinstance(inflight.ref, Delivery):
                    dropped.append(inflight.ref)
        for delivery in dropped:
            self.stats.messages_dropped += 1
            if delivery.delivery_id:
                self.committer.pending.delete_delivery(delivery.delivery_id)
                self._release_message_ref(delivery)
        if dropped:
            log.info(
                "client %r (user %r): %d queued or in-flight messages dropped: not authorized",
                client.client_id,
                user,
                len(dropped),
            )
            self.committer.schedule()
        session.user_id = user

    def _discard_session(self, session: Session) -> None:
        """Forget a session entirely (clean session start, or clean session end)."""
        self.registry.remove_queue(session.client_id)
        if session.persistent:
            committer = self.committer
            for delivery in session.queue:
                self._release_message_ref(delivery)
            for inflight in session.flows.outbound.values():
                ref = inflight.ref
                if isinstance(ref, Delivery):
                    self._release_message_ref(ref)
            committer.pending.delete_session(session.client_id)
            committer.schedule()
        elif session.flows.incoming:
            # QoS 2 messages received but never released: a clean session's state
            # ends with it, so they are dropped, as the client drops its side.
            for packet_id in session.flows.incoming:
                self.committer.pending.delete_incoming(session.client_id, packet_id)
            self.committer.schedule()
        session.flows.incoming.clear()
        session.queue.clear()
        session.flows.outbound.clear()
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]

    def _on_closed(self, client: Client, event: ConnectionClosed) -> None:
        session = client.session
        if event.graceful:
            log.debug("client %r disconnected", client.client_id)
        else:
            log.info(
                "closed connection %s (client %r): %s",
                client.peer,
                client.client_id or "-",
                event.reason,
            )
        will = client.will
        client.will = None
        if will is not None and session is not None and not event.graceful:
            self._publish_will(client, will)
        if session is not None:
            self.connected -= 1
            if session.client is client:
                session.client = None
                if not session.persistent:
                    self._discard_session(session)
        client.session = None

    def _publish_will(self, client: Client, will: object) -> None:
        from ..protocol.packets import Will

        assert isinstance(will, Will)
        if not self.may("publish", will.topic, client.user_id, client.client_id):
            self.stats.publish_denied += 1
            log.info("client %r: will to %r denied", client.client_id, will.topic)
            return
        message = Message(
            will.topic,
            will.payload,
            will.qos,
            will.retain,
            client.listener.sub_point,
            client.client_id,
            client.user_id,
            _now_us(),
        )
        self._accept(message, hand_off_now=True)
        self.committer.schedule()

    # -- publications in ----------------------------------------------------

    def _on_publish(self, client: Client, event: MessageReceived) -> None:
        publish = event.publish
        connection = client.connection
        session = client.session
        if session is None or connection is None:
            return
        self.stats.publish_received += 1
        qos = publish.qos
        if publish.topic in COMMAND_TOPICS and qos < 2:
            # QoS 2 commands run on PUBREL, like any QoS 2 publication.
            self._run_command(client, publish.topic, publish.payload, qos)
            if qos == 1:
                packet_id = publish.packet_id
                self.committer.after(lambda: self._send_ack(client, PacketType.PUBACK, packet_id))
            return
        if self.authorizer is not None and not self.may(
            "publish", publish.topic, client.user_id, client.client_id
        ):
            self.stats.publish_denied += 1
            log.info("client %r: publish to %r denied", client.client_id, publish.topic)
            if qos == 1:
                packet_id = publish.packet_id
                self.committer.after(lambda: self._send_ack(client, PacketType.PUBACK, packet_id))
            elif qos == 2:
                packet_id = publish.packet_id
                self.committer.after(lambda: self._send_ack(client, PacketType.PUBREC, packet_id))
            return
        if qos == 2:
            packet_id = publish.packet_id
            if not event.duplicate:
                message = self._message_from(client, publish)
                session.flows.hold_incoming(packet_id, message)
                self.committer.pending.put_incoming(
                    IncomingRecord(session.client_id, packet_id, message.to_stored())
                )
            self.committer.after(lambda: self._send_ack(client, PacketType.PUBREC, packet_id))
            return
        message = self._message_from(client, publish)
        self._accept(message, hand_off_now=True)
        if qos == 1:
            packet_id = publish.packet_id
            self.committer.after(lambda: self._send_ack(client, PacketType.PUBACK, packet_id))
        elif self.committer.pending:
            self.committer.schedule_lazy()  # nothing waits for a QoS 0 journal row

    def _on_release(self, client: Client, event: MessageReleased) -> None:
        session = client.session
        if session is None:
            return
        packet_id = event.packet_id
        message = event.message
        committer = self.committer
        if not isinstance(message, Message):
            # Nothing held under this id (released before, or never received): PUBCOMP.
            committer.after(lambda: self._send_ack(client, PacketType.PUBCOMP, packet_id))
            return
        self._record_release(session, packet_id, message)
        if message.topic in COMMAND_TOPICS:
            self._run_command(client, message.topic, message.payload, 2)
            committer.after(lambda: self._send_ack(client, PacketType.PUBCOMP, packet_id))
        else:
            hand_offs = self._accept(message, hand_off_now=False)
            # The release is durable once this commit ends. Until then a crash leaves the
            # stored message unreleased, and it is released again (at restart for a clean
            # publisher, on the PUBREL it re-sends for a persistent one): a persistent
            # subscriber must not have had it yet, or it would get it twice. A clean one
            # may: its session ends with the crash. Likewise only a persistent publisher
            # must wait for PUBCOMP: a clean one's held message is released at restart.
            waiting: list[tuple[Session, Delivery]] = []
            for target, delivery in hand_offs:
                if target.persistent:
                    waiting.append((target, delivery))
                else:
                    self._hand_off(target, delivery)
            if session.persistent:

                def after_commit() -> None:
                    self._hand_off_all(waiting)
                    self._send_ack(client, PacketType.PUBCOMP, packet_id)

                committer.after(after_commit)
            else:
                self._send_ack(client, PacketType.PUBCOMP, packet_id)
                if waiting:
                    committer.after(lambda: self._hand_off_all(waiting))
                else:
                    committer.schedule_lazy(RELEASE_COMMIT_WITHIN)

    def _record_release(self, session: Session, packet_id: int, message: Message) -> None:
        """The held message leaves the store in the release's commit. A persistent session
        keeps its id, marked released, instead: the client may lose the PUBCOMP with its
        connection, and re-send the PUBLISH rather than the PUBREL (`Flows.released`)."""
        pending = self.committer.pending
        if not session.persistent:
            pending.delete_incoming(session.client_id, packet_id)
            return
        pending.release_incoming(session.client_id, packet_id)
        digest = release_digest(message.topic_bytes, message.payload, message.retain)
        self._remember_release(session, packet_id, digest, session.flows.connection_number)

    def _remember_release(
        self, session: Session, packet_id: int, digest: int, connection_number: int
    ) -> None:
        """Into the session's released ids; the one that makes room leaves the store too."""
        forgotten = session.flows.remember_released(packet_id, digest, connection_number)
        if forgotten:
            self.committer.pending.delete_incoming(session.client_id, forgotten)
            self.committer.schedule()

    def _run_command(self, client: Client, queue_topic: str, payload: bytes, qos: int) -> None:
        requester = Requester(client.client_id, client.user_id, client.listener.sub_point, qos)
        self._run_command_as(requester, queue_topic, payload)

    def _run_command_as(self, requester: Requester, queue_topic: str, payload: bytes) -> None:
        """Execute an MQ command; its reply is published once its effects are durable."""
        self.stats.commands += 1
        reply, command = run_command(self, self.command_host, queue_topic, payload, requester)
        if not wants_reply(reply, command):
            return
        client_id = requester.client_id
        topic = reply_topic(command, client_id)
        if topic != RESPONSE_PREFIX + client_id and not self.may(
            "publish", topic, requester.user_id, client_id
        ):
            # The requester chooses the reply topic: it must not be a way to write anywhere.
            log.info("client %r: no reply to %r: not authorized", client_id, topic)
            return
        body = reply_payload(reply, command, payload)
        sub_point = requester.sub_point
        qos = requester.qos
        self.committer.after(
            lambda: self.publish(topic, body, qos, False, sub_point, journal=False)
        )
        self.committer.schedule()

    def may(self, action: str, topic: str, user: str, client_id: str) -> bool:
        """Authorization (always True without an authorizer)."""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        return authorizer.allowed(Action(action), topic, user=user or None, client_id=client_id)

    def ensure_queue(self, queue: str) -> None:
        """An MQ queue = a session: RegSub for a queue with no session creates a durable one."""
        if queue in self.sessions:
            return
        session = Session(queue, True, self.config.limits.max_inflight)
        self.sessions[queue] = session
        self.committer.pending.put_session(
            SessionRecord(queue, {"sub_point": "", "user_id": "", "created_us": _now_us()})
        )
        self.committer.schedule()

    def publish_as(
        self,
        requester: Requester,
        topic: str,
        body: bytes,
        retain: bool,
        exclude_queue: str | None,
        expiry: float | None = None,
    ) -> None:
        """A Publish command's publication, routed like the requester's own PUBLISH.

        `expiry` (seconds, from <mqmd><Expiry>) bounds the life of its retained copy.
        """
        message = _message_of(requester, topic, body, requester.qos, retain)
        if expiry is not None:
            message.expiry_at = time.time() + expiry
        self.stats.messages_received += 1
        self._accept(message, hand_off_now=True, exclude_queue=exclude_queue)
        self.committer.schedule()

    def put_to_queue(
        self, requester: Requester, queue: str, topic: str, body: bytes, qos: int
    ) -> PutResult:
        """Put one message on one queue only (a backfill): not retained, journaled or routed.

        QoS 0 goes out only while the queue's client is connected and reading (else
        NOT_CONNECTED, or FULL for a client that does not read); QoS 1/2 wait in the queue
        (in the store when the session is persistent) like any routed delivery.
        """
        session = self.sessions.get(queue)
        if session is None:
            return PutResult.NO_QUEUE
        message = _message_of(requester, topic, body, qos, False)
        if qos == 0:
            client = session.client
            if client is None:
                return PutResult.NOT_CONNECTED
            return PutResult.PUT if self._send_qos0(client, message, False) else PutResult.FULL
        if self._enqueue(session, message, qos, False, session.persistent) is None:
            return PutResult.FULL
        self._pump(session)
        self.committer.schedule()
        return PutResult.PUT

    def _send_ack(self, client: Client, packet_type: PacketType, packet_id: int) -> None:
        connection = client.connection
        if connection is not None and not connection.closed:
            connection.acknowledge(packet_type, packet_id)
            client.mark_dirty()

    def _message_from(self, client: Client, publish: Publish) -> Message:
        """The accepted publication of a PUBLISH being handled (by `handle_events`)."""
        self.stats.messages_received += 1
        return Message(
            publish.topic,
            publish.payload,
            publish.qos,
            publish.retain,
            client.listener.sub_point,
            client.client_id,
            client.user_id,
            self._received_us,
            frame_qos0=publish.frame,
        )

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        sub_point: str = "",
        journal: bool = True,
    ) -> None:
        """Publish from inside the broker ($SYS, command replies), routed like any message."""
        message = Message(topic, payload, qos, retain, sub_point, "", "", _now_us())
        self._accept(message, hand_off_now=True, journal=journal)
        if self.committer.pending:
            self.committer.schedule_lazy()

    def _accept(
        self,
        message: Message,
        hand_off_now: bool,
        journal: bool = True,
        exclude_queue: str | None = None,
    ) -> list[tuple[Session, Delivery]]:
        """Retain, journal and route an accepted publication (see module docstring)."""
        committer = self.committer
        if message.retain:
            self._update_retained(message)
        if journal and self._journal_on:
            journaled = self._journal_cache.get(message.topic)
            if journaled is None:
                journaled = self._journaled(message.topic)
            if journaled:
                seq = self._next_seq
                self._next_seq = seq + 1
                # WriteBatch.append_journal_row, inlined: once per publication.
                committer.pending.journal += (
                    seq,
                    message.ts_us,
                    message.topic,
                    message.sub_point,
                    message.qos,
                    1 if message.retain else 0,
                    bytearray(message.payload),  # see JournalRow
                    message.client_id,
                    message.user_id,
                )
        return self._route(message, hand_off_now, exclude_queue)

    def _journaled(self, topic: str) -> bool:
        cached = self._journal_cache.get(topic)
        if cached is None:
            cached = not any(topic_matches(f, topic) for f in self._journal_exclude)
            if len(self._journal_cache) > 16384:
                self._journal_cache.clear()
            self._journal_cache[topic] = cached
        return cached

    def _update_retained(self, message: Message) -> None:
        committer = self.committer
        retained = self.retained.setdefault(message.sub_point, {})
        if not message.payload:
            if retained.pop(message.topic, None) is not None and not message.topic.startswith(
                "$SYS/"
            ):
                committer.pending.delete_retained(message.sub_point, message.topic)
            return
        retained[message.topic] = message
        if not message.topic.startswith("$SYS/"):
            committer.pending.put_retained(
                RetainedRecord(
                    message.sub_point,
                    message.topic,
                    message.payload,
                    message.qos,
                    message.ts_us,
                    {
                        "client_id": message.client_id,
                        "user_id": message.user_id,
                        "expiry_at": message.expiry_at,
                    },
                )
            )

    def _route(
        self, message: Message, hand_off_now: bool, exclude_queue: str | None = None
    ) -> list[tuple[Session, Delivery]]:
        """Deliver to every matching queue once, at its highest matching QoS."""
        route = self.registry.route(message.sub_point, message.topic)
        if route is None:
            return []
        msg_qos = message.qos
        # queue -> (highest granted QoS, persistence rank); capped to the message's QoS below.
        targets: dict[str, tuple[int, int]] = route.plain
        if route.filtered:
            targets = dict(targets)
            view = FilterMessage.prepared(
                message.payload,
                {  # already what filters see: str, bool and float values
                    "Topic": message.topic,
                    "QoS": float(msg_qos),
                    "Retain": bool(message.retain),
                    "ClientId": message.client_id,
                    "UserId": message.user_id,
                    "SubPoint": message.sub_point,
                },
            )
            filtered = route.filtered
            if route.filter_set is not None:
                for position in route.filter_set.matching_message(view):
                    subscription = filtered[position]
                    _merge_target(targets, subscription.queue, subscription, msg_qos)
            else:
                for subscription in filtered:
                    compiled = subscription.compiled
                    if compiled is not None and compiled.evaluate_message(view) is True:
                        _merge_target(targets, subscription.queue, subscription, msg_qos)
        if not targets:
            return []
        sessions = self.sessions
        later: list[tuple[Session, Delivery]] = []
        for queue, (granted, rank) in targets.items():
            if queue == exclude_queue:
                continue
            qos = granted if granted < msg_qos else msg_qos
            session = sessions.get(queue)
            if session is None:
                continue
            durable = session.persistent and _durable(rank, qos)
            if durable and qos == 0:
                qos = 1  # Pers / PersAsQueue: kept until acknowledged
            if qos == 0:
                client = session.client
                if client is None:
                    continue  # QoS 0 is not queued for offline sessions (as Mosquitto)
                if hand_off_now:
                    self._send_qos0(client, message, False)
                else:
                    later.append((session, Delivery(message, 0, False)))
                continue
            delivery = self._enqueue(session, message, qos, False, durable)
            if delivery is None:
                continue
            if hand_off_now:
                self._pump(session)
            else:
                later.append((session, delivery))
        return later

    def _send_qos0(self, client: Client, message: Message, retain: bool) -> bool:
        """Send a QoS 0 copy; False when it is dropped (the client is not reading)."""
        if not client.writable:
            self.stats.messages_dropped += 1
            return False
        connection = client.connection
        if connection is None:
            return False
        connection.send_bytes(message.frame_qos0(retain))  # a no-op once closed
        self.stats.messages_sent += 1
        client.mark_dirty()
        return True

    def _enqueue(
        self, session: Session, message: Message, qos: int, retain: bool, durable: bool
    ) -> Delivery | None:
        """Queue a QoS 1/2 delivery (in the store when durable); the caller pumps."""
        limit = self.config.limits.max_queued_messages
        if limit and len(session.queue) >= limit:
            session.dropped += 1
            self.stats.messages_dropped += 1
            return None
        delivery = Delivery(message, qos, retain)
        if durable:
            committer = self.committer
            if message.store_id == 0:
                message.store_id = self._next_message_id
                self._next_message_id += 1
                committer.pending.put_message(message.to_stored())
            message.refs += 1
            delivery.delivery_id = self._next_delivery_id
            self._next_delivery_id += 1
            committer.pending.put_delivery(
                DeliveryRecord(
                    delivery.delivery_id,
                    session.client_id,
                    message.store_id,
                    qos,
                    DeliveryState.QUEUED,
                    0,
                    retain,
                )
            )
        session.queue.append(delivery)
        return delivery

    def _hand_off_all(self, hand_offs: list[tuple[Session, Delivery]]) -> None:
        for session, delivery in hand_offs:
            self._hand_off(session, delivery)

    def _hand_off(self, session: Session, delivery: Delivery) -> None:
        """Post-commit hand-off of a deferred delivery."""
        if delivery.qos == 0:
            if session.client is not None:
                self._send_qos0(session.client, delivery.message, delivery.retain)
            return
        self._pump(session)

    def _pump(self, session: Session) -> None:
        """Send queued deliveries while the client is connected and the window allows."""
        client = session.client
        queue = session.queue
        if client is None or not queue or not client.writable:
            return
        connection = client.connection
        if connection is None or connection.closed:
            return
        flows = session.flows
        now = self.loop.time()
        committer = self.committer
        sent = 0
        wrote = False
        while queue and flows.has_window():
            delivery = queue.popleft()
            message = delivery.message
            # A durable QoS 2 delivery goes out only once its packet id is committed:
            # after a crash it must come back with that id and DUP=1, or the
            # subscriber could take it for a new message [MQTT-4.3.3].
            deferred = delivery.qos == 2 and bool(delivery.delivery_id)
            try:
                packet_id = connection.deliver(
                    message.topic_bytes,
                    message.payload,
                    delivery.qos,
                    delivery.retain,
                    delivery,
                    now,
                    send=not deferred,
                )
            except PacketIdsExhausted:
                queue.appendleft(delivery)
                break
            sent += 1
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
                    )
                )
            if deferred:
                committer.after(self._send_publish_later(client, connection, packet_id))
        if sent:
            self.stats.messages_sent += sent
            client.mark_dirty()
            if wrote:
                committer.schedule()

    def _send_publish_later(
        self, client: Client, connection: Connection, packet_id: int
    ) -> Callable[[], None]:
        def send() -> None:
            if connection.closed or client.connection is not connection:
                return  # re-sent with DUP=1 when the session reconnects
            frame = connection.publish_bytes(packet_id)
            if frame is not None:
                connection.send_bytes(frame)
                client.mark_dirty()

        return send

    # -- acknowledgements from subscribers ---------------------------------

    def _on_delivery_done(self, client: Client, event: DeliveryAcknowledged) -> None:
        ref = event.ref
        if isinstance(ref, Delivery) and ref.delivery_id:
            self.committer.pending.delete_delivery(ref.delivery_id)
            self._release_message_ref(ref)
            self.committer.schedule()
        session = client.session
        if session is not None and session.queue:
            self._pump(session)

    def _on_delivery_received(self, client: Client, event: DeliveryReceived) -> None:
        ref = event.ref
        session = client.session
        packet_id = event.packet_id
        if not (isinstance(ref, Delivery) and ref.delivery_id and session is not None):
            self._send_ack(client, PacketType.PUBREL, packet_id)
            return
        self.committer.pending.put_delivery(
            DeliveryRecord(
                ref.delivery_id,
                session.client_id,
                ref.message.store_id,
                ref.qos,
                DeliveryState.RELEASED,
                packet_id,
                ref.retain,
            )
        )
        self.committer.after(lambda: self._send_ack(client, PacketType.PUBREL, packet_id))

    def _release_message_ref(self, delivery: Delivery) -> None:
        message = delivery.message
        if not delivery.delivery_id or not message.store_id:
            return
        message.refs -= 1
        if message.refs <= 0:
            self.committer.pending.delete_message(message.store_id)
            message.store_id = 0
            message.refs = 0

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------

    def _on_subscribe(self, client: Client, event: SubscribeRequested) -> None:
        session = client.session
        connection = client.connection
        if session is None or connection is None:
            return
        packet = event.packet
        codes: list[int] = []
        accepted: list[Subscription] = []
        registry = self.registry
        identity = Identity(self.config.name, session.client_id, "")
        for topic_filter, qos in packet.topics:
            problem = topic_filter_error(topic_filter)
            if problem is None and not self.may(
                "subscribe", topic_filter, client.user_id, client.client_id
            ):
                problem = "not authorized"
            if problem:
                log.info("client %r: refused subscription: %s", session.client_id, problem)
                if connection.protocol_level >= ProtocolLevel.MQTT_3_1_1:
                    codes.append(SUBACK_FAILURE)
                else:
                    # MQTT 3.1 has no failure code: grant, and deliver nothing.
                    codes.append(qos)
                continue
            key = (identity, topic_filter, session.sub_point, "")
            subscription = registry.get(key)
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
                )
                registry.add(subscription)
            else:
                subscription.qos = qos  # an identical filter replaces [MQTT-3.8.4-3]
                registry.changed(subscription)
            self.save_subscription(subscription)
            codes.append(qos)
            accepted.append(subscription)
        packet_id = packet.packet_id

        def acknowledge() -> None:
            if connection.closed or client.session is not session:
                return
            connection.send(SubAck(packet_id, codes))
            client.mark_dirty()

        # The retained messages are taken and queued now, before any later publication can
        # be routed to the new subscriptions: a live message never overtakes the retained one
        # it replaced, nor arrives twice [MQTT-4.6.0-5], and a persistent session keeps them
        # if the client goes before the SUBACK [MQTT-3.3.1-6]. A clean session's SUBACK goes
        # first, as Mosquitto's does; a persistent session's waits until its subscriptions
        # are durable, and the retained messages may precede it (the server may send
        # matching PUBLISH packets before the SUBACK, MQTT 3.1.1 section 3.8.4).
        if session.persistent:
            for subscription in accepted:
                self.send_retained(subscription)
            self.committer.after(acknowledge)
        else:
            acknowledge()
            for subscription in accepted:
                self.send_retained(subscription)

    def save_subscription(self, subscription: Subscription) -> None:
        session = self.sessions.get(subscription.queue)
        if session is not None and session.persistent:
            self.committer.pending.put_subscription(
                SubscriptionRecord(subscription.queue, str(subscription.id), subscription.to_data())
            )
            self.committer.schedule()

    def forget_subscription(self, subscription: Subscription) -> None:
        session = self.sessions.get(subscription.queue)
        if session is not None and session.persistent:
            self.committer.pending.delete_subscription(subscription.queue, str(subscription.id))
            self.committer.schedule()

    def matching_retained(self, sub_point: str, topic_filter: str) -> list[Message]:
        """The retained messages of `sub_point` on the topics `topic_filter` matches."""
        retained = self.retained.get(sub_point)
        if not retained:
            return []
        if "+" in topic_filter or "#" in topic_filter:
            return [m for t, m in retained.items() if topic_matches(topic_filter, t)]
        exact = retained.get(topic_filter)
        return [exact] if exact is not None else []

    def send_retained(self, subscription: Subscription) -> int:
        """Send the retained messages matching the subscription (its topic and filter) to
        its queue; returns how many."""
        messages = self.matching_retained(subscription.sub_point, subscription.topic)
        session = self.sessions.get(subscription.queue)
        if not messages or session is None:
            return 0
        compiled = subscription.compiled
        # MQTT always marks retained copies; MQ only for InformIfRet (IsRetainedPub).
        mark = subscription.mqtt or "InformIfRet" in subscription.options
        rank = PERSISTENCE_RANK[subscription.persistence]
        sent = 0
        for message in messages:
            if (
                compiled is not None
                and compiled.evaluate(
                    message.payload,
                    {
                        "Topic": message.topic,
                        "QoS": message.qos,
                        "Retain": True,
                        "ClientId": message.client_id,
                        "UserId": message.user_id,
                        "SubPoint": message.sub_point,
                    },
                )
                is not True
            ):
                continue
            qos = min(message.qos, subscription.qos)
            durable = session.persistent and _durable(rank, qos)
            if durable and qos == 0:
                qos = 1
            sent += 1
            if qos == 0:
                if session.client is not None:
                    self._send_qos0(session.client, message, mark)
            else:
                self._enqueue(session, message, qos, mark, durable)
        if session.queue:
            self._pump(session)
        return sent

    def _on_unsubscribe(self, client: Client, event: UnsubscribeRequested) -> None:
        session = client.session
        connection = client.connection
        if session is None or connection is None:
            return
        identity = Identity(self.config.name, session.client_id, "")
        for topic_filter in event.packet.topics:
            subscription = self.registry.get((identity, topic_filter, session.sub_point, ""))
            if subscription is not None:
                self.registry.remove(subscription)
                self.forget_subscription(subscription)
        packet_id = event.packet.packet_id

        def answer() -> None:
            if not connection.closed:
                connection.send(UnsubAck(packet_id))
                client.mark_dirty()

        self.committer.after(answer)

    # -- housekeeping ---------------------------------------------------------

    async def _housekeeping(self) -> None:
        """Once a second: remove expired subscriptions (RegSub <mqmd><Expiry>)."""
        while True:
            await asyncio.sleep(1.0)
            try:
                now = time.time()
                self.expire_subscriptions(now)
                self.expire_retained(now)
            except Exception:
                log.exception("housekeeping failed")

    async def _retention_loop(self) -> None:
        interval = self.config.journal.retention_interval
        while True:
            await asyncio.sleep(interval)
            try:
                await self.apply_journal_retention()
            except Exception:
                log.exception("journal retention failed")

    async def apply_journal_retention(self) -> int:
        """Trim the journal to `max_rows` and `max_age`, but never past what a running
        pipeline query has committed (its record under `<data_dir>/pipeline-commits`).

        Runs on the store's thread, after any commit in progress, so it never races one.
        """
        journal = self.config.journal
        store = self.store
        data_dir = self.config.store.data_dir

        def trim() -> int:
            before = 0  # delete seq < before
            if journal.max_rows:
                before = self._next_seq - journal.max_rows
            if journal.max_age:
                since = store.journal_seq_since(_now_us() - int(journal.max_age * 1e6))
                before = max(before, self._next_seq if since is None else since)
            floor = consumers.retention_floor(data_dir)
            if floor is not None:
                before = min(before, floor + 1)  # floor: the largest seq all have processed
            return store.trim_journal(before) if before > 1 else 0

        if self._executor is not None:
            trimmed = await self.loop.run_in_executor(self._executor, trim)
        else:
            trimmed = trim()
        if trimmed:
            self.stats.journal_trimmed += trimmed
            log.info("journal retention: %d rows deleted", trimmed)
        return trimmed

    def expire_retained(self, now: float) -> int:
        """Drop retained publications whose MQ expiry has passed."""
        count = 0
        for sub_point, retained in self.retained.items():
            doomed = [
                topic
                for topic, message in retained.items()
                if message.expiry_at and message.expiry_at <= now
            ]
            for topic in doomed:
                del retained[topic]
                self.committer.pending.delete_retained(sub_point, topic)
            count += len(doomed)
        if count:
            self.committer.schedule()
        return count

    def expire_subscriptions(self, now: float) -> int:
        expired = self.registry.expired(now)
        for subscription in expired:
            self.registry.remove(subscription)
            self.forget_subscription(subscription)
            log.info(
                "subscription %r of queue %r on %r expired",
                subscription.name or subscription.id,
                subscription.queue,
                subscription.topic,
            )
        return len(expired)

    # -- $SYS ---------------------------------------------------------------

    async def _sys_loop(self) -> None:
        interval = self.config.sys.interval
        while True:
            try:
                await self.publish_sys()
            except Exception:
                log.exception("$SYS update failed")
            await asyncio.sleep(interval)

    async def publish_sys(self) -> None:
        if self._executor is not None:
            self.store_stats = await self.loop.run_in_executor(self._executor, self.store.stats)
        else:
            self.store_stats = self.store.stats()
        for topic, value in self.sys_values().items():
            self.publish(topic, value.encode("utf-8"), 0, True)

    def sys_values(self) -> dict[str, str]:
        stats = self.stats
        connected = self.connected
        subscriptions = len(self.registry)
        retained = sum(
            1
            for point in self.retained.values()
            for topic in point
            if not topic.startswith("$SYS/")
        )
        bytes_received = stats.bytes_received_closed + sum(
            c.connection.bytes_received for c in self.clients if c.connection is not None
        )
        bytes_sent = stats.bytes_sent_closed + sum(
            c.connection.bytes_sent for c in self.clients if c.connection is not None
        )
        prefix = "$SYS/broker/"
        values = {
            "version": f"telemq {__version__}",
            "uptime": f"{int(time.monotonic() - self._started_at)} seconds",
            "clients/connected": str(connected),
            "clients/total": str(len(self.sessions)),
            "clients/maximum": str(self.config.limits.max_connections),
            "messages/received": str(stats.messages_received),
            "messages/sent": str(stats.messages_sent),
            "messages/dropped": str(stats.messages_dropped),
            "publish/messages/received": str(stats.publish_received),
            "publish/messages/denied": str(stats.publish_denied),
            "commands/received": str(stats.commands),
            "bytes/received": str(bytes_received),
            "bytes/sent": str(bytes_sent),
            "subscriptions/count": str(subscriptions),
            "retained messages/count": str(retained),
            "store/bytes": str(self.store_stats.bytes_on_disk),
            "store/quarantined": str(max(self.quarantined, self.store_stats.quarantined)),
            "journal/rows": str(self.store_stats.journal_rows),
            "journal/last_seq": str(self._next_seq - 1),
            "journal/trimmed": str(stats.journal_trimmed),
        }
        return {prefix + key: value for key, value in values.items()}


def _message_of(requester: Requester, topic: str, body: bytes, qos: int, retain: bool) -> Message:
    """A publication made by an MQ command on behalf of its requester."""
    return Message(
        topic,
        body,
        qos,
        retain,
        requester.sub_point,
        requester.client_id,
        requester.user_id,
        _now_us(),
    )


def _merge_target(
    targets: dict[str, tuple[int, int]], queue: str, subscription: Subscription, msg_qos: int
) -> None:
    """One copy per queue: the highest QoS and the most durable persistence win."""
    qos = subscription.qos if subscription.qos < msg_qos else msg_qos
    rank = PERSISTENCE_RANK[subscription.persistence]
    current = targets.get(queue)
    if current is None:
        targets[queue] = (qos, rank)
    else:
        targets[queue] = (max(current[0], qos), max(current[1], rank))


def _durable(rank: int, qos: int) -> bool:
    """Design §5: Pers and PersAsQueue (on a durable session) always; PersAsPub at QoS >= 1."""
    return rank >= 2 or (rank == 1 and qos >= 1)


async def run_broker(
    config: BrokerConfig,
    stop_event: asyncio.Event,
    on_started: Callable[[Broker], None] | None = None,
) -> None:
    """Run a broker until `stop_event` is set, then shut it down cleanly."""
    broker = Broker(config)
    await broker.start()
    if on_started is not None:
        on_started(broker)
    try:
        await stop_event.wait()
    finally:
        await broker.stop()
