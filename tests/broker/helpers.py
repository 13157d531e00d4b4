"""Black-box helpers for the broker tests.

Everything here talks to a broker only through a subprocess and TCP sockets on 127.0.0.1:

* ``BrokerProcess`` and ``PahoClient`` come from ``testsupport`` (shared with the MQ tests);
* a tiny raw MQTT 3.1 / 3.1.1 codec and ``RawClient``, written from the specification and
  deliberately independent of telemq's own codec, for the cases a client library would hide
  (CONNACK codes, DUP flags, packet ids, malformed input);
* ``MosquittoSub``, a ``mosquitto_sub`` subprocess whose output is parsed line by line.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Shared with every black-box test (tests/testsupport), re-exported for this area's modules.
from testsupport.held_store import HeldStore as HeldStore
from testsupport.paho import MQTT31, MQTT311, Will
from testsupport.paho import PahoClient as PahoClient
from testsupport.paho import Received as Received
from testsupport.process import LIVE_BROKERS as LIVE_BROKERS
from testsupport.process import BrokerProcess as BrokerProcess
from testsupport.process import BrokerStartError as BrokerStartError
from testsupport.process import free_port as free_port
from testsupport.process import unique, wait_until
from testsupport.requirements import require_command

HOST = "127.0.0.1"

# MQTT control packet types.
CONNECT = 1
CONNACK = 2
PUBLISH = 3
PUBACK = 4
PUBREC = 5
PUBREL = 6
PUBCOMP = 7
SUBSCRIBE = 8
SUBACK = 9
UNSUBSCRIBE = 10
UNSUBACK = 11
PINGREQ = 12
PINGRESP = 13
DISCONNECT = 14

PACKET_NAMES = {
    CONNECT: "CONNECT",
    CONNACK: "CONNACK",
    PUBLISH: "PUBLISH",
    PUBACK: "PUBACK",
    PUBREC: "PUBREC",
    PUBREL: "PUBREL",
    PUBCOMP: "PUBCOMP",
    SUBSCRIBE: "SUBSCRIBE",
    SUBACK: "SUBACK",
    UNSUBSCRIBE: "UNSUBSCRIBE",
    UNSUBACK: "UNSUBACK",
    PINGREQ: "PINGREQ",
    PINGRESP: "PINGRESP",
    DISCONNECT: "DISCONNECT",
}

PROTOCOL_NAMES = {MQTT31: b"MQIsdp", MQTT311: b"MQTT"}

PINGREQ_BYTES = b"\xc0\x00"
DISCONNECT_BYTES = b"\xe0\x00"

START_DEADLINE = 10.0
STOP_DEADLINE = 10.0


# ---------------------------------------------------------------------------------------------
# Raw MQTT codec (client side)
# ---------------------------------------------------------------------------------------------


def encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def encode_str(s: str | bytes) -> bytes:
    raw = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack(">H", len(raw)) + raw


def fixed(first_byte: int, body: bytes) -> bytes:
    return bytes([first_byte]) + encode_varint(len(body)) + body


def connect_packet(
    client_id: str | bytes,
    *,
    version: int = MQTT311,
    clean: bool = True,
    keepalive: int = 60,
    will: Will | None = None,
    username: str | None = None,
    password: bytes | None = None,
    protocol_name: bytes | None = None,
    flags: int | None = None,
) -> bytes:
    """CONNECT; ``flags`` (when given) replaces the computed connect-flags byte verbatim."""
    name = protocol_name if protocol_name is not None else PROTOCOL_NAMES.get(version, b"MQTT")
    computed = 0
    if clean:
        computed |= 0x02
    if will is not None:
        computed |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if password is not None:
        computed |= 0x40
    if username is not None:
        computed |= 0x80
    body = encode_str(name) + bytes([version, computed if flags is None else flags])
    body += struct.pack(">H", keepalive) + encode_str(client_id)
    if will is not None:
        body += encode_str(will.topic) + encode_str(will.payload)
    if username is not None:
        body += encode_str(username)
    if password is not None:
        body += encode_str(password)
    return fixed(CONNECT << 4, body)


def publish_packet(
    topic: str | bytes,
    payload: bytes = b"",
    *,
    qos: int = 0,
    pid: int | None = None,
    retain: bool = False,
    dup: bool = False,
) -> bytes:
    first = (PUBLISH << 4) | (0x08 if dup else 0) | (qos << 1) | (0x01 if retain else 0)
    body = encode_str(topic)
    if qos > 0 or pid is not None:
        if pid is None:
            raise ValueError("QoS > 0 needs a packet id")
        body += struct.pack(">H", pid)
    return fixed(first, body + payload)


def subscribe_packet(
    pid: int, filters: Sequence[tuple[str | bytes, int]], *, flags: int = 0x02
) -> bytes:
    body = struct.pack(">H", pid)
    for topic_filter, qos in filters:
        body += encode_str(topic_filter) + bytes([qos])
    return fixed((SUBSCRIBE << 4) | flags, body)


def unsubscribe_packet(pid: int, filters: Sequence[str | bytes], *, flags: int = 0x02) -> bytes:
    body = struct.pack(">H", pid) + b"".join(encode_str(f) for f in filters)
    return fixed((UNSUBSCRIBE << 4) | flags, body)


def ack_packet(ptype: int, pid: int, *, flags: int | None = None) -> bytes:
    """PUBACK, PUBREC, PUBREL (flags 0b0010 by default) or PUBCOMP."""
    if flags is None:
        flags = 0x02 if ptype == PUBREL else 0
    return fixed((ptype << 4) | flags, struct.pack(">H", pid))


@dataclass(frozen=True)
class Packet:
    type: int
    flags: int
    body: bytes

    @property
    def name(self) -> str:
        return PACKET_NAMES.get(self.type, f"type{self.type}")

    @property
    def pid(self) -> int:
        """Packet id of an ack, SUBACK or UNSUBACK (first two body bytes)."""
        return int(struct.unpack(">H", self.body[:2])[0])

    def __repr__(self) -> str:
        return f"<{self.name} flags={self.flags:#06b} body={self.body[:40]!r}>"


@dataclass(frozen=True)
class Connack:
    session_present: int
    return_code: int


@dataclass(frozen=True)
class Publish:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    pid: int | None


def parse_connack(p: Packet) -> Connack:
    assert p.type == CONNACK, f"expected CONNACK, got {p!r}"
    assert len(p.body) == 2, f"CONNACK body must be 2 bytes: {p!r}"
    return Connack(p.body[0], p.body[1])


def parse_publish(p: Packet) -> Publish:
    assert p.type == PUBLISH, f"expected PUBLISH, got {p!r}"
    qos = (p.flags >> 1) & 0x03
    (tlen,) = struct.unpack(">H", p.body[:2])
    topic = p.body[2 : 2 + tlen].decode("utf-8")
    pos = 2 + tlen
    pid = None
    if qos > 0:
        (pid,) = struct.unpack(">H", p.body[pos : pos + 2])
        pos += 2
    return Publish(topic, p.body[pos:], qos, bool(p.flags & 0x01), bool(p.flags & 0x08), pid)


class ConnectionClosed(Exception):
    """The server closed the connection."""


class RawClient:
    """A blocking MQTT client over a plain socket, for byte-level tests."""

    def __init__(self, port: int, *, timeout: float = 10.0) -> None:
        self.port = port
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self._next_pid = 0

    # -- plumbing -----------------------------------------------------------------------------

    def next_pid(self) -> int:
        self._next_pid = self._next_pid % 65535 + 1
        return self._next_pid

    def send(self, data: bytes) -> None:
        self.sock.settimeout(10.0)
        self.sock.sendall(data)

    def _try_parse(self) -> Packet | None:
        buf = self._buf
        if len(buf) < 2:
            return None
        length, multiplier, pos = 0, 1, 1
        while True:
            if pos >= len(buf):
                return None
            byte = buf[pos]
            length += (byte & 0x7F) * multiplier
            multiplier *= 128
            pos += 1
            if not byte & 0x80:
                break
            if pos > 4:
                raise AssertionError(f"server sent a bad remaining length: {bytes(buf[:8])!r}")
        if len(buf) < pos + length:
            return None
        packet = Packet(buf[0] >> 4, buf[0] & 0x0F, bytes(buf[pos : pos + length]))
        del buf[: pos + length]
        return packet

    def recv_packet(self, timeout: float = 10.0) -> Packet:
        """The next packet; ``TimeoutError`` after ``timeout`` s, ``ConnectionClosed`` on EOF."""
        deadline = time.monotonic() + timeout
        while True:
            packet = self._try_parse()
            if packet is not None:
                return packet
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete packet within {timeout} s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise ConnectionClosed(str(exc)) from exc
            if not data:
                raise ConnectionClosed("EOF")
            self._buf += data

    def try_recv_packet(self, timeout: float) -> Packet | None:
        try:
            return self.recv_packet(timeout)
        except TimeoutError:
            return None

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """True once the server has closed the connection (packets before that are dropped)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                self.recv_packet(remaining)
            except ConnectionClosed:
                return True
            except TimeoutError:
                return False

    def is_open(self) -> bool:
        """Check the connection with a PINGREQ round trip (packets before the PINGRESP are lost)."""
        try:
            self.send(PINGREQ_BYTES)
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                if self.recv_packet(max(0.0, deadline - time.monotonic())).type == PINGRESP:
                    return True
        except (ConnectionClosed, TimeoutError, OSError):
            return False
        return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- protocol -----------------------------------------------------------------------------

    def connect(self, client_id: str | bytes, **kwargs: Any) -> Connack:
        self.send(connect_packet(client_id, **kwargs))
        return parse_connack(self.recv_packet())

    def disconnect(self) -> None:
        with contextlib.suppress(OSError):
            self.send(DISCONNECT_BYTES)
        self.close()

    def subscribe(
        self, filters: Sequence[tuple[str | bytes, int]], *, pid: int | None = None
    ) -> list[int]:
        """SUBSCRIBE and return the SUBACK return codes (the next packet must be the SUBACK)."""
        pid = self.next_pid() if pid is None else pid
        self.send(subscribe_packet(pid, filters))
        p = self.recv_packet()
        assert p.type == SUBACK, f"expected SUBACK, got {p!r}"
        assert p.pid == pid, f"SUBACK for packet id {p.pid}, expected {pid}"
        return list(p.body[2:])

    def unsubscribe(self, filters: Sequence[str | bytes]) -> None:
        pid = self.next_pid()
        self.send(unsubscribe_packet(pid, filters))
        p = self.recv_packet()
        assert p.type == UNSUBACK, f"expected UNSUBACK, got {p!r}"
        assert p.pid == pid

    def publish(
        self,
        topic: str | bytes,
        payload: bytes,
        *,
        qos: int = 0,
        retain: bool = False,
        dup: bool = False,
        pid: int | None = None,
        complete: bool = True,
    ) -> int | None:
        """PUBLISH; with ``complete`` run the QoS 1/2 handshake (the next packets must be acks)."""
        if qos > 0 and pid is None:
            pid = self.next_pid()
        self.send(publish_packet(topic, payload, qos=qos, pid=pid, retain=retain, dup=dup))
        if qos > 0 and complete:
            assert pid is not None
            self.expect_ack(PUBACK if qos == 1 else PUBREC, pid)
            if qos == 2:
                self.send(ack_packet(PUBREL, pid))
                self.expect_ack(PUBCOMP, pid)
        return pid

    def expect_ack(self, ptype: int, pid: int, timeout: float = 10.0) -> None:
        p = self.recv_packet(timeout)
        assert p.type == ptype, f"expected {PACKET_NAMES[ptype]} {pid}, got {p!r}"
        assert p.pid == pid, f"expected {PACKET_NAMES[ptype]} for id {pid}, got id {p.pid}"
        expected_flags = 0x02 if ptype == PUBREL else 0
        assert p.flags == expected_flags, f"bad fixed-header flags on {p!r}"

    def expect_publish(self, timeout: float = 10.0) -> Publish:
        return parse_publish(self.recv_packet(timeout))

    def collect(self, n: int, timeout: float = 10.0, *, ack: bool = True) -> list[Publish]:
        """Receive ``n`` PUBLISH packets, answering the QoS 1/2 handshakes when ``ack``."""
        deadline = time.monotonic() + timeout
        got: list[Publish] = []
        while len(got) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"received {len(got)} of {n} messages: {got!r}")
            p = self.recv_packet(remaining)
            if p.type == PUBREL and ack:
                self.send(ack_packet(PUBCOMP, p.pid))
                continue
            msg = parse_publish(p)
            got.append(msg)
            if ack and msg.qos == 1:
                assert msg.pid is not None
                self.send(ack_packet(PUBACK, msg.pid))
            elif ack and msg.qos == 2:
                assert msg.pid is not None
                self.send(ack_packet(PUBREC, msg.pid))
        return got


def collect_until(client: RawClient, last: bytes, timeout: float = 10.0) -> list[Publish]:
    """Receive (and ack) messages until one with payload ``last`` arrives."""
    got: list[Publish] = []
    while not got or got[-1].payload != last:
        got += client.collect(1, timeout)
    return got


def raw_connected(port: int, client_id: str | None = None, **kwargs: Any) -> RawClient:
    """A RawClient that has been accepted (CONNACK 0)."""
    client = RawClient(port)
    ack = client.connect(client_id if client_id is not None else unique("raw"), **kwargs)
    assert ack.return_code == 0, f"CONNECT refused: {ack}"
    return client


def write_config(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def served_over_http(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path, text: str = ""
) -> tuple[BrokerProcess, int]:
    """A broker started with the configuration `text` and an HTTP listener on a free
    port (`/metrics`, the admin API, WebSockets); the broker and that port."""
    http_port = free_port()
    config = tmp_path / f"http-{http_port}.toml"
    config.write_text(f'{text}\n[[http]]\nhost = "127.0.0.1"\nport = {http_port}\n', "utf-8")
    return broker_factory(config=config), http_port


def roundtrip(client: PahoClient, qos: int = 1) -> None:
    """Prove a connected paho client still works: subscribe, publish to itself, receive."""
    topic = unique("rt/")
    client.subscribe(topic, qos)
    payload = uuid.uuid4().bytes
    client.publish(topic, payload, qos=qos)
    got = client.wait_messages(1, topic=topic)
    assert got[0].payload == payload
    client.unsubscribe(topic)


# ---------------------------------------------------------------------------------------------
# mosquitto clients
# ---------------------------------------------------------------------------------------------

MOSQ_FORMAT = "MSG|%q|%r|%t|%p"


@dataclass(frozen=True)
class MosqMessage:
    topic: str
    payload: str
    qos: int
    retain: bool


class MosquittoSub:
    """``mosquitto_sub -d`` in the background; its stdout lines are collected by a thread."""

    def __init__(self, port: int, topics: Iterable[str], *args: str, version: str = "mqttv311"):
        # stdbuf: line-buffered stdout, so that lines arrive while the process runs.
        sub = require_command("mosquitto_sub", "mosquitto-clients")
        cmd = ["stdbuf", "-oL", sub, "-h", HOST, "-p", str(port), "-V", version, "-d"]
        for topic in topics:
            cmd += ["-t", topic]
        cmd += ["-F", MOSQ_FORMAT, *args]
        self.cmd = cmd
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait_line(self, predicate: Callable[[str], bool], timeout: float = 10.0) -> str:
        with self._cond:
            found: list[str] = []

            def check() -> bool:
                found[:] = [line for line in self.lines if predicate(line)]
                return bool(found)

            if not self._cond.wait_for(check, timeout):
                raise TimeoutError(f"{self.cmd}: no matching line; output:\n" + self.output())
            return found[0]

    def wait_subscribed(self, timeout: float = 10.0) -> None:
        self.wait_line(lambda line: "received SUBACK" in line, timeout)

    def messages(self) -> list[MosqMessage]:
        return parse_mosq_lines(self.output())

    def wait_messages(self, n: int, timeout: float = 10.0) -> list[MosqMessage]:
        ok = wait_until(lambda: len(self.messages()) >= n, timeout)
        if not ok:
            raise TimeoutError(f"{n} message(s) expected; output:\n" + self.output())
        return self.messages()

    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_exit(self, timeout: float = 15.0) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(5)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


def mosquitto_pub(
    port: int, *args: str, version: str = "mqttv311", stdin: bytes | None = None
) -> str:
    """Run ``mosquitto_pub`` to completion (deadline 20 s); returns its output, asserts rc 0."""
    pub = require_command("mosquitto_pub", "mosquitto-clients")
    cmd = [pub, "-h", HOST, "-p", str(port), "-V", version, *args]
    result = subprocess.run(
        cmd,
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=20,
        check=False,
    )
    output = result.stdout.decode(errors="replace")
    assert result.returncode == 0, f"{cmd} exited with {result.returncode}:\n{output}"
    return output


def mosquitto_sub_run(port: int, *args: str, version: str = "mqttv311") -> tuple[int, str]:
    """Run ``mosquitto_sub`` to completion (deadline 30 s); returns (exit code, output)."""
    sub = require_command("mosquitto_sub", "mosquitto-clients")
    cmd = [sub, "-h", HOST, "-p", str(port), "-V", version, *args]
    result = subprocess.run(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=30,
        check=False,
    )
    return result.returncode, result.stdout.decode(errors="replace")


def parse_mosq_lines(output: str) -> list[MosqMessage]:
    out = []
    for line in output.splitlines():
        if line.startswith("MSG|"):
            _, qos, retain, topic, payload = line.split("|", 4)
            out.append(MosqMessage(topic, payload, int(qos), retain == "1"))
    return out
