"""Fuzz a live telemq broker with random and mutated MQTT packet streams.

Run it as a script (``python3 fuzz/fuzz_broker.py --help``) or import it (the test suite
runs it bounded). It starts a broker on 127.0.0.1 (or targets one with ``--port``), connects
K well-behaved paho clients that exchange numbered QoS 0/1/2 messages, and M fuzz
connections that send streams built from a seeded corpus of valid sessions (CONNECT, then
PUBLISH, SUBSCRIBE, acknowledgements, ...) after random mutations: bit flips, byte changes,
insertions, deletions, truncation, splicing of two streams, corrupted remaining lengths,
duplicated chunks, or plain random bytes. At the end it checks that

* the broker process is still alive (and, when it started the broker, that its log holds no
  traceback);
* the well-behaved clients lost nothing: every acknowledged QoS 1/2 message arrived, QoS 2
  exactly once, and none of them was disconnected;
* no connection leaked: ``$SYS/broker/clients/connected`` and the broker's open file
  descriptors return to what the well-behaved clients account for.

It prints a summary and exits with 0 when every check passed, 1 otherwise. The mutation
functions are pure (a `random.Random` in, bytes out), so the decoder tests reuse them.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from telemq.protocol import (
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Subscribe,
    Unsubscribe,
    Will,
    encode,
)

HOST = "127.0.0.1"
MAX_REMAINING_LENGTH = 268_435_455
PROTOCOL_NAMES = {3: "MQIsdp", 4: "MQTT"}

# ---------------------------------------------------------------------------------------------
# Corpus and mutations (pure: the same seed gives the same bytes)
# ---------------------------------------------------------------------------------------------

Stream = list[bytes]  # one encoded packet per element, so that frames can be told apart

FUZZ_TOPICS = ("fz/a", "fz/b/c", "fz/$x", "$SYS/fz", "fz//d", "fz/é", "f" * 70)
FUZZ_FILTERS = ("fz/#", "#", "+/b/+", "fz/+", "$SYS/#", "+", "fz/a", "/#", "fz/+/+/#")
MUTATIONS = (
    "flip",
    "set",
    "insert",
    "delete",
    "truncate",
    "splice",
    "length",
    "duplicate",
    "random",
)


def _client_packet(rng: random.Random, level: int) -> Packet:
    """One packet a connected client could send, with plausible values."""
    kind = rng.randrange(9)
    packet_id = rng.randint(1, 65535)
    if kind <= 2:
        qos = rng.randint(0, 2)
        return Publish(
            topic=rng.choice(FUZZ_TOPICS),
            payload=rng.randbytes(rng.choice((0, 3, 40, 300))),
            qos=qos,
            retain=rng.random() < 0.2,
            dup=qos > 0 and rng.random() < 0.2,
            packet_id=packet_id if qos else 0,
        )
    if kind == 3:
        topics = [(rng.choice(FUZZ_FILTERS), rng.randint(0, 2)) for _ in range(rng.randint(1, 3))]
        return Subscribe(packet_id, topics)
    if kind == 4:
        return Unsubscribe(packet_id, [rng.choice(FUZZ_FILTERS)])
    if kind == 5:
        return PubAck(packet_id)
    if kind == 6:
        return PubRec(packet_id)
    if kind == 7:
        return rng.choice((PubRel(packet_id), PubComp(packet_id)))
    return PingReq()


def corpus_stream(rng: random.Random, prefix: str = "fz") -> Stream:
    """A valid client session: CONNECT, then up to 8 packets, sometimes a DISCONNECT."""
    level = rng.choice((3, 4))
    will = None
    if rng.random() < 0.3:
        will = Will(rng.choice(FUZZ_TOPICS), rng.randbytes(5), rng.randint(0, 2), False)
    username = rng.choice((None, None, "fuzzer", "%c/#"))
    password = rng.randbytes(6) if username is not None and rng.random() < 0.5 else None
    connect = Connect(
        client_id=f"{prefix}{rng.getrandbits(40):010x}",
        protocol_level=level,
        clean_session=rng.random() < 0.8,
        keepalive=rng.choice((0, 1, 30, 60)),
        will=will,
        username=username,
        password=password,
        protocol_name=PROTOCOL_NAMES[level],
    )
    frames = [encode(connect)]
    frames += [encode(_client_packet(rng, level)) for _ in range(rng.randint(0, 8))]
    if rng.random() < 0.2:
        frames.append(encode(Disconnect()))
    return frames


def make_corpus(seed: int | str, size: int = 64, prefix: str = "fz") -> list[Stream]:
    """`size` valid streams, the same for the same seed."""
    rng = random.Random(f"corpus:{seed}")
    return [corpus_stream(rng, prefix) for _ in range(size)]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        digit, value = value & 0x7F, value >> 7
        out.append(digit | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _length_bytes(frame: bytes) -> int:
    """How many remaining-length bytes follow the first byte of a well-formed frame."""
    count = 1
    while count < 4 and count < len(frame) and frame[count] & 0x80:
        count += 1
    return count


def corrupt_length(frame: bytes, rng: random.Random) -> bytes:
    """The frame with its remaining length replaced by a wrong, huge or invalid encoding."""
    if len(frame) < 2:
        return frame
    size = _length_bytes(frame)
    body = frame[1 + size :]
    choice = rng.randrange(6)
    if choice == 0:
        field_ = _varint(max(0, len(body) + rng.choice((-3, -2, -1, 1, 2, 3))))
    elif choice == 1:
        field_ = _varint(rng.randint(0, MAX_REMAINING_LENGTH))
    elif choice == 2:
        field_ = _varint(MAX_REMAINING_LENGTH)
    elif choice == 3:
        field_ = b"\xff\xff\xff\xff" + bytes([rng.randrange(256)])  # a fifth length byte
    elif choice == 4:
        field_ = b"\x80" * rng.randint(1, 3) + b"\x00"  # a non-minimal encoding of 0
    else:
        field_ = _varint(len(body))[:-1] + b"\x80"  # a length that never ends
    return frame[:1] + field_ + body


def mutate(stream: Sequence[bytes], rng: random.Random, corpus: Sequence[Stream]) -> bytes:
    """1 to 4 random mutations of `stream` (a list of frames); returns the bytes to send."""
    frames = list(stream)
    if rng.random() < 0.3 and frames:
        index = rng.randrange(len(frames))
        frames[index] = corrupt_length(frames[index], rng)
    data = bytearray(b"".join(frames))
    for _ in range(rng.randint(1, 4)):
        operation = rng.choice(MUTATIONS)
        position = rng.randrange(len(data) + 1)
        if operation == "flip" and data:
            index = min(position, len(data) - 1)
            data[index] ^= 1 << rng.randrange(8)
        elif operation == "set" and data:
            data[min(position, len(data) - 1)] = rng.choice((0x00, 0x7F, 0x80, 0xFF, 0x30))
        elif operation == "insert":
            data[position:position] = rng.randbytes(rng.randint(1, 4))
        elif operation == "delete" and data:
            del data[position : position + rng.randint(1, 4)]
        elif operation == "truncate":
            del data[position:]
        elif operation == "splice" and corpus:
            other = b"".join(rng.choice(corpus))
            data = data[:position] + other[rng.randrange(len(other) + 1) :]
        elif operation == "length" and frames:
            frame = corrupt_length(rng.choice(frames), rng)
            data[position:position] = frame
        elif operation == "duplicate" and data:
            start = rng.randrange(len(data))
            data[position:position] = data[start : start + rng.randint(1, 32)]
        elif operation == "random":
            data[position:position] = rng.randbytes(rng.randint(1, 64))
    return bytes(data)


def fuzz_input(rng: random.Random, corpus: Sequence[Stream]) -> bytes:
    """What one fuzz connection sends: mostly mutated streams, some random or valid ones."""
    roll = rng.random()
    if roll < 0.1:
        return rng.randbytes(rng.randint(1, 200))
    stream = rng.choice(corpus)
    if roll < 0.2:
        return b"".join(stream)
    return mutate(stream, rng, corpus)


def split_points(data: bytes, rng: random.Random) -> list[bytes]:
    """`data` cut into 1 to 4 chunks at random places."""
    cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randint(0, 3)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


# ---------------------------------------------------------------------------------------------
# The broker under test
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def probe(port: int, timeout: float = 2.0) -> bool:
    """True when a CONNECT on `port` is answered with CONNACK 0."""
    client_id = f"probe{random.getrandbits(32):08x}".encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x00" + struct.pack(">H", len(client_id)) + client_id
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall(bytes([0x10, len(body)]) + body)
            answer = b""
            while len(answer) < 4:
                chunk = sock.recv(4 - len(answer))
                if not chunk:
                    return False
                answer += chunk
            with contextlib.suppress(OSError):
                sock.sendall(b"\xe0\x00")
            return answer == b"\x20\x02\x00\x00"
    except OSError:
        return False


@dataclass
class BrokerUnderTest:
    """A broker subprocess started here (None `proc` when an existing one is targeted)."""

    port: int
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    log_path: Path | None = None
    workdir: tempfile.TemporaryDirectory[str] | None = None

    @classmethod
    def start(cls, store: str = "sqlite", deadline: float = 15.0) -> BrokerUnderTest:
        workdir = tempfile.TemporaryDirectory(prefix="telemq-fuzz-")
        root = Path(workdir.name)
        port = free_port()
        config = root / "telemq.toml"
        config.write_text(
            "[limits]\nmax_packet_size = 262144\nconnect_timeout = 5.0\n"
            f'[store]\nkind = "{store}"\nsync = "normal"\n',
            encoding="utf-8",
        )
        log_path = root / "broker.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "telemq",
                    "serve",
                    "--config",
                    str(config),
                    "--host",
                    HOST,
                    "--port",
                    str(port),
                    "--data-dir",
                    str(root / "data"),
                    "--sys-interval",
                    "0.5",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=root,
            )
        broker = cls(port, proc, proc.pid, log_path, workdir)
        end = time.monotonic() + deadline
        while not probe(port):
            if proc.poll() is not None or time.monotonic() > end:
                log_text = broker.log_tail()
                broker.stop()
                raise RuntimeError(f"the broker did not start on port {port}\n{log_text}")
            time.sleep(0.05)
        return broker

    @property
    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return probe(self.port)

    def open_fds(self) -> int | None:
        """Open file descriptors of the broker process (Linux), or None if unknown."""
        if self.pid is None:
            return None
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return None

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None:
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def tracebacks(self) -> list[str]:
        """Lines of the broker log that report an unhandled exception."""
        if self.log_path is None:
            return []
        text = self.log_path.read_text(errors="replace").splitlines()
        markers = ("Traceback", "Exception in callback", "exception was never retrieved")
        return [line for line in text if any(marker in line for marker in markers)]

    def stop(self) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(15)
            code = self.proc.returncode
        if self.workdir is not None:
            self.workdir.cleanup()
            self.workdir = None
        return code


# ---------------------------------------------------------------------------------------------
# Well-behaved clients and the $SYS monitor (paho)
# ---------------------------------------------------------------------------------------------


class WellBehaved:
    """A paho client that publishes numbered messages and receives those of a neighbour."""

    def __init__(self, port: int, index: int, run: str, source: int) -> None:
        import paho.mqtt.client as paho
        from paho.mqtt.enums import CallbackAPIVersion

        self.index = index
        self.topic = f"fuzzwb/{run}/{index}"
        self.source_topic = f"fuzzwb/{run}/{source}"
        self.client = paho.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=f"wb{run}{index}",
            protocol=paho.MQTTv311,
            clean_session=True,
            reconnect_on_failure=False,
        )
        self.client.max_inflight_messages_set(50)
        self.port = port
        self.lock = threading.Lock()
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        self.disconnects = 0
        self.received: list[tuple[int, int]] = []  # (sequence, qos) from the neighbour
        self.strays = 0
        self.sent: list[tuple[int, int, Any]] = []  # (sequence, qos, MQTTMessageInfo)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if int(rc.value) == 0:
            self.connected.set()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        with self.lock:
            self.disconnects += 1

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        self.subscribed.set()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        try:
            sender, sequence, qos = (int(part) for part in bytes(message.payload).split(b":"))
        except ValueError:
            sender, sequence, qos = -1, -1, -1
        with self.lock:
            if message.topic == self.source_topic and sender >= 0:
                self.received.append((sequence, qos))
            else:
                self.strays += 1

    def start(self, timeout: float = 10.0) -> None:
        self.client.connect(HOST, self.port, keepalive=30)
        self.client.loop_start()
        if not self.connected.wait(timeout):
            raise RuntimeError(f"well-behaved client {self.index}: no CONNACK")
        self.client.subscribe(self.source_topic, 2)
        if not self.subscribed.wait(timeout):
            raise RuntimeError(f"well-behaved client {self.index}: no SUBACK")

    def publish_next(self) -> None:
        sequence = len(self.sent)
        qos = sequence % 3
        payload = f"{self.index}:{sequence}:{qos}".encode()
        info = self.client.publish(self.topic, payload, qos=qos)
        self.sent.append((sequence, qos, info))

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.client.disconnect()
        self.client.loop_stop()


class SysMonitor:
    """Follows `$SYS/broker/clients/connected`."""

    def __init__(self, port: int, run: str) -> None:
        import paho.mqtt.client as paho
        from paho.mqtt.enums import CallbackAPIVersion

        self.client = paho.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=f"mon{run}",
            protocol=paho.MQTTv311,
            clean_session=True,
            reconnect_on_failure=False,
        )
        self.port = port
        self.connected_clients: int | None = None
        self.updates = 0
        self.ready = threading.Event()
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        client.subscribe("$SYS/broker/clients/connected", 0)
        self.ready.set()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        with contextlib.suppress(ValueError):
            self.connected_clients = int(bytes(message.payload))
            self.updates += 1

    def start(self, timeout: float = 10.0) -> None:
        self.client.connect(HOST, self.port, keepalive=30)
        self.client.loop_start()
        if not self.ready.wait(timeout):
            raise RuntimeError("$SYS monitor: no CONNACK")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.client.disconnect()
        self.client.loop_stop()


# ---------------------------------------------------------------------------------------------
# Fuzz connections
# ---------------------------------------------------------------------------------------------


@dataclass
class FuzzStats:
    iterations: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    closed_by_broker: int = 0
    refused: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    def add(self, other: FuzzStats) -> None:
        self.iterations += other.iterations
        self.bytes_sent += other.bytes_sent
        self.bytes_received += other.bytes_received
        self.closed_by_broker += other.closed_by_broker
        self.refused += other.refused
        self.outcomes.update(other.outcomes)


def _one_connection(port: int, rng: random.Random, corpus: Sequence[Stream]) -> FuzzStats:
    """Open a connection, send one fuzz input in random chunks, read a little, end it."""
    stats = FuzzStats(iterations=1)
    data = fuzz_input(rng, corpus)
    try:
        sock = socket.create_connection((HOST, port), timeout=2.0)
    except ConnectionRefusedError:
        stats.refused += 1
        return stats
    except OSError:
        stats.outcomes["connect-error"] += 1
        return stats
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for chunk in split_points(data, rng):
            sock.sendall(chunk)
            stats.bytes_sent += len(chunk)
            if rng.random() < 0.2:
                time.sleep(0.005)
        if rng.random() < 0.7:
            # Read for a bounded time: a subscription to `#` may receive without end.
            read_until = time.monotonic() + rng.choice((0.01, 0.05, 0.2))
            with contextlib.suppress(TimeoutError):
                while (remaining := read_until - time.monotonic()) > 0:
                    sock.settimeout(remaining)
                    chunk = sock.recv(65536)
                    if not chunk:
                        stats.closed_by_broker += 1
                        break
                    stats.bytes_received += len(chunk)
        ending = rng.randrange(3)
        if ending == 0:
            # An abortive close (RST).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            stats.outcomes["reset"] += 1
        elif ending == 1:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            stats.outcomes["half-close"] += 1
        else:
            stats.outcomes["close"] += 1
    except (ConnectionResetError, BrokenPipeError, TimeoutError):
        stats.closed_by_broker += 1
    except OSError:
        stats.outcomes["os-error"] += 1
    finally:
        sock.close()
    return stats


def _fuzz_worker(
    port: int,
    seed: int,
    index: int,
    corpus: Sequence[Stream],
    should_stop: Callable[[], bool],
    budget: int | None,
    out: list[FuzzStats],
) -> None:
    rng = random.Random(f"conn:{seed}:{index}")
    stats = FuzzStats()
    while not should_stop() and (budget is None or stats.iterations < budget):
        stats.add(_one_connection(port, rng, corpus))
    out.append(stats)


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


@dataclass
class FuzzConfig:
    seed: int = 0
    duration: float | None = 10.0
    iterations: int | None = None
    connections: int = 8
    clients: int = 3
    port: int | None = None
    pid: int | None = None
    publish_interval: float = 0.01
    settle: float = 15.0
    fd_slack: int = 2
    store: str = "sqlite"


@dataclass
class FuzzResult:
    ok: bool
    problems: list[str]
    lines: list[str]

    def summary(self) -> str:
        return "\n".join(self.lines)


def _wait(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(interval)
    return True


def _acknowledged(info: Any) -> bool:
    """True when paho saw the QoS 1/2 handshake of this message complete."""
    try:
        return bool(info.is_published())
    except (RuntimeError, ValueError):
        return False  # never sent: the client was not connected


def _check_well_behaved(clients: Sequence[WellBehaved], settle: float) -> tuple[list[str], str]:
    """Loss and duplicate checks; returns the problems and a one-line account."""
    problems: list[str] = []
    totals: Counter[str] = Counter()
    for client in clients:
        for _, qos, info in client.sent:
            if qos:
                with contextlib.suppress(Exception):
                    info.wait_for_publish(settle)
    for receiver in clients:
        source = clients[(receiver.index - 1) % len(clients)]
        expected = {seq for seq, qos, info in source.sent if qos and _acknowledged(info)}
        unacked = sum(1 for _, qos, info in source.sent if qos and not _acknowledged(info))
        if unacked:
            problems.append(f"client {source.index}: {unacked} QoS 1/2 publications never acked")

        def complete(expected: set[int] = expected, receiver: WellBehaved = receiver) -> bool:
            with receiver.lock:
                return expected <= {seq for seq, _ in receiver.received}

        _wait(complete, settle)
        with receiver.lock:
            got = list(receiver.received)
            strays = receiver.strays
            disconnects = receiver.disconnects
        seen = Counter(seq for seq, _ in got)
        missing = sorted(expected - set(seen))
        dup2 = sorted(seq for seq, count in seen.items() if count > 1 and seq % 3 == 2)
        qos0_sent = sum(1 for _, qos, _ in source.sent if qos == 0)
        qos0_got = sum(1 for seq in seen if seq % 3 == 0)
        totals.update(
            sent=len(source.sent),
            received=len(got),
            qos0_lost=qos0_sent - qos0_got,
            missing=len(missing),
            duplicates_qos2=len(dup2),
            strays=strays,
        )
        if missing:
            problems.append(
                f"client {receiver.index} missed {len(missing)} acknowledged QoS 1/2 messages "
                f"of client {source.index} (first: {missing[:5]})"
            )
        if dup2:
            problems.append(
                f"client {receiver.index} got QoS 2 messages more than once: {dup2[:5]}"
            )
        if strays:
            problems.append(f"client {receiver.index} got {strays} messages it did not expect")
        if disconnects:
            problems.append(f"client {receiver.index} was disconnected {disconnects} time(s)")
    account = ", ".join(f"{key} {value}" for key, value in sorted(totals.items()))
    return problems, account


def run(config: FuzzConfig) -> FuzzResult:
    """One fuzzing session; never raises for a finding (see `FuzzResult.problems`)."""
    if config.duration is None and config.iterations is None:
        raise ValueError("give a duration or a number of iterations")
    run_id = f"{config.seed & 0xFFFFFF:06x}{random.getrandbits(16):04x}"
    started_here = config.port is None
    broker = (
        BrokerUnderTest.start(config.store)
        if config.port is None
        else BrokerUnderTest(config.port, pid=config.pid)
    )
    problems: list[str] = []
    lines = [f"seed {config.seed}  port {broker.port}  broker pid {broker.pid or '-'}"]
    clients: list[WellBehaved] = []
    monitor = SysMonitor(broker.port, run_id)
    started = time.monotonic()
    try:
        monitor.start()
        for index in range(config.clients):
            client = WellBehaved(broker.port, index, run_id, (index - 1) % config.clients)
            client.start()
            clients.append(client)
        for client in clients:
            client.publish_next()  # warm the store up before the descriptor baseline
        time.sleep(0.3)
        fd_baseline = broker.open_fds()

        corpus = make_corpus(config.seed)
        stop = threading.Event()
        deadline = None if config.duration is None else started + config.duration
        budget = (
            None
            if config.iterations is None
            else max(1, -(-config.iterations // config.connections))
        )

        def should_stop() -> bool:
            return stop.is_set() or (deadline is not None and time.monotonic() >= deadline)

        results: list[FuzzStats] = []
        workers = [
            threading.Thread(
                target=_fuzz_worker,
                args=(broker.port, config.seed, index, corpus, should_stop, budget, results),
                daemon=True,
            )
            for index in range(config.connections)
        ]
        for worker in workers:
            worker.start()
        while any(worker.is_alive() for worker in workers):
            for client in clients:
                client.publish_next()
            time.sleep(config.publish_interval)
        stop.set()
        fuzz_seconds = time.monotonic() - started
        stats = FuzzStats()
        for part in results:
            stats.add(part)
        lines.append(
            f"fuzz: {stats.iterations} connections by {config.connections} workers in "
            f"{fuzz_seconds:.1f} s, {stats.bytes_sent} bytes sent, {stats.bytes_received} "
            f"received, {stats.closed_by_broker} closed by the broker, "
            f"endings {dict(stats.outcomes)}"
        )
        if stats.refused:
            problems.append(f"{stats.refused} connections were refused (broker gone?)")

        wb_problems, account = _check_well_behaved(clients, config.settle)
        problems += wb_problems
        lines.append(f"well-behaved: {config.clients} clients, {account}")

        expected_connected = config.clients + 1  # the well-behaved clients and the monitor
        updates = monitor.updates
        settled = _wait(
            lambda: monitor.updates > updates and monitor.connected_clients == expected_connected,
            config.settle,
        )
        lines.append(
            f"$SYS clients/connected: {monitor.connected_clients} (expected {expected_connected})"
        )
        if not settled:
            problems.append(
                f"$SYS/broker/clients/connected is {monitor.connected_clients}, "
                f"expected {expected_connected}: connections leaked"
            )
        if fd_baseline is not None:
            settled_fds = _wait(
                lambda: (broker.open_fds() or 0) <= fd_baseline + config.fd_slack, config.settle
            )
            final_fds = broker.open_fds()
            lines.append(f"broker file descriptors: {fd_baseline} before, {final_fds} after")
            if not settled_fds:
                problems.append(
                    f"broker holds {final_fds} file descriptors, {fd_baseline} before the fuzz"
                )
    except RuntimeError as error:
        problems.append(str(error))
    finally:
        for client in clients:
            client.stop()
        monitor.stop()
        alive = broker.alive
        lines.append(f"broker alive: {alive}")
        if not alive:
            problems.append("the broker is not running any more")
        tracebacks = broker.tracebacks()
        if tracebacks:
            problems.append(f"the broker logged {len(tracebacks)} unhandled exception(s)")
            lines.append(broker.log_tail())
        if started_here:
            code = broker.stop()
            if alive and code not in (0, None):
                problems.append(f"the broker exited with {code} on SIGTERM")
    lines += [f"PROBLEM: {problem}" for problem in problems]
    lines.append(
        "result: OK" if not problems else f"result: FAILED (reproduce with --seed {config.seed})"
    )
    return FuzzResult(not problems, problems, lines)


def parse_args(argv: Sequence[str] | None = None) -> FuzzConfig:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="corpus and mutation seed")
    parser.add_argument("--duration", type=float, default=None, help="seconds of fuzzing")
    parser.add_argument("--iterations", type=int, default=None, help="fuzz connections in all")
    parser.add_argument("--connections", type=int, default=8, help="parallel fuzz connections")
    parser.add_argument("--clients", type=int, default=3, help="well-behaved clients")
    parser.add_argument("--port", type=int, default=None, help="fuzz a running broker")
    parser.add_argument("--pid", type=int, default=None, help="its process id (fd check)")
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds to wait at the end")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    duration = args.duration
    if duration is None and args.iterations is None:
        duration = 10.0
    return FuzzConfig(
        seed=seed,
        duration=duration,
        iterations=args.iterations,
        connections=max(1, args.connections),
        clients=max(2, args.clients),
        port=args.port,
        pid=args.pid,
        settle=args.settle,
        store=args.store,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    print(f"fuzzing with --seed {config.seed}", flush=True)
    result = run(config)
    print(result.summary(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
