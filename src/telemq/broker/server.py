"""The broker: its rooms wired together, started, restored and stopped.

Theory of operation
-------------------
All broker state lives in memory, owned by the event-loop thread; the store is its durable
mirror, written through the `Committer` (group commit: acknowledgements after the commit
that makes them true). The state is split into rooms, each the only code that changes
what it owns (docs/architecture.md has the map):

- core/: `Admission` (whether a CONNECT is accepted, and as whom), `Sessions` (sessions
  and connections: takeover, session expiry), `Wills`,
  `Router` (publications in: retained, journaled, routed; QoS 2 releases), `Shares`,
  `Deliveries` (queues, the in-flight window, subscribers' acks), `SubscriptionManager`,
  `RetainedMessages`, `BrokerStats`, `SparkplugAwareness` (the births of Sparkplug edge
  nodes kept as certificates), and the `ClientHub` every connection shares;
- peers/: `Links` and `Bridges`, given the core's rooms (`CoreRooms`);
- operations/: `BrokerView` and what renders it (`SysReporter`, /metrics, the admin API),
  `Housekeeping`, and the `CommandHost` of the MQ commands.

`Broker` builds the rooms when it starts (they need the loop and the committer), replays
the store into them (core/restore.py), opens its listeners (edges/listeners.py) and gives
the hub the handler of each event of the protocol core. Its public methods are the
embedding API (docs/architecture.md, "Embedding"); hooks (security/hooks.py) decide
authentication and authorization and hear what happens. Only this module, web.py and
embedded.py see `Broker`: every room receives what it uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..protocol import (
    AuthRequested,
    ConnectAcknowledged,
    ConnectionClosed,
    ConnectRequested,
    DeliveryAcknowledged,
    DeliveryReceived,
    DisconnectRequested,
    MessageReceived,
    MessageReleased,
    SubscribeAcknowledged,
    SubscribeRequested,
    TopicLimits,
    UnsubscribeAcknowledged,
    UnsubscribeRequested,
)
from ..store import Store, SyncMode, open_store
from ..subscriptions import Identity, Registry, Subscription
from .core.admission import Admission
from .core.committer import Committer
from .core.delivery import Deliveries
from .core.message import Message
from .core.restore import restore_state
from .core.retained import RetainedMessages
from .core.rooms import CoreRooms
from .core.router import Router
from .core.session import Client, ClientHub, EventHandlers, Session, as_protocol
from .core.sessions import ClientTable, Sessions
from .core.sparkplug import MISSING as SPARKPLUG_MISSING
from .core.sparkplug import SparkplugAwareness
from .core.stats import BrokerStats, PeerCounters
from .core.subscribe import SubscriptionManager
from .core.wills import Wills
from .edges.listeners import Listener, TcpListener
from .embedded import CallbackTarget, LocalSubscription, Received
from .operations.housekeeping import Housekeeping
from .operations.leadership import Leadership
from .operations.mq import CommandHost
from .operations.sys import SysReporter
from .operations.view import BrokerView
from .peers.bridges import Bridges
from .peers.links import Links
from .security.acl import Action
from .security.hooks import Hook, Hooks, acl_hook
from .settings.config import BrokerConfig, ListenerConfig, build_authorizer

if TYPE_CHECKING:
    from .edges.http import HttpServer

log = logging.getLogger("telemq.broker")


class Broker:
    """An MQTT broker on an event loop (see module docstring).

    `hooks` come after the configuration's users and ACL (`hooks.AclHook`); `listeners`,
    when given, replace the configuration's TCP listeners (an embedded broker may have none
    but a `MemoryListener`); `leadership`, the broker's role in its group when it runs with
    `[ha]` (ha.py, which hears through it that the store lost the leadership).
    """

    def __init__(
        self,
        config: BrokerConfig,
        store: Store | None = None,
        hooks: Sequence[Hook] = (),
        listeners: Sequence[Listener] | None = None,
        leadership: Leadership | None = None,
    ) -> None:
        config.validate()
        self.config = config
        self._store = store
        self.leadership = leadership if leadership is not None else Leadership(config.name)
        authorizer = build_authorizer(config)
        for warning in authorizer.warnings:
            log.warning("configuration: %s", warning)
        default = acl_hook(authorizer, config.mqtt5.scram_sha_256)
        self.hooks = Hooks(([default] if default is not None else []) + list(hooks))
        self.registry = Registry(config.limits.max_topic_cache_bytes, config.limits.max_filter_time)
        self.sub_points = {"", *config.sub_points}
        self.topic_limits = TopicLimits(
            config.limits.max_topic_levels, config.limits.max_topic_length
        )
        self.stats = BrokerStats()
        # The Sparkplug Aware MQTT Server (docs/sparkplug.md); None: [sparkplug] aware = false.
        self.sparkplug: SparkplugAwareness | None = None
        if config.sparkplug.aware and SPARKPLUG_MISSING:
            log.warning("Sparkplug awareness is off: %s", SPARKPLUG_MISSING)
        elif config.sparkplug.aware:
            self.sparkplug = SparkplugAwareness(self.stats)
        # What MQTT 5.0 connections are told and held to; None: 5.0 is off.
        self.limits5 = config.mqtt5.server_limits(config.limits.max_packet_size)
        self.command_host = CommandHost(config.name, self.topic_limits, config.limits)
        if listeners is None:
            listeners = [
                TcpListener(listener, f"listeners[{index}]", config.limits.connect_timeout)
                for index, listener in enumerate(config.listeners)
            ]
        self.listeners: list[Listener] = list(listeners)
        self.loop: asyncio.AbstractEventLoop  # the rooms below are set by start()
        self.committer: Committer
        self.sessions_room: Sessions
        self.admission: Admission
        self.deliveries: Deliveries
        self.retained: RetainedMessages
        self.router: Router
        self.subscriptions: SubscriptionManager
        self.wills: Wills
        self.housekeeping: Housekeeping
        self.sys: SysReporter
        self.view: BrokerView  # what $SYS, /metrics and /api/v1 read
        self.links: Links
        self.bridges: Bridges
        self.hub: ClientHub  # what every client shares (core/session.py)
        self._executor: ThreadPoolExecutor | None = None
        self._sys_task: asyncio.Task[None] | None = None
        self._started = False
        self._stopping = False
        self.quarantined = 0
        self.bound_ports: list[int] = []
        self.store_failed = asyncio.Event()  # a commit failed (recovery.py starts again)
        # Called at once when a commit failed, before anything else is committed.
        self.on_store_failure: Callable[[BaseException], None] | None = None
        self.http: HttpServer | None = None  # the [[http]] listeners, when configured

    # -- lifecycle --------------------------------------------------------

    @property
    def store(self) -> Store:
        assert self._store is not None
        return self._store

    @property
    def store_executor(self) -> ThreadPoolExecutor | None:
        """The store's own thread (None for the memory store, which commits inline)."""
        return self._executor

    @property
    def sessions(self) -> dict[str, Session]:
        """Client id -> session (read only: the `Sessions` room owns it)."""
        return self.sessions_room.by_id

    @property
    def clients(self) -> ClientTable:
        """The open connections (read only)."""
        return self.sessions_room.clients

    async def start(self) -> None:
        """Open the store, rebuild state from it, and start listening."""
        self.loop = asyncio.get_running_loop()
        config = self.config
        if self._store is None:
            self._store = open_store(
                config.store.kind,
                config.store.data_dir,
                SyncMode(config.store.sync),
                config.name,
                postgres=config.store.postgres(),
            )
        state = await self.loop.run_in_executor(None, self.store.load)
        if config.store.kind != "memory":
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="telemq-store")
        self.hub = ClientHub(self.loop, config.limits, self.limits5)
        self.committer = Committer(
            self.store,
            self.loop,
            self._executor,
            self._store_failed,
            config.store.linger,
            send=self.hub.flush_dirty,
        )
        self._wire()
        self.quarantined = restore_state(
            state,
            self.loop.time(),
            config.limits,
            self.sessions_room,
            self.registry,
            self.retained,
            self.deliveries,
            self.router,
            self.committer,
            self.topic_limits,
        )
        self._started = True
        if config.http:
            from .web import http_server  # aiohttp only for a broker that serves HTTP

            self.http = http_server(self.view, self, self.hub, self.hooks)
            await self.http.start()
        for listener in self.listeners:
            await listener.start(self._client_factory(listener.config))
            self.bound_ports.extend(listener.ports)
        self.bridges.start()
        self.links.start()
        if config.sys.interval > 0:
            self._sys_task = self.loop.create_task(self.sys.run())
        self.housekeeping.start(self.loop)
        self.view.mark_started()

    def _wire(self) -> None:
        """Build the rooms, each given what it reads and who it calls (module docstring)."""
        config = self.config
        committer = self.committer
        limits = config.limits
        self.retained = RetainedMessages(
            committer, self.stats, limits.max_retained_messages, limits.max_retained_bytes
        )
        self.deliveries = Deliveries(
            committer,
            self.loop,
            self.stats,
            limits.max_queued_messages,
            limits.max_queued_bytes,
        )
        sessions = self.sessions_room = Sessions(
            self.loop,
            config.limits,
            committer,
            self.stats,
            self.hooks,
            self.registry,
            self.deliveries,
            config.mqtt5.max_session_expiry_interval,
        )
        self.admission = Admission(
            self.loop, config.limits, self.stats, self.hooks, self.topic_limits, sessions
        )
        self.router = Router(
            committer,
            self.stats,
            self.hooks,
            self.registry,
            sessions.by_id,
            self.deliveries,
            self.retained,
            config.journal,
            self.command_host,
            self.topic_limits,
            config.limits.max_topic_cache_bytes,
            self.hub.read_clock,
            config.name,
            self.sparkplug,
        )
        self.subscriptions = SubscriptionManager(
            config.name,
            committer,
            self.hooks,
            self.registry,
            sessions.by_id,
            self.deliveries,
            self.retained,
            self.topic_limits,
            self.stats,
            config.limits.max_subscriptions_per_client,
            self.limits5,
            config.mqtt5.shared_subscription_available,
        )
        self.wills = Wills(
            self.loop, self.hooks, self.stats, self.router, committer, self.sparkplug
        )
        sessions.attach(self.router, self.subscriptions, self.wills)
        self.housekeeping = Housekeeping(
            config,
            self.store,
            self._executor,
            self.stats,
            self.subscriptions,
            self.retained,
            lambda: self.router.next_seq,
            sessions.expire,
        )
        self.hub.attach(
            committer,
            self._event_handlers_by_type(),
            sessions.opened,
            sessions.gone,
            self._client_writable,
        )
        rooms = CoreRooms(
            config,
            self.hub,
            self.hooks,
            committer,
            sessions,
            self.subscriptions,
            self.router,
            self.deliveries,
            self.retained,
            self.registry,
            self.stats,
            self.topic_limits,
            self.sub_points,
        )
        self.links = Links(rooms)
        self.bridges = Bridges(rooms)
        self.command_host.attach(rooms, self.links)
        self.view = BrokerView(
            rooms,
            self.store,
            self._executor,
            lambda: self.quarantined,
            self.peer_counters,
            self.leadership,
        )
        self.sys = SysReporter(config.sys.interval, self.view, self.router)
        self.sys.sources.append(self.links.sys_values)
        self.sys.sources.append(self.bridges.sys_values)

    def _client_factory(self, listener: ListenerConfig) -> Callable[[], asyncio.Protocol]:
        return lambda: as_protocol(Client(self.hub, listener))

    async def stop(self) -> None:
        """Stop listening, close every client, commit what is pending, close the store."""
        if self._stopping:
            return
        self._stopping = True
        for listener in self.listeners:
            listener.close()
        if self.http is not None:
            await self.http.stop()
        if self._started:
            if self._sys_task is not None:
                self._sys_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sys_task
            await self.housekeeping.stop()
            await self.links.stop()
            await self.bridges.stop()
            self.wills.stop()
            for client in list(self.clients):
                if client.transport is not None:
                    client.flush()
                    client.transport.close()
            await self.committer.drain()
        for listener in self.listeners:
            await listener.wait_closed()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._store is not None:
            self._store.close()
        log.info("stopped")

    def _store_failed(self, error: BaseException) -> None:
        if self.on_store_failure is not None:
            self.on_store_failure(error)
        self.sessions_room.close_all(f"store failure: {error}")
        self.store_failed.set()
        self.leadership.lose(str(error))  # with [ha]: steps down (ha.py)

    # -- what client connections hear from the rooms (through the hub) -----------

    def _client_writable(self, client: Client) -> None:
        """A client's socket drained: what waited in its session's queue goes out."""
        session = client.session
        if session is not None and session.client is client:
            self.deliveries.pump(session)
            client.flush()

    def _event_handlers_by_type(self) -> EventHandlers:
        """Each event type's handler: one lookup per event, not a chain of type tests
        (a QoS 2 message makes four events). Covers the core's whole `Event` union."""
        sessions = self.sessions_room
        admission = self.admission
        return {
            MessageReceived: self.router.on_publish,
            DeliveryAcknowledged: self.deliveries.on_acknowledged,
            DeliveryReceived: self.deliveries.on_received,
            MessageReleased: self.router.on_release,
            SubscribeRequested: self.subscriptions.on_subscribe,
            UnsubscribeRequested: self.subscriptions.on_unsubscribe,
            ConnectRequested: admission.on_connect_requested,
            DisconnectRequested: sessions.on_disconnect,
            AuthRequested: admission.on_auth,
            ConnectionClosed: sessions.on_closed,
            # Answers a server never gets: only the broker's own outbound connections
            # (links, bridges) have them, in their own handler tables.
            ConnectAcknowledged: _unexpected,
            SubscribeAcknowledged: _unexpected,
            UnsubscribeAcknowledged: _unexpected,
        }

    # -- operations (the MQ command host, embedding programs) -----------------

    def may(self, action: str, topic: str, user: str, client_id: str) -> bool:
        """Authorization by the hooks (always True without any)."""
        return self.hooks.may(Action(action), topic, user, client_id)

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        sub_point: str = "",
        journal: bool = True,
    ) -> None:
        """Publish from inside the broker or the program that embeds it, routed (and
        retained, journaled) like any message. Raises ValueError for an invalid topic name,
        QoS or subscription point."""
        problem = self.topic_limits.name_error(topic)
        if problem is not None:
            raise ValueError(f"invalid topic name {topic!r}: {problem}")
        if qos not in (0, 1, 2):
            raise ValueError(f"qos must be 0, 1 or 2, not {qos!r}")
        if sub_point not in self.sub_points:
            raise ValueError(f"subscription point {sub_point!r} is not declared")
        self.router.publish(topic, bytes(payload), qos, retain, sub_point, journal)

    def matching_retained(self, sub_point: str, topic_filter: str) -> list[Message]:
        return self.retained.matching(sub_point, topic_filter)

    def delete_retained(self, sub_point: str, topic: str, network: bool = False) -> bool:
        """Delete a retained message; with `network`, at every broker of the network too
        (MQ DeletePub without DelOpt Local: retained_sync.py)."""
        deleted = self.retained.delete(sub_point, topic)
        if network:
            self.links.delete_retained_everywhere(sub_point, topic)
        return deleted

    def subscribe(
        self,
        topic_filter: str,
        callback: Callable[[Received], None] | None = None,
        qos: int = 2,
        sub_point: str = "",
    ) -> LocalSubscription:
        """Subscribe in-process code (embedded.py): `callback` gets every message, or, with
        none, `await subscription.get()` / `async for` does. Raises ValueError for an invalid
        filter, QoS or subscription point."""
        problem = self.topic_limits.filter_error(topic_filter)
        if problem is not None:
            raise ValueError(f"invalid topic filter {topic_filter!r}: {problem}")
        if qos not in (0, 1, 2):
            raise ValueError(f"qos must be 0, 1 or 2, not {qos!r}")
        if sub_point not in self.sub_points:
            raise ValueError(f"subscription point {sub_point!r} is not declared")
        queue: asyncio.Queue[Received] | None = None
        if callback is None:
            queue = asyncio.Queue()
            callback = queue.put_nowait
        session = self.sessions_room.open_local(CallbackTarget(callback), sub_point)
        subscription = Subscription(
            id=self.registry.new_id(),
            identity=Identity(self.config.name, session.client_id),
            topic=topic_filter,
            sub_point=sub_point,
            qos=qos,
            created_at=time.time(),
            mqtt=True,
        )
        self.registry.add(subscription)
        self.subscriptions.saved(subscription)
        self.subscriptions.send_retained(subscription)
        return LocalSubscription(self.end_local_session, session, queue)

    def end_local_session(self, session: Session) -> None:
        if self.sessions_room.by_id.get(session.client_id) is session:
            self.sessions_room.discard(session)

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def peer_counters(self) -> dict[str, list[PeerCounters]]:
        """Links' and bridges' counters, by kind (`operations.view.BrokerView`)."""
        return {"link": self.links.counters(), "bridge": self.bridges.counters()}

    def sys_values(self) -> dict[str, str]:
        return self.sys.values()

    async def apply_journal_retention(self) -> int:
        return await self.housekeeping.apply_journal_retention()


def _unexpected(client: Client, event: object) -> None:
    log.error("connection %s: unexpected %s", client.peer, type(event).__name__)


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
