"""A connection's life around its messages: the handshake, resumption, deadlines, the end.

Theory of operation
-------------------
`Connection` (connection.py) is the server side of one MQTT connection without I/O; this
is the part of it that runs once per connection or per timer, never per message, so that
connection.py holds the message flow alone. `ConnectionLifecycle` owns every attribute of
the connection (the state, the output queue, the session's flows, the client's 5.0 side)
and these phases:

* the CONNECT handshake: what a CONNECT asks for and whether it is refused before the
  owner sees it is decided by handshake.py; the owner answers with `accept` (CONNACK 0,
  the session's flows attached, what is in flight re-sent) or `refuse`;
* enhanced authentication (5.0) loops CONNECTING -> AUTHENTICATING -> CONNECTING: the
  owner answers with `continue_authentication` (AUTH 0x18 to the client), the connection
  reads the client's AUTH alone and reports it (`AuthRequested`); a packet other than AUTH
  or DISCONNECT in between is a protocol error [MQTT-3.1.2-30];
* resumption: unfinished outbound flows re-sent in order, PUBLISH with DUP=1 or PUBREL,
  within the 5.0 client's Receive Maximum and Maximum Packet Size (`resend_inflight`);
* deadlines, with time as an argument: the CONNECT (or AUTH) timeout, keep-alive expiry
  at 1.5 x the keep-alive, and for MQTT 3.1 peers a re-send after `retry_interval`
  seconds without an answer (`next_timer`, `handle_timer`);
* the end: `close` from the server, `connection_lost` from the transport, `_fail` on a
  protocol violation; an MQTT 5.0 client is told why (DISCONNECT past CONNACK, CONNACK
  during enhanced authentication). After it the connection ignores input.

States: AWAIT_CONNECT -> CONNECTING -> CONNECTED -> CLOSED (and AUTHENTICATING; a
dialer's AWAIT_CONNACK, dialer.py).
"""

from __future__ import annotations

import enum
from typing import Final

from .codec import Decoder, encode_ack, encode_publish
from .errors import LocalProtocolError
from .events import AuthRequested, ConnectionClosed, ConnectRequested, Event
from .flows import Flows, Inflight, InflightState
from .handshake import accept_bytes, check_connect, connack_problem, refusal_bytes
from .packets import Auth, Connect, ConnectReturnCode, PacketType, ProtocolLevel
from .peer5 import Peer5, ServerLimits5
from .reasons import ReasonCode


class ConnectionState(enum.Enum):
    AWAIT_CONNECT = "await-connect"
    # DialConnection (dialer.py), the client role: CONNECT sent; waiting for CONNACK.
    AWAIT_CONNACK = "await-connack"
    # CONNECT received; waiting for accept() or refuse(). DialConnection: CONNACK 0
    # received; waiting for attach() (input is buffered alike).
    CONNECTING = "connecting"
    AUTHENTICATING = "authenticating"  # the server sent AUTH 0x18; waiting for the client's
    CONNECTED = "connected"
    CLOSED = "closed"


# `_out` of every connection with nothing to send (an idle connection, and any between
# flushes): shared, so never appended to (`_emit` gives the connection its own first).
NO_OUTPUT: Final[list[bytes]] = []


class ConnectionSettings:
    """What a connection is held to: the largest packet, the CONNECT (or AUTH) timeout, the
    MQTT 3.1 re-send interval, the server's MQTT 5.0 limits (None: no 5.0). The same for
    every connection of a server: its owner makes them once and hands them to each
    (`settings`), so that a connection carries one reference, not four fields."""

    __slots__ = ("connect_timeout", "limits5", "max_packet_size", "retry_interval")

    def __init__(
        self,
        max_packet_size: int = 1024 * 1024,
        connect_timeout: float = 10.0,
        retry_interval: float = 20.0,
        limits5: ServerLimits5 | None = None,
    ) -> None:
        self.max_packet_size = max_packet_size
        self.connect_timeout = connect_timeout
        self.retry_interval = retry_interval
        self.limits5 = limits5


class ConnectionLifecycle(Decoder):
    """The handshake, resumption, deadlines and end of a connection (see the module
    docstring); `Connection` adds the message flow.

    A connection is its own `Decoder` rather than the holder of one: one object per
    connection instead of two, so an idle connection carries one object header and no
    reference between them (its `feed` and `append` are for the connection's own use; bytes
    go in through `receive_data`).
    """

    __slots__ = (
        "_closed_reason",
        "_connect_deadline",
        "_out",
        "_settings",
        "bridge",
        "bytes_received",
        "bytes_sent",
        "closed",
        "flows",
        "input_held",
        "keepalive",
        "last_received",
        "peer5",
        "state",
    )

    def __init__(
        self,
        *,
        now: float,
        max_packet_size: int = 1024 * 1024,
        connect_timeout: float = 10.0,
        retry_interval: float = 20.0,
        mqtt5: ServerLimits5 | None = None,
        settings: ConnectionSettings | None = None,
    ) -> None:
        """`settings`: those its owner shares among its connections; without them, the
        connection's own, made of the arguments before."""
        if settings is None:
            settings = ConnectionSettings(max_packet_size, connect_timeout, retry_interval, mqtt5)
        super().__init__(
            max_packet_size=settings.max_packet_size, mqtt5=settings.limits5 is not None
        )
        # The flags first, together after the decoder's: the compiled build packs
        # neighbouring booleans into one word (24 bytes less per connection than apart).
        # `state is CLOSED`, kept as a plain attribute: read several times per packet.
        self.closed = False
        # The last `receive_data` stopped at its `max_packets` with bytes left to decode.
        self.input_held = False
        # The peer is a bridge (3.1/3.1.1 CONNECT level 0x80 | level): its subscriptions
        # get No Local and Retain As Published, as Mosquitto gives them (no echo, RETAIN
        # kept). On a dialer: this connection is a bridge's, and says so.
        self.bridge = False
        self.state = ConnectionState.AWAIT_CONNECT
        self._settings = settings
        # The client's side at level 5; None at 3.1/3.1.1 (or before CONNECT).
        self.peer5: Peer5 | None = None
        self._out = NO_OUTPUT
        self._connect_deadline: float | None = now + settings.connect_timeout
        self._closed_reason = ""
        self.flows: Flows | None = None
        self.keepalive = 0
        self.last_received = now
        self.bytes_received = 0
        self.bytes_sent = 0

    def _emit(self, data: bytes) -> None:
        """Queue `data` for `data_to_send`, the connection's own list made at its first."""
        out = self._out
        if out is NO_OUTPUT:
            self._out = [data]
        else:
            out.append(data)

    # -- the handshake ---------------------------------------------------

    def _handle_connect(self, packet: Connect, events: list[Event]) -> None:
        verdict = check_connect(packet, self._settings.limits5)
        self.protocol_level = verdict.protocol_level
        self.peer5 = verdict.peer5
        self.bridge = verdict.bridge
        if verdict.problem:
            self._emit(verdict.reply)
            events.append(self._fail(verdict.problem, verdict.code))
            return
        self.state = ConnectionState.CONNECTING
        self._connect_deadline = None
        self.keepalive = verdict.keepalive
        events.append(ConnectRequested(packet))

    def _out_of_turn(self) -> str:
        if self.state is ConnectionState.AUTHENTICATING:
            # [MQTT-3.1.2-30]
            return "a packet other than AUTH or DISCONNECT during authentication"
        return "the first packet is not CONNECT"

    def _auth_received(self, packet: Auth, events: list[Event]) -> None:
        """A step of enhanced authentication from the client, checked (`Peer5.check_auth`)
        and reported; before CONNACK, what follows it waits for the owner's answer."""
        peer = self.peer5
        assert peer is not None
        connected = self.state is ConnectionState.CONNECTED
        problem = peer.check_auth(packet, connected)
        if problem:
            events.append(self._fail(problem, ReasonCode.PROTOCOL_ERROR))
            return
        starts = connected and not peer.reauthenticating
        if connected:
            peer.reauthenticating = True
        else:
            self.state = ConnectionState.CONNECTING
            self._connect_deadline = None
        props = packet.properties
        events.append(AuthRequested(props.authentication_data if props else None, starts))

    # -- answers from the owner ----------------------------------------

    def accept(
        self,
        session_present: bool,
        flows: Flows,
        now: float,
        *,
        assigned_client_id: str | None = None,
        session_expiry_interval: int | None = None,
        authentication_data: bytes | None = None,
    ) -> list[object]:
        """Send CONNACK 0 and attach the session's flows; re-sends what is in flight.

        MQTT 5.0: `assigned_client_id` when the server chose the client id,
        `session_expiry_interval` when the server's differs from the client's request, and
        the server's last `authentication_data` after enhanced authentication.
        Returns the refs of in-flight messages dropped because they are larger than the
        client's Maximum Packet Size (see `resend_inflight`).
        """
        self.flows = flows
        flows.connection_number += 1
        self.state = ConnectionState.CONNECTED
        peer = self.peer5
        flows.limit_window(peer.receive_maximum if peer is not None else flows.configured_inflight)
        self._emit(
            accept_bytes(
                peer,
                self._settings.limits5,
                self.protocol_level,
                session_present,
                self.keepalive,
                assigned_client_id,
                session_expiry_interval,
                authentication_data,
            )
        )
        if flows.outbound:
            return self.resend_inflight(now)
        return []

    def connack_problem(
        self,
        assigned_client_id: str | None,
        session_expiry_interval: int | None,
        authentication_data: bytes | None,
    ) -> str:
        """Why `accept` with these values could not send its CONNACK ("" when it can): at
        MQTT 5.0, a CONNACK larger than the client's Maximum Packet Size. The owner asks
        before it changes anything, and then closes the connection (`close`): nothing is
        sent before CONNACK."""
        return connack_problem(
            self.peer5,
            self._settings.limits5,
            self.keepalive,
            assigned_client_id,
            session_expiry_interval,
            authentication_data,
        )

    def refuse(
        self, return_code: ConnectReturnCode, reason: str, code5: ReasonCode | None = None
    ) -> ConnectionClosed:
        """Send CONNACK with a failure code; the owner closes the transport after flushing.

        At MQTT 5.0 the CONNACK carries `code5` (by default the 5.0 code of `return_code`)
        and the reason as its Reason String.
        """
        reply, code = refusal_bytes(self.peer5, return_code, reason, code5)
        self._emit(reply)
        return self._fail(reason, code)

    def continue_authentication(self, data: bytes | None, now: float) -> None:
        """MQTT 5.0 enhanced authentication: AUTH 0x18 with the server's `data`; the
        client's answer comes as `AuthRequested`. Before CONNACK, the client has the
        connect timeout to give it (the owner then calls `receive_data(b"", now)` for
        what may wait in the buffer)."""
        peer = self.peer5
        if self.closed or peer is None or peer.auth_method is None:
            raise LocalProtocolError("continue_authentication() without a method in CONNECT")
        self._emit(peer.auth(ReasonCode.CONTINUE_AUTHENTICATION, data))
        if self.state is ConnectionState.CONNECTING:
            self.state = ConnectionState.AUTHENTICATING
            self._connect_deadline = now + self._settings.connect_timeout

    def reauthenticated(self, data: bytes | None) -> None:
        """A re-authentication succeeded: AUTH 0x00 with the server's last `data`."""
        peer = self.peer5
        if not self.closed and peer is not None and peer.reauthenticating:
            self._emit(peer.auth(ReasonCode.NORMAL_DISCONNECTION, data))

    # -- resumption -----------------------------------------------------

    def resend_inflight(self, now: float) -> list[object]:
        """Re-send every unfinished outbound flow in order: PUBLISH with DUP=1, or PUBREL.

        MQTT 5.0: no more than the client's Receive Maximum (the rest go out as
        acknowledgements free room), and nothing larger than its Maximum Packet Size: such
        a message is dropped; the refs of those are returned.
        """
        flows = self.flows
        if flows is None:
            return []
        peer = self.peer5
        if peer is None:
            for inflight in flows.outbound.values():
                self._resend(inflight, now)
            return []
        resend, peer.waiting, dropped = peer.plan_resend(flows)
        for inflight in resend:
            self._resend(inflight, now)
        return dropped

    def _send_waiting(self, now: float) -> None:
        """An acknowledgement freed room: the next in-flight PUBLISH not re-sent yet."""
        flows = self.flows
        peer = self.peer5
        assert flows is not None and peer is not None
        waiting = peer.waiting
        while waiting:
            inflight = flows.outbound.get(waiting.pop(0))
            if inflight is not None:
                self._resend(inflight, now)
                return

    def _resend(self, inflight: Inflight, now: float) -> None:
        inflight.sent_at = now
        if inflight.state is InflightState.RELEASED:
            self._emit(encode_ack(PacketType.PUBREL, inflight.packet_id))
        else:
            self._emit(publish_frame(inflight, self.peer5, True))

    # -- the end --------------------------------------------------------

    def close(
        self, reason: str, code: ReasonCode = ReasonCode.ADMINISTRATIVE_ACTION
    ) -> ConnectionClosed:
        """Close from the server side (takeover, shutdown, limits): an abnormal end."""
        return self._fail(reason, code)

    def connection_lost(self, reason: str = "connection lost") -> list[Event]:
        """The transport is gone; reports the end unless it was already reported."""
        if self.state is ConnectionState.CLOSED:
            return []
        self._close(reason)
        return [ConnectionClosed(reason, False, ReasonCode.UNSPECIFIED_ERROR)]

    def _fail(
        self, reason: str, code: ReasonCode = ReasonCode.UNSPECIFIED_ERROR
    ) -> ConnectionClosed:
        """End the connection for `reason`; an MQTT 5.0 client is told why, in DISCONNECT
        past CONNACK, in CONNACK during enhanced authentication."""
        peer = self.peer5
        if peer is not None:
            if self.state is ConnectionState.CONNECTED:
                self._emit(peer.disconnect(code, reason))
            elif self.state is ConnectionState.AUTHENTICATING:
                self._emit(peer.refusal(code, reason))
        self._close(reason)
        return ConnectionClosed(reason, False, code)

    def _close(self, reason: str) -> None:
        self.state = ConnectionState.CLOSED
        self.closed = True
        self._closed_reason = reason

    @property
    def closed_reason(self) -> str:
        return self._closed_reason

    # -- time -----------------------------------------------------------

    def _keepalive_window(self) -> float:
        """Seconds of silence after which the client is gone: 1.5 x the keep-alive its
        CONNECT set (0 before, and for none) [MQTT-3.1.2-24]. Computed, not kept: one field
        less per connection."""
        return 1.5 * self.keepalive

    def next_timer(self) -> float | None:
        """When `handle_timer` should next be called, or None."""
        state = self.state
        if state is ConnectionState.AWAIT_CONNECT or state is ConnectionState.AUTHENTICATING:
            return self._connect_deadline
        if state is ConnectionState.CLOSED:
            return None
        deadline: float | None = None
        window = self._keepalive_window()
        if window:
            deadline = self.last_received + window
        if (
            self.protocol_level == ProtocolLevel.MQTT_3_1
            and self.flows is not None
            and self.flows.outbound
            and self._settings.retry_interval > 0
        ):
            oldest = min(inflight.sent_at for inflight in self.flows.outbound.values())
            retry_at = oldest + self._settings.retry_interval
            deadline = retry_at if deadline is None else min(deadline, retry_at)
        return deadline

    def handle_timer(self, now: float) -> list[Event]:
        """Act on expired deadlines: CONNECT timeout, keep-alive expiry, 3.1 retries."""
        if self.state is ConnectionState.CLOSED:
            return []
        state = self.state
        if state is ConnectionState.AWAIT_CONNECT or state is ConnectionState.AUTHENTICATING:
            if self._connect_deadline is not None and now >= self._connect_deadline:
                what = "CONNECT" if state is ConnectionState.AWAIT_CONNECT else "AUTH"
                return [
                    self._fail(
                        f"no {what} within the connect timeout", ReasonCode.KEEP_ALIVE_TIMEOUT
                    )
                ]
            return []
        window = self._keepalive_window()
        if window and now >= self.last_received + window:
            return [
                self._fail(
                    f"keep-alive expired: nothing received for {window:g} s",
                    ReasonCode.KEEP_ALIVE_TIMEOUT,
                )
            ]
        if (
            self.protocol_level == ProtocolLevel.MQTT_3_1
            and self.flows is not None
            and self._settings.retry_interval > 0
        ):
            for inflight in self.flows.outbound.values():
                if now >= inflight.sent_at + self._settings.retry_interval:
                    self._resend(inflight, now)
        return []


# Value -> member: a dict lookup, where `ReasonCode(code)` runs the enum's interpreted
# `__call__` (once per connection, at its DISCONNECT).
_REASONS: Final[dict[int, ReasonCode]] = {code.value: code for code in ReasonCode}


def reason_of(code: int) -> ReasonCode:
    """`code` as a `ReasonCode`, or "unspecified error" for one it does not name."""
    return _REASONS.get(code, ReasonCode.UNSPECIFIED_ERROR)


def publish_frame(inflight: Inflight, peer5: Peer5 | None, dup: bool) -> bytes:
    """The PUBLISH of a tracked message, first sent or (`dup`) re-sent."""
    if peer5 is not None:
        return peer5.encode_publish(inflight, dup)
    return encode_publish(
        inflight.topic, inflight.payload, inflight.qos, inflight.retain, dup, inflight.packet_id
    )
