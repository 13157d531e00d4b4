#!/usr/bin/env python3
"""Crash soak: QoS 1 and QoS 2 through a broker killed with SIGKILL over and over.

Theory of operation. One telemq broker (default configuration: SQLite store, `sync = "full"`,
journal on) runs on 127.0.0.1 on a data directory of its own. Two real paho-mqtt clients talk
to it, both with persistent sessions (clean session 0) and paho's own reconnection:

* the **subscriber** subscribes once to `soak/q1` at QoS 1 and `soak/q2` at QoS 2 and counts
  what paho hands to the application (QoS 2: paho delivers on PUBREL, so a second delivery of
  the same message is a real duplicate, not a re-sent PUBLISH). Its variant (`--subscriber`)
  is `normal`, `slow` (the application takes 0-`--slow-ms` ms per message, so every
  acknowledgement is late and the broker's window fills), or `reconnecting` (its TCP
  connection is cut at random moments, 0.2-3 s apart, and paho reconnects);
* the **publisher** publishes `--messages` QoS 1 and as many QoS 2 messages, interleaved,
  payload `<qos>:<seq>`, paced over `--duration` seconds, with at most `--window`
  unacknowledged (paho's in-flight limit). paho keeps what is not acknowledged and re-sends
  it on reconnection (PUBLISH with DUP, or PUBREL); a message counts as acknowledged when
  paho reports it published (PUBACK, or PUBCOMP for QoS 2).

Meanwhile the broker is SIGKILLed `--kills` times, each time 0-`--up` seconds after it
answered a CONNECT, kept down 0-`--down` seconds and restarted on the same data directory.
Every random choice comes from `--seed`. After the last kill the broker stays up until the
publisher has every message acknowledged and the subscriber has them all, or nothing moved
for `--stall` seconds. The report counts:

* lost: acknowledged messages the subscriber never got (must be 0);
* QoS 2 duplicates: QoS 2 messages the subscriber got more than once (must be 0);
* QoS 1 duplicates: extra copies of QoS 1 messages (allowed: at least once);
* unacknowledged: messages the publisher never had acknowledged (must be 0).

With `--protocol 5` both clients speak MQTT 5.0: persistent sessions are a Session Expiry
Interval of an hour with Clean Start 0, and every message carries a user property
(`seq`, its `<qos>:<seq>`) that the subscriber checks: a message that arrives without it,
or with another, is counted as mangled (must be 0).

The exit code is 0 when all three "must" hold, 1 otherwise; 2 for a bad argument. The work
directory (broker log, kill times, and with `--trace` every packet both clients saw) is kept
when the run fails or `--keep` is given. docs/reliability.md records runs of this command.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from telemq.client import MqttClient, MqttError

HOST = "127.0.0.1"
TOPICS = {1: "soak/q1", 2: "soak/q2"}
SUBSCRIBER_KINDS = ("normal", "slow", "reconnecting")
PROTOCOLS = ("3.1.1", "5")
SESSION_EXPIRY = 3600  # seconds: MQTT 5.0 sessions outlive every down time of the run
MAX_MESSAGES = 32_000  # per QoS: the publisher's 65,535 packet ids name each message once
BROKER_CONFIG = """\
[limits]
# The soak checks durability across crashes, not the queue bound: nothing is dropped.
max_queued_messages = 0
"""


@dataclass
class SoakConfig:
    kills: int = 100
    seed: int = 0
    messages: int = 6000  # per QoS
    duration: float = 150.0
    window: int = 20
    up: float = 1.0
    down: float = 1.0
    stall: float = 60.0
    subscriber: str = "normal"
    protocol: str = "3.1.1"
    slow_ms: float = 8.0
    trace: bool = False
    workdir: Path | None = None
    keep: bool = False
    quiet: bool = False


@dataclass
class SoakResult:
    seed: int
    subscriber: str
    protocol: str
    kills: int
    sent: dict[int, int]
    acknowledged: dict[int, int]
    received: dict[int, int]
    lost: dict[int, list[int]]
    duplicates: dict[int, list[int]]
    unacknowledged: dict[int, int]
    sessions_lost: int
    subscriber_connections: int
    publisher_connections: int
    seconds: float
    workdir: str
    broker_errors: list[str] = field(default_factory=list)
    mangled: int = 0  # MQTT 5.0: messages whose user property did not come through

    @property
    def ok(self) -> bool:
        return (
            not self.lost[1]
            and not self.lost[2]
            and not self.duplicates[2]
            and not self.unacknowledged[1]
            and not self.unacknowledged[2]
            and not self.sessions_lost
            and not self.broker_errors
            and not self.mangled
        )

    def summary(self) -> str:
        q1_extra = len(self.duplicates[1])
        return (
            f"seed {self.seed}, subscriber {self.subscriber}, MQTT {self.protocol}: "
            f"{self.kills} kills in "
            f"{self.seconds:.0f} s; sent {self.sent[1]}+{self.sent[2]} (QoS 1+2), "
            f"acknowledged {self.acknowledged[1]}+{self.acknowledged[2]}; "
            f"lost {len(self.lost[1])}+{len(self.lost[2])}, "
            f"QoS 2 duplicates {len(self.duplicates[2])}, QoS 1 duplicates {q1_extra}, "
            f"unacknowledged {self.unacknowledged[1]}+{self.unacknowledged[2]}, "
            f"sessions lost {self.sessions_lost}, mangled {self.mangled}, subscriber connections "
            f"{self.subscriber_connections}, publisher connections "
            f"{self.publisher_connections}: {'PASS' if self.ok else 'FAIL'}"
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _connect_probe(port: int) -> bool:
    """One CONNECT (clean session, a throw-away id) answered by CONNACK 0."""
    try:
        with MqttClient(HOST, port, timeout=1.0):  # connects, then DISCONNECT
            return True
    except (MqttError, OSError):
        return False


class Broker:
    """`python -m telemq serve` on a fixed port and data directory, killed and restarted."""

    def __init__(self, workdir: Path, port: int, config_text: str = BROKER_CONFIG) -> None:
        self.workdir = workdir
        self.port = port
        self.config = workdir / "telemq.toml"
        self.config.write_text(config_text)
        self.log_path = workdir / "broker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 30.0) -> None:
        self.starts += 1
        command = [
            sys.executable, "-m", "telemq", "serve", "--host", HOST, "--port", str(self.port),
            "--data-dir", str(self.workdir / "data"), "--config", str(self.config),
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.workdir
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode} during start")
            if _connect_probe(self.port):
                return
            time.sleep(0.02)
        raise RuntimeError(f"broker not ready within {timeout} s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10.0)
        except subprocess.TimeoutExpired:
            self.kill()

    def errors(self) -> list[str]:
        """Tracebacks and ERROR lines in the broker's log."""
        text = self.log_path.read_text("utf-8", "replace") if self.log_path.exists() else ""
        return [line for line in text.splitlines() if "Traceback" in line or " ERROR " in line]


class Trace:
    """Every packet a paho client logs, with a time stamp (`--trace`), for a failure's story."""

    def __init__(self, path: Path | None) -> None:
        self._file = path.open("a", encoding="utf-8") if path is not None else None
        self._lock = threading.Lock()

    def __call__(self, client: Any, userdata: Any, level: int, text: str) -> None:
        if self._file is not None:
            with self._lock:
                self._file.write(f"{time.monotonic():.4f} {text}\n")

    def note(self, text: str) -> None:
        self(None, None, 0, text)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _paho(client_id: str, trace: Trace, protocol: str) -> mqtt.Client:
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=None if protocol == "5" else False,
        protocol=mqtt.MQTTv5 if protocol == "5" else mqtt.MQTTv311,
    )
    client.reconnect_delay_set(min_delay=0.05, max_delay=0.5)  # type: ignore[arg-type]
    client.on_log = trace
    return client


def _connect_async(client: mqtt.Client, port: int, protocol: str) -> None:
    """Connect (and reconnect) with a persistent session: clean session 0 at 3.1.1; Clean
    Start 0 and a Session Expiry Interval at 5.0."""
    if protocol != "5":
        client.connect_async(HOST, port, keepalive=10)
        return
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = SESSION_EXPIRY
    client.connect_async(HOST, port, keepalive=10, clean_start=False, properties=props)


def _user_property(text: str) -> Properties:
    props = Properties(PacketTypes.PUBLISH)
    props.UserProperty = ("seq", text)
    return props


class Subscriber:
    """The persistent QoS 1 + QoS 2 subscriber (see the module docstring)."""

    def __init__(self, config: SoakConfig, port: int, rng: random.Random, trace: Trace) -> None:
        self.config = config
        self.rng = rng
        self.trace = trace
        self.received: dict[int, collections.Counter[int]] = {
            1: collections.Counter(), 2: collections.Counter()
        }  # fmt: skip
        self.deliveries = 0  # read by the main thread without iterating `received`
        self.last_progress = time.monotonic()
        self.connections = 0
        self.sessions_lost = 0
        self.subscribed = threading.Event()
        self._stop = threading.Event()
        self.port = port
        self.mangled = 0
        self.client = _paho("soak-sub", trace, config.protocol)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self._cutter: threading.Thread | None = None

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if reason.is_failure:
            return
        self.connections += 1
        if not flags.session_present:
            if self.subscribed.is_set():
                self.sessions_lost += 1  # reported; re-subscribing keeps the run going
            client.subscribe([(TOPICS[1], 1), (TOPICS[2], 2)])

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        if [code.value for code in codes] == [1, 2]:
            self.subscribed.set()

    def _on_message(self, client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        text = message.payload.decode()
        qos_text, seq_text = text.split(":")
        qos = int(qos_text)
        if self.config.protocol == "5":
            props = getattr(message, "properties", None)
            if getattr(props, "UserProperty", None) != [("seq", text)]:
                self.mangled += 1
                self.trace.note(f"user property lost or changed: {text} {props}")
        if qos != message.qos:
            self.trace.note(f"QoS mismatch: {message.payload!r} at QoS {message.qos}")
        self.received[qos][int(seq_text)] += 1
        self.deliveries += 1
        self.trace.note(f"soak: got {qos}:{seq_text} as m{message.mid}")
        self.last_progress = time.monotonic()
        if self.config.subscriber == "slow":
            time.sleep(self.rng.uniform(0.0, self.config.slow_ms) / 1000.0)

    def start(self) -> None:
        _connect_async(self.client, self.port, self.config.protocol)
        self.client.loop_start()
        if self.config.subscriber == "reconnecting":
            self._cutter = threading.Thread(target=self._cut_connections, daemon=True)
            self._cutter.start()

    def _cut_connections(self) -> None:
        """Break the subscriber's TCP connection at random moments; paho reconnects."""
        rng = random.Random(self.rng.random())
        while not self._stop.wait(rng.uniform(0.2, 3.0)):
            sock = self.client.socket()
            if sock is None:
                continue
            self.trace.note("soak: cutting the subscriber's connection")
            with contextlib.suppress(OSError):  # already closed by a kill
                sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]

    def stop(self) -> None:
        self._stop.set()
        if self._cutter is not None:
            self._cutter.join()
        self.client.disconnect()
        self.client.loop_stop()


class Publisher:
    """The persistent, paced QoS 1 + QoS 2 publisher (see the module docstring)."""

    def __init__(self, config: SoakConfig, port: int, trace: Trace) -> None:
        self.config = config
        self.trace = trace
        self.connections = 0
        self.error: BaseException | None = None
        # paho's packet id of each message -> (qos, seq); ids are not reused in one run
        # (at most 65,535 messages in all). `on_publish` only appends: it runs under paho's
        # lock, and taking another one there could deadlock with `publish`.
        self.sent: dict[int, tuple[int, int]] = {}
        self.acknowledged_ids: list[int] = []
        self.finished_publishing = threading.Event()
        self.port = port
        self.client = _paho("soak-pub", trace, config.protocol)
        self.client.max_inflight_messages_set(config.window)
        self.client.max_queued_messages_set(0)
        self.client.on_connect = self._on_connect
        self.client.on_publish = self._on_publish
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stop = threading.Event()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if not reason.is_failure:
            self.connections += 1

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        self.acknowledged_ids.append(mid)

    def start(self) -> None:
        _connect_async(self.client, self.port, self.config.protocol)
        self.client.loop_start()
        self._thread.start()

    def _run(self) -> None:
        try:
            self._publish_all()
        except BaseException as error:  # reported by run_soak
            self.error = error
        finally:
            self.finished_publishing.set()

    def _publish_all(self) -> None:
        total = 2 * self.config.messages
        interval = self.config.duration / total
        started = time.monotonic()
        for index in range(total):
            if self._stop.is_set():
                break
            qos = 1 + index % 2
            seq = index // 2
            text = f"{qos}:{seq}"
            props = _user_property(text) if self.config.protocol == "5" else None
            info = self.client.publish(TOPICS[qos], text.encode(), qos=qos, properties=props)
            self.sent[info.mid] = (qos, seq)
            self.trace.note(f"soak: sent {qos}:{seq} as m{info.mid}")
            delay = started + (index + 1) * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def acknowledged(self) -> dict[int, set[int]]:
        done: dict[int, set[int]] = {1: set(), 2: set()}
        for mid in list(self.acknowledged_ids):
            qos, seq = self.sent[mid]
            done[qos].add(seq)
        return done

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join()
        self.client.disconnect()
        self.client.loop_stop()


def _say(config: SoakConfig, text: str) -> None:
    if not config.quiet:
        print(text, flush=True)


def run_soak(config: SoakConfig) -> SoakResult:
    """Run one soak (see the module docstring) and return its counts."""
    rng = random.Random(config.seed)
    own_workdir = config.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="telemq-soak-")) if own_workdir else config.workdir
    assert workdir is not None
    workdir.mkdir(parents=True, exist_ok=True)
    broker = Broker(workdir, free_port())
    kill_log = (workdir / "kills.log").open("a", encoding="utf-8")
    sub_trace = Trace(workdir / "subscriber.trace" if config.trace else None)
    pub_trace = Trace(workdir / "publisher.trace" if config.trace else None)
    started = time.monotonic()
    subscriber = Subscriber(config, broker.port, random.Random(rng.random()), sub_trace)
    publisher = Publisher(config, broker.port, pub_trace)
    kills = 0
    try:
        broker.start()
        subscriber.start()
        if not subscriber.subscribed.wait(30.0):
            raise RuntimeError("the subscriber's SUBSCRIBE was not acknowledged")
        publisher.start()
        for kills in range(1, config.kills + 1):
            time.sleep(rng.uniform(0.0, config.up))
            now = time.monotonic() - started
            broker.kill()
            kill_log.write(f"{now:.4f} kill {kills}\n")
            kill_log.flush()
            sub_trace.note(f"soak: kill {kills}")
            pub_trace.note(f"soak: kill {kills}")
            time.sleep(rng.uniform(0.0, config.down))
            broker.start()
            if kills % 10 == 0:
                got = subscriber.deliveries
                _say(config, f"  {kills} kills, {time.monotonic() - started:.0f} s, {got} received")
        drain(publisher, subscriber, config.messages, config.stall)
    finally:
        publisher.stop()
        subscriber.stop()
        broker.stop()
        kill_log.close()
        sub_trace.close()
        pub_trace.close()
    result = soak_result(
        config, config.subscriber, kills, publisher, subscriber, started, workdir, broker.errors()
    )
    if own_workdir and result.ok and not config.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def drain(publisher: Publisher, subscriber: Subscriber, messages: int, stall: float) -> None:
    """After the last fault: wait until the publisher has all `messages` per QoS
    acknowledged and the subscriber has them, or nothing arrived for `stall` seconds."""
    publisher.finished_publishing.wait()
    if publisher.error is not None:
        raise RuntimeError(f"the publisher failed: {publisher.error!r}")
    while True:
        acknowledged = publisher.acknowledged()
        complete = len(acknowledged[1]) == messages and len(acknowledged[2]) == messages
        have = all(seq in subscriber.received[qos] for qos in (1, 2) for seq in acknowledged[qos])
        if complete and have:
            break
        if time.monotonic() - subscriber.last_progress > stall:
            break
        time.sleep(0.2)
    time.sleep(0.5)  # a late duplicate still in flight is counted too


def soak_result(
    config: SoakConfig,
    subscriber_kind: str,
    kills: int,
    publisher: Publisher,
    subscriber: Subscriber,
    started: float,
    workdir: Path,
    broker_errors: list[str],
) -> SoakResult:
    """The counts of a finished soak (see the module docstring)."""
    acknowledged = publisher.acknowledged()
    sent = {qos: sum(1 for q, _ in publisher.sent.values() if q == qos) for qos in (1, 2)}
    return SoakResult(
        seed=config.seed,
        subscriber=subscriber_kind,
        protocol=config.protocol,
        kills=kills,
        sent=sent,
        acknowledged={qos: len(acknowledged[qos]) for qos in (1, 2)},
        received={qos: len(subscriber.received[qos]) for qos in (1, 2)},
        lost={
            qos: sorted(s for s in acknowledged[qos] if s not in subscriber.received[qos])
            for qos in (1, 2)
        },
        duplicates={
            qos: sorted(s for s, n in subscriber.received[qos].items() for _ in range(n - 1))
            for qos in (1, 2)
        },
        unacknowledged={qos: sent[qos] - len(acknowledged[qos]) for qos in (1, 2)},
        sessions_lost=subscriber.sessions_lost,
        subscriber_connections=subscriber.connections,
        publisher_connections=publisher.connections,
        seconds=time.monotonic() - started,
        workdir=str(workdir),
        mangled=subscriber.mangled,
        broker_errors=broker_errors,
    )


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (value >= 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text!r}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="SIGKILL a telemq broker over and over under QoS 1/2 traffic between "
        "two persistent paho-mqtt clients; report lost messages and duplicates."
    )
    parser.add_argument("--kills", type=_positive(int), default=100, help="kill cycles (100)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (random)")
    parser.add_argument("--messages", type=_positive(int), default=6000, help="per QoS (6000)")
    parser.add_argument(
        "--duration",
        type=_positive(float),
        default=150.0,
        help="seconds the publisher's pace spreads the messages over (150)",
    )
    parser.add_argument(
        "--window",
        type=_positive(int),
        default=20,
        help="publisher's unacknowledged messages at most (20)",
    )
    parser.add_argument(
        "--up",
        type=_positive(float),
        default=1.0,
        help="a kill comes 0 to UP seconds after the broker is ready (1.0)",
    )
    parser.add_argument(
        "--down",
        type=_positive(float),
        default=1.0,
        help="the broker stays down 0 to DOWN seconds (1.0)",
    )
    parser.add_argument(
        "--stall",
        type=_positive(float),
        default=60.0,
        help="end when nothing arrived for this many seconds (60)",
    )
    parser.add_argument("--subscriber", choices=SUBSCRIBER_KINDS, default="normal")
    parser.add_argument(
        "--protocol", choices=PROTOCOLS, default="3.1.1", help="the clients' MQTT version"
    )
    parser.add_argument(
        "--slow-ms",
        type=_positive(float),
        default=8.0,
        help="slow subscriber: each message takes 0 to this many ms (8)",
    )
    parser.add_argument("--trace", action="store_true", help="log every packet of both clients")
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: temporary)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", action="store_true", help="print the result as JSON too")
    args = parser.parse_args(argv)  # fmt: skip
    if args.window < 1:
        parser.error("--window must be at least 1")
    if not 1 <= args.messages <= MAX_MESSAGES:
        parser.error(f"--messages must be 1 to {MAX_MESSAGES} (packet ids are not reused)")
    args.seed = args.seed if args.seed is not None else random.randrange(2**31)
    options = {f.name: getattr(args, f.name) for f in fields(SoakConfig) if hasattr(args, f.name)}
    config = SoakConfig(**options)
    seed = config.seed
    print(
        f"crash soak: seed {seed}, {config.kills} kills, {config.messages} messages per QoS, "
        f"subscriber {config.subscriber}, MQTT {config.protocol}",
        flush=True,
    )
    result = run_soak(config)
    print(result.summary())
    for qos in (1, 2):
        if result.lost[qos]:
            print(f"  lost QoS {qos}: {result.lost[qos][:20]}")
    if result.duplicates[2]:
        print(f"  QoS 2 duplicates: {result.duplicates[2][:20]}")
    for line in result.broker_errors[:10]:
        print(f"  broker: {line}")
    if not result.ok or args.keep or args.workdir:
        print(f"  work directory: {result.workdir}")
    if args.json:
        print(json.dumps({**result.__dict__, "ok": result.ok}))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
