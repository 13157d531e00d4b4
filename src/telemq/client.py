"""A small blocking MQTT 3.1.1 client on a plain socket, built on `telemq.protocol`'s codec.

What the tools around the broker need and nothing more: the `telemq subs` commands, the
pipeline's sink and jobs, and the demo. Connect (clean or persistent session, user name and
password), publish at QoS 0/1/2 with a window of messages in flight, subscribe, receive
(QoS 0/1/2, acknowledged), disconnect. One thread, no reconnection. It keeps the Spark
extra free of a third-party MQTT library; the pipeline imports it, never the broker.

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
from .protocol import (
    ConnAck,
    Connect,
    ConnectReturnCode,
    Decoder,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    encode,
    encode_publish,
    topic_name_error,
)

__all__ = ["MqttClient", "MqttError", "PutRefusal", "QueuePutter"]

SUBACK_FAILURE = 0x80


class MqttError(Exception):
    """The broker refused us, closed the connection, or did not answer in time."""


class MqttClient:
    """One MQTT 3.1.1 connection (see the module docstring). Not thread-safe."""

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
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id or f"telemq-tool-{uuid.uuid4().hex[:12]}"
        self.username = username
        self.password = password
        self.clean_session = clean_session
        self.keepalive = keepalive
        self.timeout = timeout
        self.window = max(1, window)
        self.completed = 0
        self.session_present = False
        self._sock: socket.socket | None = None
        self._decoder = Decoder()
        self._next_id = 1
        self._inflight: dict[int, int] = {}  # packet id -> position in the publish order
        self._order: collections.deque[int] = collections.deque()  # positions not yet counted
        self._done: set[int] = set()  # positions done, waiting for those before them
        self._published = 0
        self._connack: ConnAck | None = None
        self._subacks: dict[int, SubAck] = {}
        self._received: collections.deque[Publish] = collections.deque()
        self._held_qos2: set[int] = set()  # incoming QoS 2 ids received, PUBREL not yet seen
        self._last_sent = time.monotonic()

    # -- connection ------------------------------------------------------------------------

    def connect(self) -> bool:
        """Open the connection; returns CONNACK's session-present flag."""
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise MqttError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._send(
            encode(
                Connect(
                    client_id=self.client_id,
                    clean_session=self.clean_session,
                    keepalive=self.keepalive,
                    username=self.username,
                    password=None if self.password is None else self.password.encode("utf-8"),
                )
            )
        )
        self._wait(lambda: self._connack is not None, "CONNACK")
        packet = self._connack
        assert packet is not None
        if packet.return_code != ConnectReturnCode.ACCEPTED:
            reason = ConnectReturnCode(packet.return_code).name.lower().replace("_", " ")
            self.close()
            raise MqttError(f"{self.host}:{self.port} refused the connection: {reason}")
        self.session_present = packet.session_present
        return packet.session_present

    def disconnect(self) -> None:
        """Wait for outstanding publications, send DISCONNECT and close."""
        if self._sock is None:
            return
        try:
            self.flush()
            self._send(encode(Disconnect()))
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

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        """Send one PUBLISH, waiting first while `window` messages are in flight."""
        error = topic_name_error(topic)
        if error is not None:
            raise ValueError(error)
        if qos not in (0, 1, 2):
            raise ValueError(f"QoS must be 0, 1 or 2, got {qos}")
        while len(self._inflight) >= self.window:
            self._read(self.timeout, "acknowledgements")
        position = self._published
        self._published += 1
        self._order.append(position)
        packet_id = self._allocate() if qos else 0
        if qos:
            self._inflight[packet_id] = position
        self._send(encode_publish(topic.encode("utf-8"), payload, qos, retain, False, packet_id))
        if not qos:
            self._finish(position)
        self._poll(0.0)

    def flush(self) -> None:
        """Wait until every publication is acknowledged."""
        while self._inflight:
            self._read(self.timeout, "acknowledgements")

    def _allocate(self) -> int:
        while True:
            packet_id = self._next_id
            self._next_id = packet_id % 65535 + 1
            if packet_id not in self._inflight and packet_id not in self._subacks:
                return packet_id

    def _finish(self, position: int) -> None:
        """Publication `position` is done; count it once all before it are done too."""
        self._done.add(position)
        while self._order and self._order[0] in self._done:
            self._done.discard(self._order.popleft())
            self.completed += 1

    # -- subscribing and receiving ---------------------------------------------------------

    def subscribe(self, filters: Iterable[tuple[str, int]]) -> list[int]:
        """SUBSCRIBE and return SUBACK's return codes (granted QoS, or 0x80 refused)."""
        packet_id = self._allocate()
        self._send(encode(Subscribe(packet_id, list(filters))))
        self._wait(lambda: packet_id in self._subacks, "SUBACK")
        return list(self._subacks.pop(packet_id).return_codes)

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

    def _send(self, data: bytes) -> None:
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
            self._send(encode(PingReq()))
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
        for packet in self._decoder.feed(data):
            self._handle(packet)
        return True

    def _handle(self, packet: Packet) -> None:
        if isinstance(packet, ConnAck):
            self._connack = packet
        elif isinstance(packet, PubAck | PubComp):
            position = self._inflight.pop(packet.packet_id, None)
            if position is not None:
                self._finish(position)
        elif isinstance(packet, PubRec):
            self._send(encode(PubRel(packet.packet_id)))
        elif isinstance(packet, SubAck):
            self._subacks[packet.packet_id] = packet
        elif isinstance(packet, Publish):
            self._on_publish(packet)
        elif isinstance(packet, PubRel):
            self._held_qos2.discard(packet.packet_id)
            self._send(encode(PubComp(packet.packet_id)))
        elif isinstance(packet, PingResp):
            pass

    def _on_publish(self, packet: Publish) -> None:
        if packet.qos == 1:
            self._send(encode(PubAck(packet.packet_id)))
        elif packet.qos == 2:
            self._send(encode(PubRec(packet.packet_id)))
            if packet.packet_id in self._held_qos2:
                return  # a re-sent copy of one already received: exactly once
            self._held_qos2.add(packet.packet_id)
        self._received.append(packet)


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
