"""A small blocking MQTT 3.1.1 / 5.0 client on a plain socket, built on `telemq.protocol`.

What the tools around the broker need and nothing more: the `telemq subs` commands, the
pipeline's sink and jobs, and the demo. Connect (clean or persistent session, user name and
password), publish at QoS 0/1/2 with a window of messages in flight, subscribe, receive
(QoS 0/1/2, acknowledged), disconnect. One thread, no reconnection. It keeps the Spark
extra free of a third-party MQTT library; the pipeline imports it, never the broker.

`protocol_level=5` speaks MQTT 5.0: a persistent session asks for a Session Expiry Interval
(for ever unless given), a publication may carry properties, and a refusal by the broker (a
PUBACK or PUBREC reason code of 0x80 or more, a DISCONNECT) raises `MqttError` naming the
reason code; at 3.1.1 the broker cannot say either.

`completed` counts the publications, in the order they were given, that are done with: QoS 0
once written to the socket, QoS 1 on PUBACK, QoS 2 on PUBCOMP. The sink records it as its
progress, so what a crash can repeat is at most the window in flight.

`QueuePutter` puts messages on one queue with telemq's `Put` command (docs/mq.md), a window
of commands at a time, and counts the broker's answers the same way.
"""

from __future__ import annotations

import collections
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .commands import (
    CONTROL_QUEUE,
    RESPONSE_PREFIX,
    ReasonCode,
    encode_command,
    parse_reply,
    reply_correl_id,
)
from .commands.codec import MAX_COMMAND_BYTES
from .protocol import ConnectReturnCode, MalformedPacket, Properties, Publish
from .protocol import ReasonCode as MqttReason
from .protocol.client import (
    ClientConnection,
    ConnectAnswered,
    Disconnected,
    SubscribeAnswered,
    publish_error,
)

__all__ = ["MqttClient", "MqttError", "PutRefusal", "QueuePutter"]

SUBACK_FAILURE = 0x80


class MqttError(Exception):
    """The broker refused us, closed the connection, or did not answer in time."""


class MqttClient:
    """One MQTT 3.1.1 or 5.0 connection (see the module docstring). Not thread-safe.

    The socket edge of `protocol.ClientConnection`, which keeps the packet ids, the window
    in flight and `completed`; this class only reads, writes, waits and keeps alive.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 1883,
        client_id: str | None = None,
        *,
        username: str | None = None,
        password: str | None = None,
        clean_session: bool = True,
        keepalive: int = 60,
        timeout: float = 30.0,
        window: int = 64,
        protocol_level: int = 4,
        session_expiry_interval: int | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id or f"telemq-tool-{uuid.uuid4().hex[:12]}"
        self.username = username
        self.password = password
        self.clean_session = clean_session
        self.keepalive = keepalive
        self.timeout = timeout
        self.session_present = False
        self.session_expiry_interval = session_expiry_interval  # 5.0 only
        self._core = ClientConnection(window, protocol_level)
        self._sock: socket.socket | None = None
        self._connack: ConnectAnswered | None = None
        self._subacks: dict[int, SubscribeAnswered] = {}
        self._received: collections.deque[Publish] = collections.deque()
        self._last_sent = time.monotonic()

    @property
    def window(self) -> int:
        return self._core.window

    @property
    def completed(self) -> int:
        """Publications done with, in order (see the module docstring)."""
        return self._core.completed

    # -- connection ------------------------------------------------------------------------

    def connect(self) -> bool:
        """Open the connection; returns CONNACK's session-present flag."""
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise MqttError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._core.connect(
            self.client_id,
            clean_session=self.clean_session,
            keepalive=self.keepalive,
            username=self.username,
            password=None if self.password is None else self.password.encode("utf-8"),
            session_expiry_interval=self.session_expiry_interval,
        )
        self._send()
        self._wait(lambda: self._connack is not None, "CONNACK")
        answer = self._connack
        assert answer is not None
        if answer.return_code != ConnectReturnCode.ACCEPTED:
            if self._core.protocol_level == 5:
                reason = _reason_label(answer.return_code)
            else:
                reason = ConnectReturnCode(answer.return_code).name.lower().replace("_", " ")
            self.close()
            raise MqttError(f"{self.host}:{self.port} refused the connection: {reason}")
        self.session_present = answer.session_present
        return answer.session_present

    def disconnect(self) -> None:
        """Wait for outstanding publications, send DISCONNECT and close."""
        if self._sock is None:
            return
        try:
            self.flush()
            self._core.disconnect()
            self._send()
        finally:
            self.close()

    def close(self) -> None:
        """Close the socket without waiting for anything (no DISCONNECT: a will fires)."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def __enter__(self) -> MqttClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.disconnect()
        else:
            self.close()

    # -- publishing ------------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> None:
        """Send one PUBLISH, waiting first while `window` messages are in flight.
        `properties`: MQTT 5.0 only (ValueError at 3.1.1)."""
        problem = publish_error(topic, qos)
        if problem is not None:
            raise ValueError(problem)
        if qos and self._core.window_full:
            while self._core.window_full:
                self._read(self.timeout, "acknowledgements")
        self._core.publish(topic, payload, qos, retain, properties)
        self._send()
        self._poll(0.0)

    def flush(self) -> None:
        """Wait until every publication is acknowledged."""
        while self._core.in_flight:
            self._read(self.timeout, "acknowledgements")
        self._check_refusals()

    def _check_refusals(self) -> None:
        refusals = self._core.refusals
        if refusals:
            packet_id, code = refusals[0]
            count = len(refusals)
            refusals.clear()
            raise MqttError(
                f"{self.host}:{self.port} refused {count} publication(s), the first "
                f"(packet id {packet_id}) with {_reason_label(code)}"
            )

    # -- subscribing and receiving ---------------------------------------------------------

    def subscribe(self, filters: Iterable[tuple[str, int]]) -> list[int]:
        """SUBSCRIBE and return SUBACK's return codes (granted QoS, or 0x80 refused)."""
        packet_id = self._core.subscribe(filters)
        self._send()
        self._wait(lambda: packet_id in self._subacks, "SUBACK")
        return self._subacks.pop(packet_id).return_codes

    def receive(self, timeout: float) -> Publish | None:
        """The next PUBLISH from the broker (acknowledged), or None after `timeout` seconds.

        A timeout of 0 only returns what has already been read.
        """
        deadline = time.monotonic() + timeout
        while not self._received:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._poll(min(left, max(1.0, self.keepalive / 2)))
        return self._received.popleft()

    # -- I/O -------------------------------------------------------------------------------

    def _send(self) -> None:
        data = self._core.data_to_send()
        if not data:
            return
        if self._sock is None:
            raise MqttError("not connected")
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise MqttError(f"connection to {self.host}:{self.port} lost: {exc}") from exc
        self._last_sent = time.monotonic()

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not ready():
            left = deadline - time.monotonic()
            if left <= 0:
                raise MqttError(f"no {what} from {self.host}:{self.port} in {self.timeout:g}s")
            self._read(left, what)

    def _read(self, timeout: float, what: str) -> None:
        if not self._poll(timeout):
            raise MqttError(f"no {what} from {self.host}:{self.port} in {timeout:g}s")

    def _poll(self, timeout: float) -> bool:
        """Read and handle what the broker sent within `timeout`; False if nothing came."""
        sock = self._sock
        if sock is None:
            raise MqttError("not connected")
        if self.keepalive and time.monotonic() - self._last_sent > self.keepalive / 2:
            self._core.ping()
            self._send()
        sock.settimeout(timeout if timeout > 0 else 0.0)
        try:
            data = sock.recv(65536)
        except (BlockingIOError, TimeoutError):
            return False
        except OSError as exc:
            raise MqttError(f"connection to {self.host}:{self.port} lost: {exc}") from exc
        finally:
            sock.settimeout(self.timeout)
        if not data:
            raise MqttError(f"{self.host}:{self.port} closed the connection")
        try:
            events = self._core.receive_data(data)
        except MalformedPacket as exc:
            raise MqttError(f"{self.host}:{self.port} sent a malformed packet: {exc}") from exc
        for event in events:
            if isinstance(event, ConnectAnswered):
                self._connack = event
            elif isinstance(event, SubscribeAnswered):
                self._subacks[event.packet_id] = event
            elif isinstance(event, Disconnected):
                detail = f": {event.reason}" if event.reason else ""
                raise MqttError(
                    f"{self.host}:{self.port} closed the connection with "
                    f"{_reason_label(event.reason_code)}{detail}"
                )
            else:
                self._received.append(event.publish)
        self._send()  # the acknowledgements the core queued
        if self._core.refusals:
            self._check_refusals()
        return True


def _reason_label(code: int) -> str:
    """`0x87 not authorized`, for an MQTT 5.0 reason code."""
    try:
        return MqttReason(code).label
    except ValueError:
        return f"reason code 0x{code:02X}"


@dataclass(frozen=True, slots=True)
class PutRefusal:
    """A Put the broker answered with an error: which one, and why."""

    position: int  # 0-based, in the order of `QueuePutter.put` calls
    topic: str
    reason: int  # the MQ reason code
    detail: str

    def __str__(self) -> str:
        return f"reason {self.reason}: {self.detail}" if self.detail else f"reason {self.reason}"


class QueuePutter:
    """Put messages on one queue with telemq's `Put` command, `window` commands at a time.

    Every Put is a request with its own CorrelId, sent to the control queue at the message's
    QoS; its reply (on ``SYSTEM.BROKER.RESPONSE/<client id>``) says whether the message is
    on the queue. `completed` counts the Puts, in order, that have their answer; `delivered`
    and `refused` split them, and `first_refusal` tells why the first refused one was.
    """

    def __init__(self, client: MqttClient, queue: str, *, window: int = 64) -> None:
        self.client = client
        self.queue = queue
        self.window = max(1, window)
        self.reply_topic = RESPONSE_PREFIX + client.client_id
        self.completed = 0
        self.delivered = 0
        self.refused = 0
        self.first_refusal: PutRefusal | None = None
        self._waiting: dict[str, tuple[int, str]] = {}  # CorrelId -> (position, topic)
        self._order: collections.deque[int] = collections.deque()
        self._done: set[int] = set()
        self._count = 0
        self._listening = False

    def put(self, topic: str, body: bytes, qos: int = 1) -> None:
        """Send one Put, waiting first while `window` of them have no answer yet."""
        self._listen()
        while len(self._waiting) >= self.window:
            self._await_reply()
        position = self._count
        self._count += 1
        correl = f"{position + 1:016X}"  # never zero
        payload = encode_command(
            {"Command": ["Put"], "QName": [self.queue], "Topic": [topic]},
            {"CorrelId": correl},
            body,
        )
        self._order.append(position)
        if len(payload) > MAX_COMMAND_BYTES:
            # The broker would refuse it (or, past its packet limit, drop the connection).
            detail = f"command of {len(payload)} bytes exceeds the limit of {MAX_COMMAND_BYTES}"
            self._answered(position, topic, ReasonCode.PARM_SYNTAX_ERROR, detail)
            return
        self._waiting[correl] = (position, topic)
        self.client.publish(CONTROL_QUEUE, payload, qos)
        while (message := self.client.receive(0)) is not None:
            self._take(message)

    def flush(self) -> None:
        """Wait for the answer to every Put sent."""
        while self._waiting:
            self._await_reply()

    def _listen(self) -> None:
        if self._listening:
            return
        codes = self.client.subscribe([(self.reply_topic, 1)])
        if codes[0] == SUBACK_FAILURE:
            raise MqttError(f"the broker refused the subscription to {self.reply_topic}")
        self._listening = True

    def _await_reply(self) -> None:
        message = self.client.receive(self.client.timeout)
        if message is None:
            raise MqttError(
                f"no answer to {len(self._waiting)} Put command(s) from"
                f" {self.client.host}:{self.client.port} in {self.client.timeout:g}s"
            )
        self._take(message)

    def _take(self, message: Publish) -> None:
        """Count a reply to one of our Puts; anything else on the topic is ignored."""
        if message.topic != self.reply_topic:
            return
        try:
            correl = reply_correl_id(message.payload)
            completion, reasons, extra = parse_reply(message.payload)
        except (ValueError, KeyError, SyntaxError):
            return  # not a reply: someone else published on the reply topic
        waiting = self._waiting.pop(correl, None)
        if waiting is None:
            return
        position, topic = waiting
        if completion == "ok":
            self._answered(position, topic)
        else:
            code = reasons[0].code if reasons else 0
            self._answered(position, topic, code, str(extra.get("Detail", [""])[0]))

    def _answered(self, position: int, topic: str, refused: int = 0, detail: str = "") -> None:
        """Put `position` has its answer: delivered, or refused with reason `refused`."""
        if not refused:
            self.delivered += 1
        else:
            self.refused += 1
            if self.first_refusal is None:
                self.first_refusal = PutRefusal(position, topic, refused, detail)
        self._done.add(position)
        while self._order and self._order[0] in self._done:
            self._done.discard(self._order.popleft())
            self.completed += 1
