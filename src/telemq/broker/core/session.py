"""A session and the connection it is attached to: `Session`, `Client` and the `ClientHub`.

A `Session` is the state of one client id. It outlives connections when it is persistent
(clean session = 0): it keeps the subscriptions, the QoS flows (it is a `protocol.Flows`,
the table a connection attaches: one object per client id, not two) and the queue of
deliveries waiting for a connection or for room in the in-flight window (changed by
`Deliveries` only). Its deliveries go to its `client` while one is connected, or to a
`DeliveryTarget` (an in-process subscriber, the way to a queue on another broker).

A `Client` (one per connection, the asyncio protocol of its transport) owns nothing but the
transport and the sans-IO `Connection`: bytes read are fed to the connection and the
resulting events go to the event handlers inside the `data_received` callback, so a
connection's packets are handled strictly in order, a read's share of them at a time
(turns.py). Writes are coalesced: whatever the broker queues for this client during one
loop iteration goes out in one `transport.write`. An idle connection is most of what a
broker with many devices holds, so a `Client` is kept small: a plain class (native in the
compiled build: its fields in one C structure), its peer's address packed in an int
(peer_address.py), what few connections need made on demand (`Throttling`,
`Authenticating`).

A session and its client name each other, so they live in one module. A client never sees
the broker: what it needs of it is the `ClientHub`, a concrete class (the per-message path
stays on compiled calls): the loop and limits, the handler table of the protocol's events,
the rooms' answers to a connection opening, ending or draining (given by the wiring), the
clients with bytes to write this iteration, and the clients paused while the store catches
up: those whose writes fill the backlog (`Committer.charge`). The hub owns those two lists;
the rooms own the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

from ...protocol import (
    Connection,
    ConnectionClosed,
    ConnectionSettings,
    ConnectionState,
    ConnectRequested,
    Event,
    Flows,
    PacketType,
    ReasonCode,
)
from ...protocol.packets import Will
from ...protocol.peer5 import NO_EXPIRY, ServerLimits5
from .committer import Committer
from .deadlines import Bucket, Deadlines
from .message import Delivery, DeliveryTarget
from .peer_address import pack_peer, peer_name, peer_text
from .stats import SessionCounts
from .turns import READ_BUDGET, READ_TURN_BYTES, ReadClock, Throttling, handle_read

if TYPE_CHECKING:
    from ..security.hooks import AuthExchange
    from ..settings.config import LimitsConfig, ListenerConfig

log = logging.getLogger("telemq.broker")


# The queue and the held deliveries of every session that has none: never appended to
# (`Session.enqueue`, `Session.hold` replace them first), only read, emptied, or replaced.
NO_QUEUE: Final[deque[Delivery]] = deque()
NONE_HELD: Final[list[Delivery]] = []


class Session(Flows):
    """State of one client id (see module docstring): its QoS flows (the base class) and
    its queue. Deliveries go to `client` while one is connected, or to `target` (a session
    with a target has no client).

    A persistent session lasts `expiry_interval` seconds after its connection ends (MQTT
    5.0's Session Expiry Interval; `NO_EXPIRY` for 3.1/3.1.1 and MQ queues): `expires_at`
    is then when, in UTC seconds, and 0 while connected or forever.
    """

    __slots__ = (
        "bridge",
        "client",
        "client_id",
        "counts",
        "created_us",
        "expires_at",
        "expiry_interval",
        "held",
        "holding",
        "link",
        "persistent",
        "queue",
        "queued_bytes",
        "sub_point",
        "target",
        "user_id",
    )

    def __init__(
        self, client_id: str, persistent: bool, max_inflight: int, sub_point: str = ""
    ) -> None:
        super().__init__(max_inflight)
        # The flags together: the compiled build packs neighbouring booleans into one word.
        self.persistent = persistent
        self.link = False  # the session of a link to a neighbour broker (links.py)
        self.bridge = False  # the session of a bridge to another MQTT broker (bridges.py)
        self.client_id = client_id
        self.expiry_interval = NO_EXPIRY if persistent else 0
        self.expires_at = 0.0
        self.created_us = 0  # UTC microseconds, kept in the store record
        self.sub_point = sub_point
        self.user_id = ""
        # Both start as the shared empties (a deque is 624 bytes even empty, and most
        # sessions never queue): `enqueue` and `hold` give a session its own at its first.
        self.queue: deque[Delivery] = NO_QUEUE
        self.queued_bytes = 0  # topic and payload bytes queued (limits.max_queued_bytes)
        # Live deliveries held while retained ones are sent in slices (subscribe.py).
        self.holding = 0  # retained sets still being sent
        self.held: list[Delivery] = NONE_HELD
        self.client: Client | None = None
        self.target: DeliveryTarget | None = None
        self.counts: SessionCounts | None = None  # made at the first count

    def enqueue(self, delivery: Delivery) -> None:
        """`delivery` at the end of the queue, the session's own made at its first."""
        queue = self.queue
        if queue is NO_QUEUE:
            queue = self.queue = deque()
        queue.append(delivery)

    def hold(self, delivery: Delivery) -> None:
        """`delivery` held behind retained messages being sent (`holding`)."""
        held = self.held
        if held is NONE_HELD:
            held = self.held = []
        held.append(delivery)

    @property
    def dropped(self) -> int:  # deliveries refused by its full queue
        return 0 if self.counts is None else self.counts.dropped

    @property
    def forwarded(self) -> int:  # a link's: copies routed to the neighbour ($SYS: sent)
        return 0 if self.counts is None else self.counts.forwarded

    def counted(self) -> SessionCounts:
        """Its `SessionCounts`, made at the first count."""
        if self.counts is None:
            self.counts = SessionCounts()
        return self.counts

    @property
    def backlog(self) -> int:
        """Deliveries not yet done: queued, and sent but not acknowledged."""
        return len(self.queue) + len(self.outbound)


# States in which the connection decodes what it has buffered.
_READING = (ConnectionState.CONNECTED, ConnectionState.AUTHENTICATING)


EventHandlers = dict[type, Callable[["Client", Any], None]]


class ClientHub:
    """What every `Client` of one broker shares (see the module docstring).

    Built by the wiring before the rooms (the committer flushes through it); `attach` gives
    it the rooms' answers once they exist.
    """

    __slots__ = (
        "_flush_scheduled",
        "_paused_for_store",
        "committer",
        "connection_settings",
        "deadlines",
        "dirty_clients",
        "event_handlers",
        "limits",
        "limits5",
        "loop",
        "on_gone",
        "on_opened",
        "on_writable",
        "read_clock",
        "reads_held",
        "store_pauses",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        limits: LimitsConfig,
        limits5: ServerLimits5 | None,
    ) -> None:
        self.loop = loop
        self.deadlines = Deadlines(loop)  # every client's next deadline, on one timer
        self.limits = limits
        # What MQTT 5.0 connections are told and held to; None: 5.0 is off.
        self.limits5 = limits5
        # What every connection is held to, made once: each keeps a reference.
        self.connection_settings = ConnectionSettings(
            limits.max_packet_size, limits.connect_timeout, limits.retry_interval, limits5
        )
        self.dirty_clients: list[Client] = []  # read by clients, changed by mark_dirty
        self._paused_for_store: list[Client] = []  # see pause_for_store
        self._flush_scheduled = False
        self.read_clock = ReadClock()  # set at each read, read by the router
        self.reads_held = 0  # reads that ended a client's turn (READ_BUDGET)
        self.store_pauses = 0  # clients paused because their writes filled the backlog
        self.committer: Committer
        self.event_handlers: EventHandlers = {}
        self.on_opened: Callable[[Client], None]
        self.on_gone: Callable[[Client], None]
        self.on_writable: Callable[[Client], None]

    def attach(
        self,
        committer: Committer,
        event_handlers: EventHandlers,
        on_opened: Callable[[Client], None],
        on_gone: Callable[[Client], None],
        on_writable: Callable[[Client], None],
    ) -> None:
        """The rooms' answers: the handler of each event type, and who hears of a
        connection opening, ending, draining."""
        self.committer = committer
        self.event_handlers = event_handlers
        self.on_opened = on_opened
        self.on_gone = on_gone
        self.on_writable = on_writable

    def handle_events(self, client: Client, events: list[Event]) -> None:
        self.read_clock.received_us = time.time_ns() // 1000
        handle_read(self.committer, client.handlers, client, events)

    def mark_dirty(self, client: Client) -> None:
        """`client` has bytes to write: flushed at the end of this loop iteration."""
        self.dirty_clients.append(client)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush_dirty)

    def flush_dirty(self) -> None:
        self._flush_scheduled = False
        dirty = self.dirty_clients
        self.dirty_clients = []
        for client in dirty:
            client.flush()

    def pause_for_store(self, client: Client) -> None:
        """Stop reading from `client` until the running commit ends: its writes fill the
        backlog (`Committer.charge`)."""
        transport = client.transport
        if transport is None or transport.is_closing() or client.store_paused:
            return
        client.store_paused = True
        client.throttled().store_pauses += 1
        self.store_pauses += 1
        if not client.holding:  # else reading is paused already
            transport.pause_reading()
        self._paused_for_store.append(client)
        self.committer.on_commit = self._resume_readers

    def _resume_readers(self) -> None:
        self.committer.on_commit = None
        paused = self._paused_for_store
        self._paused_for_store = []
        for client in paused:
            client.resume_after_store()


def as_protocol(client: Client) -> asyncio.Protocol:
    """`client` typed as asyncio wants: a native class cannot subclass `asyncio.Protocol`."""
    return cast(asyncio.Protocol, client)


class Authenticating:
    """An enhanced authentication in progress (authentication.py): the exchange, and the
    CONNECT it answers (None for a re-authentication)."""

    __slots__ = ("connect", "exchange")

    def __init__(self, exchange: AuthExchange, connect: ConnectRequested | None) -> None:
        self.exchange, self.connect = exchange, connect


class Client:
    """The asyncio protocol of one connection (see the module docstring).

    Not a subclass of `asyncio.Protocol`: the event loop only calls its methods, and a
    plain class is native in the compiled build (its attributes in one C structure, floats
    and booleans unboxed), which is both faster per packet and smaller per connection. What
    a connection rarely needs is made on demand (`Throttling`, `Authenticating`).
    """

    __slots__ = (
        "_bucket",
        "_dirty",
        "authenticating",
        "client_id",
        "connected_at",
        "connection",
        "deadline_slot",
        "dial",
        "handlers",
        "holding",
        "hub",
        "listener",
        "peer_address",
        "quiet_end",
        "session",
        "slot",
        "store_paused",
        "throttling",
        "transport",
        "user_id",
        "will",
        "writable",
    )

    def __init__(
        self,
        hub: ClientHub,
        listener: ListenerConfig,
        dial: Callable[[float], Connection] | None = None,
        handlers: EventHandlers | None = None,
    ) -> None:
        # The flags first, together: the compiled build packs neighbouring booleans into
        # one word. Whether the transport takes writes; whether bytes wait for this
        # iteration's flush; whether the decoder holds packets for a later turn (and
        # reading is paused meanwhile); whether reading is paused until the running commit
        # ends. Its end is logged at DEBUG, not INFO (`quiet_end`): a link refused as a
        # cycle, which its neighbour dials again and again, has its own line at most once an
        # hour (peers/).
        self.writable = True
        self._dirty = False
        self.holding = False
        self.store_paused = False
        self.quiet_end = False
        self.hub = hub
        self.listener = listener
        # An outbound connection (a link or bridge this broker dials): makes its client-role
        # connection (`protocol.DialConnection`) when the TCP connection is made.
        self.dial = dial
        # Who handles this connection's events: the broker's table for clients; a link's
        # or bridge's own for the connections they dial or accept (peers/links.py).
        self.handlers: EventHandlers = hub.event_handlers if handlers is None else handlers
        self.transport: asyncio.Transport | None = None
        self.connection: Connection | None = None
        self.session: Session | None = None
        self.client_id = ""
        self.user_id = ""
        self.will: Will | None = None
        # Where the connection comes from, for logs and the admin API (`peer`): an IP
        # address and port packed in one int (`pack_peer`: 64 bytes less than their text).
        self.peer_address = -1
        self.connected_at = 0.0  # UTC seconds the connection was made (the admin API)
        self.authenticating: Authenticating | None = None
        self._bucket: Bucket | None = None  # where `hub.deadlines` has it filed
        self.deadline_slot = 0  # its place in that bucket, kept by `Deadlines`
        self.slot = -1  # its index in the `ClientTable` of open connections (-1: none)
        # The rest of its share of turns and of the store's backlog, once it needed one.
        self.throttling: Throttling | None = None

    @property
    def peer(self) -> str:
        """Where the connection comes from: "host:port", or "?" before it is made. A peer
        that is not an IP address is asked of the transport (after the end of a TCP
        connection it is gone: "?")."""
        address = self.peer_address
        if address >= 0:
            return peer_text(address)
        transport = self.transport
        try:
            return peer_name(None if transport is None else transport.get_extra_info("peername"))
        except (AttributeError, OSError):  # uvloop, once the socket is closed
            return "?"

    def throttled(self) -> Throttling:
        """Its `Throttling`, made at the first need."""
        throttling = self.throttling
        if throttling is None:
            throttling = self.throttling = Throttling()
        return throttling

    # -- asyncio callbacks ----------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence the cast.
        self.transport = cast(asyncio.Transport, transport)
        self.connected_at = time.time()
        self.peer_address = pack_peer(transport.get_extra_info("peername"))
        hub = self.hub
        now = hub.loop.time()
        if self.dial is not None:
            self.connection = self.dial(now)
        else:
            self.connection = Connection(now=now, settings=hub.connection_settings)
        hub.on_opened(self)
        if self.dial is not None:
            self.flush()  # the CONNECT an outbound connection opens with
        else:
            self._arm_timer()

    def data_received(self, data: bytes) -> None:
        connection = self.connection
        assert connection is not None
        hub = self.hub
        now = hub.loop.time()
        throttling = self.throttling
        budget = READ_BUDGET if throttling is None else throttling.read_budget
        events = connection.receive_data(data, now, budget)
        if events:
            hub.handle_events(self, events)
            if connection.has_buffered_input and not connection.input_held:
                self._read_buffered(connection, now)
            committer = hub.committer
            if (
                committer.busy
                and connection.state is ConnectionState.CONNECTED
                and committer.charge(self.throttled())
            ):
                hub.pause_for_store(self)
            if hub.dirty_clients:
                # Deliveries leave before this client's acknowledgements: the subscribers'
                # latency does not include a write to the publisher.
                hub.flush_dirty()
        if connection.input_held or len(data) >= READ_TURN_BYTES:
            self._hold()
        elif self.holding:
            self._release()
        self.flush()

    def _read_buffered(self, connection: Connection, now: float) -> None:
        """What followed CONNECT (or an AUTH of enhanced authentication) in the same read,
        now that the server has answered it (within the read's budget)."""
        while (
            connection.has_buffered_input
            and connection.state in _READING
            and not connection.input_held
        ):
            throttling = self.throttling
            budget = READ_BUDGET if throttling is None else throttling.read_budget
            events = connection.receive_data(b"", now, budget)
            if not events:
                return
            self.hub.handle_events(self, events)

    # -- one client's share of a loop turn -------------------------------------

    def _hold(self) -> None:
        """The read stopped at its budget (the decoder holds the rest), or was a large one:
        reading pauses and the next slice runs in a later turn of the loop, unless the store
        paused us."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        throttling = self.throttled()
        if not self.holding:
            self.holding = True
            throttling.reads_held += 1
            self.hub.reads_held += 1
            if not self.store_paused:  # else reading is paused already
                transport.pause_reading()
        if not self.store_paused and not throttling.slice_scheduled:
            throttling.slice_scheduled = True
            self.hub.loop.call_soon(self._next_slice)

    def _release(self) -> None:
        """The held packets are handled: reading goes on, unless the store paused us."""
        self.holding = False
        transport = self.transport
        if not self.store_paused and transport is not None and not transport.is_closing():
            transport.resume_reading()

    def _next_slice(self) -> None:
        """The next `read_budget` packets of a held read; the budget follows their cost."""
        throttling = self.throttled()
        throttling.slice_scheduled = False
        connection = self.connection
        transport = self.transport
        if (
            connection is None
            or connection.closed
            or transport is None
            or transport.is_closing()
            or self.store_paused
        ):
            return
        started = time.perf_counter()
        self.data_received(b"")
        if connection.input_held:  # a whole slice: what `read_budget` packets cost
            throttling.fit_budget(time.perf_counter() - started)

    def resume_after_store(self) -> None:
        """The commit that `pause_for_store` waited for ended."""
        self.store_paused = False
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.holding:
            # Reading stays paused until the held packets are handled.
            throttling = self.throttled()
            if not throttling.slice_scheduled:
                throttling.slice_scheduled = True
                self.hub.loop.call_soon(self._next_slice)
        else:
            transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._bucket is not None:
            Deadlines.remove(self, self._bucket)
            self._bucket = None
        connection = self.connection
        if connection is None:
            return
        reason = f"connection lost: {exc}" if exc else "connection closed by the client"
        events = connection.connection_lost(reason)
        if events:
            self.hub.handle_events(self, events)
        self.hub.on_gone(self)
        committer = self.hub.committer
        if committer.busy:
            committer.charge(
                self.throttled()
            )  # its will's writes are its own, not the next reader's

    def eof_received(self) -> bool | None:
        """The client shut its side of the connection: None lets the transport close, and
        the end comes as `connection_lost` (what `asyncio.Protocol` does)."""
        return None

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        self.hub.on_writable(self)

    # -- output -----------------------------------------------------------

    def mark_dirty(self) -> None:
        """Bytes were queued outside this client's own callback: flush this iteration."""
        if not self._dirty:
            self._dirty = True
            self.hub.mark_dirty(self)

    def acknowledge(self, packet_type: PacketType, packet_id: int, reason_code: int = 0) -> None:
        """PUBACK, PUBREC, PUBREL or PUBCOMP, unless the connection has ended meanwhile;
        `reason_code` for an MQTT 5.0 client (3.1/3.1.1 have none)."""
        connection = self.connection
        if connection is not None and not connection.closed:
            connection.acknowledge(packet_type, packet_id, reason_code)
            self.mark_dirty()

    def flush(self) -> None:
        self._dirty = False
        connection = self.connection
        transport = self.transport
        if connection is None or transport is None:
            return
        data = connection.data_to_send()
        if data and not transport.is_closing():
            transport.write(data)
        if connection.closed and not transport.is_closing():
            transport.close()
        else:
            self._arm_timer()

    def close(self, reason: str, code: ReasonCode = ReasonCode.ADMINISTRATIVE_ACTION) -> None:
        """Close from the server side (takeover, limits, shutdown): an abnormal end."""
        connection = self.connection
        if connection is None or connection.closed:
            return
        event: ConnectionClosed = connection.close(reason, code)
        self.hub.handle_events(self, [event])
        self.flush()

    # -- timers -----------------------------------------------------------

    def _arm_timer(self) -> None:
        """Keep the connection filed at its next deadline (`Deadlines`); lazily: deadlines
        move later on every read, and a tick that comes early just files it again."""
        connection = self.connection
        if connection is None:
            return
        due = connection.next_timer()
        bucket = self._bucket
        if due is None:
            if bucket is not None:
                Deadlines.remove(self, bucket)
                self._bucket = None
            return
        if bucket is not None:
            if bucket.tick <= Deadlines.tick_of(due):
                return
            Deadlines.remove(self, bucket)
        self._bucket = self.hub.deadlines.file(self, due)

    def deadline_reached(self, bucket: Bucket) -> None:
        """The tick of the bucket it was filed in came (`Deadlines`)."""
        if bucket is not self._bucket:
            return
        self._bucket = None
        connection = self.connection
        if connection is None:
            return
        now = self.hub.loop.time()
        due = connection.next_timer()
        if due is not None and due <= now:
            events = connection.handle_timer(now)
            if events:
                self.hub.handle_events(self, events)
        self.flush()
