"""The asyncio edge: one `Client` (an `asyncio.Protocol`) per TCP connection.

It owns nothing but the transport and the sans-IO `Connection`: bytes read are
fed to the connection and the resulting events go to the broker, all inside
the `data_received` callback, so a connection's packets are handled strictly
in order and every complete packet of a read is handled before yielding.
Writes are coalesced: whatever the broker queues for this client during one
loop iteration goes out in one `transport.write`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ..protocol import (
    Connection,
    ConnectionClosed,
    ConnectionState,
    ConnectRequested,
    PacketType,
    ReasonCode,
)
from ..protocol.packets import Will
from .tls import certificate_identity

if TYPE_CHECKING:
    from .config import ListenerConfig
    from .hooks import AuthExchange
    from .server import Broker
    from .session import Session

log = logging.getLogger("telemq.broker")

# States in which the connection decodes what it has buffered.
_READING = (ConnectionState.CONNECTED, ConnectionState.AUTHENTICATING)


class Client(asyncio.Protocol):
    __slots__ = (
        "_dirty",
        "_timer",
        "_timer_at",
        "auth_connect",
        "auth_exchange",
        "backlog",
        "broker",
        "certificate_user",
        "client_id",
        "connected_at",
        "connection",
        "dial",
        "handlers",
        "listener",
        "peer",
        "session",
        "transport",
        "user_id",
        "will",
        "writable",
    )

    def __init__(
        self,
        broker: Broker,
        listener: ListenerConfig,
        dial: Callable[[float], Connection] | None = None,
    ) -> None:
        self.broker = broker
        self.listener = listener
        # An outbound connection (a link or bridge this broker dials): makes its client-role
        # connection (`protocol.DialConnection`) when the TCP connection is made.
        self.dial = dial
        # Who handles this connection's events: the broker's table for clients; a link's
        # or bridge's own once it is one (links.py).
        self.handlers: dict[type, Callable[[Client, Any], None]] = broker.event_handlers
        self.transport: asyncio.Transport | None = None
        self.connection: Connection | None = None
        self.session: Session | None = None
        self.client_id = ""
        self.user_id = ""
        self.will: Will | None = None
        self.peer = "?"
        self.connected_at = 0.0  # UTC seconds the connection was made (the admin API)
        self.certificate_user: str | None = None  # CN of a verified client certificate
        # Enhanced authentication in progress (authentication.py): the exchange, and the
        # CONNECT it answers (None for a re-authentication).
        self.auth_exchange: AuthExchange | None = None
        self.auth_connect: ConnectRequested | None = None
        self.writable = True
        self._dirty = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    # -- asyncio callbacks ----------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence the cast.
        self.transport = cast(asyncio.Transport, transport)
        self.connected_at = time.time()
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
        limits = self.broker.config.limits
        if self.listener.use_identity_as_username:
            self.certificate_user = certificate_identity(transport)
        now = self.broker.loop.time()
        if self.dial is not None:
            self.connection = self.dial(now)
        else:
            self.connection = Connection(
                now=now,
                max_packet_size=limits.max_packet_size,
                connect_timeout=limits.connect_timeout,
                retry_interval=limits.retry_interval,
                mqtt5=self.broker.limits5,
            )
        self.broker.client_opened(self)
        if self.dial is not None:
            self.flush()  # the CONNECT an outbound connection opens with
        else:
            self._arm_timer()

    def data_received(self, data: bytes) -> None:
        connection = self.connection
        assert connection is not None
        broker = self.broker
        now = broker.loop.time()
        events = connection.receive_data(data, now)
        if events:
            broker.handle_events(self, events)
            if connection.has_buffered_input:
                self._read_buffered(connection, now)
            if broker.committer.backlogged and connection.state is ConnectionState.CONNECTED:
                broker.pause_for_store(self)
            if broker.dirty_clients:
                # Deliveries leave before this client's acknowledgements: the subscribers'
                # latency does not include a write to the publisher.
                broker.flush_dirty()
        self.flush()

    def _read_buffered(self, connection: Connection, now: float) -> None:
        """What followed CONNECT (or an AUTH of enhanced authentication) in the same read,
        now that the server has answered it."""
        while connection.has_buffered_input and connection.state in _READING:
            events = connection.receive_data(b"", now)
            if not events:
                return
            self.broker.handle_events(self, events)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        connection = self.connection
        if connection is None:
            return
        reason = f"connection lost: {exc}" if exc else "connection closed by the client"
        events = connection.connection_lost(reason)
        if events:
            self.broker.handle_events(self, events)
        self.broker.client_gone(self)

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        self.broker.client_writable(self)

    # -- output -----------------------------------------------------------

    def mark_dirty(self) -> None:
        """Bytes were queued outside this client's own callback: flush this iteration."""
        if not self._dirty:
            self._dirty = True
            self.broker.mark_dirty(self)

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
        self.broker.handle_events(self, [event])
        self.flush()

    # -- timers -----------------------------------------------------------

    def _arm_timer(self) -> None:
        """Keep one timer at the connection's next deadline; re-armed lazily."""
        connection = self.connection
        if connection is None:
            return
        due = connection.next_timer()
        if due is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
                self._timer_at = None
            return
        # Deadlines move later on every read; a timer firing early just re-arms.
        if self._timer is not None and self._timer_at is not None and self._timer_at <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        self._timer = self.broker.loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        connection = self.connection
        if connection is None:
            return
        now = self.broker.loop.time()
        due = connection.next_timer()
        if due is not None and due <= now:
            events = connection.handle_timer(now)
            if events:
                self.broker.handle_events(self, events)
        self.flush()
