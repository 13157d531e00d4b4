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
import contextlib
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from telemq.client import MqttClient, MqttError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from soak_common import (
    HOST,
    TOPICS,
    BrokerProcess,
    CountingPublisher,
    CountingSubscriber,
    TrafficResult,
    add_output_arguments,
    drain,
    free_port,
    parse_config,
    positive,
    report,
    say,
    traffic_counts,
)

SUBSCRIBER_KINDS = ("normal", "slow", "reconnecting")
PROTOCOLS = ("3.1.1", "5")
SESSION_EXPIRY = 3600  # seconds: MQTT 5.0 sessions outlive every down time of the run
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
    sync: str = "full"  # the store's; "normal" also answers small QoS 2 reads in halves
    slow_ms: float = 8.0
    trace: bool = False
    workdir: Path | None = None
    keep: bool = False
    quiet: bool = False


@dataclass(kw_only=True)
class SoakResult(TrafficResult):
    subscriber: str
    protocol: str
    subscriber_connections: int
    publisher_connections: int
    mangled: int = 0  # MQTT 5.0: messages whose user property did not come through

    @property
    def ok(self) -> bool:
        return self.traffic_ok and not self.mangled

    def summary(self) -> str:
        return (
            f"seed {self.seed}, subscriber {self.subscriber}, MQTT {self.protocol}: "
            f"{self.kills} kills in {self.seconds:.0f} s; {self.traffic_summary()}, "
            f"sessions lost {self.sessions_lost}, mangled {self.mangled}, subscriber connections "
            f"{self.subscriber_connections}, publisher connections "
            f"{self.publisher_connections}: {'PASS' if self.ok else 'FAIL'}"
        )


def _connect_probe(port: int) -> bool:
    """One CONNECT (clean session, a throw-away id) answered by CONNACK 0."""
    try:
        with MqttClient(HOST, port, timeout=1.0):  # connects, then DISCONNECT
            return True
    except (MqttError, OSError):
        return False


class Broker(BrokerProcess):
    """`python -m telemq serve` on a fixed port and data directory, killed and restarted."""

    def __init__(self, workdir: Path, port: int, config_text: str = BROKER_CONFIG) -> None:
        super().__init__(workdir)
        self.port = port
        self.config = workdir / "telemq.toml"
        self.config.write_text(config_text)

    def start(self, timeout: float = 30.0) -> None:
        proc = self.launch(
            "--host", HOST, "--port", str(self.port),
            "--data-dir", str(self.workdir / "data"), "--config", str(self.config),
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"broker exited with {proc.returncode} during start")
            if _connect_probe(self.port):
                return
            time.sleep(0.02)
        raise RuntimeError(f"broker not ready within {timeout} s")


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


class Subscriber(CountingSubscriber):
    """The persistent QoS 1 + QoS 2 subscriber (see the module docstring)."""

    def __init__(self, config: SoakConfig, port: int, rng: random.Random, trace: Trace) -> None:
        super().__init__(_paho("soak-sub", trace, config.protocol))
        self.config = config
        self.rng = rng
        self.trace = trace
        self._stop = threading.Event()
        self.port = port
        self.mangled = 0
        self._cutter: threading.Thread | None = None

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
        self.count(qos, int(seq_text))
        self.trace.note(f"soak: got {qos}:{seq_text} as m{message.mid}")
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


class Publisher(CountingPublisher):
    """The persistent, paced QoS 1 + QoS 2 publisher (see the module docstring)."""

    def __init__(self, config: SoakConfig, port: int, trace: Trace) -> None:
        client = _paho("soak-pub", trace, config.protocol)
        super().__init__(client, config.messages, config.duration, config.window)
        self.config = config
        self.trace = trace
        self.port = port

    def publish(self, qos: int, seq: int) -> int:
        text = f"{qos}:{seq}"
        props = _user_property(text) if self.config.protocol == "5" else None
        info = self.client.publish(TOPICS[qos], text.encode(), qos=qos, properties=props)
        self.trace.note(f"soak: sent {qos}:{seq} as m{info.mid}")
        return int(info.mid)

    def start(self) -> None:
        _connect_async(self.client, self.port, self.config.protocol)
        self.client.loop_start()
        self.start_publishing()

    def stop(self) -> None:
        self.stop_publishing()
        self.client.disconnect()
        self.client.loop_stop()


def run_soak(config: SoakConfig) -> SoakResult:
    """Run one soak (see the module docstring) and return its counts."""
    rng = random.Random(config.seed)
    own_workdir = config.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="telemq-soak-")) if own_workdir else config.workdir
    assert workdir is not None
    workdir.mkdir(parents=True, exist_ok=True)
    broker = Broker(workdir, free_port(), f'{BROKER_CONFIG}\n[store]\nsync = "{config.sync}"\n')
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
                say(
                    config.quiet,
                    f"  {kills} kills, {time.monotonic() - started:.0f} s, {got} received",
                )
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
    return SoakResult(
        seed=config.seed,
        subscriber=subscriber_kind,
        protocol=config.protocol,
        kills=kills,
        **traffic_counts(publisher, subscriber),
        subscriber_connections=subscriber.connections,
        publisher_connections=publisher.connections,
        seconds=time.monotonic() - started,
        workdir=str(workdir),
        mangled=subscriber.mangled,
        broker_errors=broker_errors,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="SIGKILL a telemq broker over and over under QoS 1/2 traffic between "
        "two persistent paho-mqtt clients; report lost messages and duplicates."
    )
    parser.add_argument("--kills", type=positive(int), default=100, help="kill cycles (100)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (random)")
    parser.add_argument("--messages", type=positive(int), default=6000, help="per QoS (6000)")
    parser.add_argument(
        "--duration",
        type=positive(float),
        default=150.0,
        help="seconds the publisher's pace spreads the messages over (150)",
    )
    parser.add_argument(
        "--window",
        type=positive(int),
        default=20,
        help="publisher's unacknowledged messages at most (20)",
    )
    parser.add_argument(
        "--up",
        type=positive(float),
        default=1.0,
        help="a kill comes 0 to UP seconds after the broker is ready (1.0)",
    )
    parser.add_argument(
        "--down",
        type=positive(float),
        default=1.0,
        help="the broker stays down 0 to DOWN seconds (1.0)",
    )
    parser.add_argument(
        "--stall",
        type=positive(float),
        default=60.0,
        help="end when nothing arrived for this many seconds (60)",
    )
    parser.add_argument("--subscriber", choices=SUBSCRIBER_KINDS, default="normal")
    parser.add_argument(
        "--protocol", choices=PROTOCOLS, default="3.1.1", help="the clients' MQTT version"
    )
    parser.add_argument(
        "--sync",
        choices=("full", "normal"),
        default="full",
        help="the store's sync (full); normal survives the broker's crash, not the machine's",
    )
    parser.add_argument(
        "--slow-ms",
        type=positive(float),
        default=8.0,
        help="slow subscriber: each message takes 0 to this many ms (8)",
    )
    parser.add_argument("--trace", action="store_true", help="log every packet of both clients")
    add_output_arguments(parser)
    args, config = parse_config(parser, argv, SoakConfig)
    print(
        f"crash soak: seed {config.seed}, {config.kills} kills, {config.messages} messages per"
        f" QoS, subscriber {config.subscriber}, MQTT {config.protocol}, sync {config.sync}",
        flush=True,
    )
    result = run_soak(config)
    report(result, show_workdir=bool(args.keep or args.workdir), as_json=args.json)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
