"""What the soaks share: the two persistent paho clients' bookkeeping, the accounting of a
run by QoS, its report, and the command-line helpers.

Theory of operation. Every soak (crash_soak.py, failover_soak.py, network_soak.py) drives
the same traffic: a **publisher** sends `messages` QoS 1 and as many QoS 2 messages,
interleaved, payload `<qos>:<seq>`, paced over `duration` seconds with at most `window`
unacknowledged, and a **subscriber** subscribed to both topics counts what paho hands to
the application. How the clients connect (paho's own reconnection, or following the members
of an `[ha]` pair) and what the soak does to the brokers meanwhile is each soak's own; the
classes here only keep the counts, which `traffic_counts` turns into sent / acknowledged /
received / lost / duplicates / unacknowledged per QoS, and `TrafficResult` into the verdict
and the summary every soak prints.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import paho.mqtt.client as mqtt

HOST = "127.0.0.1"
TOPICS = {1: "soak/q1", 2: "soak/q2"}
MAX_MESSAGES = 32_000  # per QoS: the publisher's 65,535 packet ids name each message once

Config = TypeVar("Config")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class BrokerProcess:
    """``python -m telemq serve`` as a subprocess the soak kills and restarts, its output
    appended to one log across the starts. Each soak waits for readiness its own way."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.log_path = workdir / "broker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def launch(self, *arguments: str) -> subprocess.Popen[bytes]:
        """Start ``telemq serve`` with `arguments`; the log marks each start."""
        self.starts += 1
        command = [sys.executable, "-m", "telemq", "serve", *arguments]
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.workdir
            )
        return self.proc

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
        """Tracebacks and ERROR lines in the log."""
        text = self.log_path.read_text("utf-8", "replace") if self.log_path.exists() else ""
        return [line for line in text.splitlines() if "Traceback" in line or " ERROR " in line]


def say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, flush=True)


class CountingSubscriber:
    """The persistent QoS 1 + QoS 2 subscriber's counts: it subscribes on a connection
    without a session (a lost session, once subscribed, is counted) and counts every
    delivery per QoS and sequence number."""

    def __init__(self, client: mqtt.Client) -> None:
        self.client = client
        self.received: dict[int, collections.Counter[int]] = {
            1: collections.Counter(), 2: collections.Counter()
        }  # fmt: skip
        self.deliveries = 0  # read by the main thread without iterating `received`
        self.last_progress = time.monotonic()
        self.connections = 0
        self.sessions_lost = 0
        self.subscribed = threading.Event()
        client.on_connect = self._on_connect
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message

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
        qos_text, seq_text = message.payload.decode().split(":")
        self.count(int(qos_text), int(seq_text))

    def count(self, qos: int, seq: int) -> None:
        self.received[qos][seq] += 1
        self.deliveries += 1
        self.last_progress = time.monotonic()


class CountingPublisher:
    """The persistent, paced QoS 1 + QoS 2 publisher's counts and its publishing thread;
    `publish` (the soak's own) sends one message and returns paho's packet id."""

    def __init__(self, client: mqtt.Client, messages: int, duration: float, window: int) -> None:
        self.client = client
        self.messages = messages
        self.duration = duration
        self.connections = 0
        self.error: BaseException | None = None
        # paho's packet id of each message -> (qos, seq); ids are not reused in one run
        # (at most 65,535 messages in all). `on_publish` only appends: it runs under paho's
        # lock, and taking another one there could deadlock with `publish`.
        self.sent: dict[int, tuple[int, int]] = {}
        self.acknowledged_ids: list[int] = []
        self.finished_publishing = threading.Event()
        self._stop_publishing = threading.Event()
        client.max_inflight_messages_set(window)
        client.max_queued_messages_set(0)
        client.on_connect = self._on_connect
        client.on_publish = self._on_publish
        self._publishing = threading.Thread(target=self._run, daemon=True)

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if not reason.is_failure:
            self.connections += 1

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        self.acknowledged_ids.append(mid)

    def publish(self, qos: int, seq: int) -> int:
        info = self.client.publish(TOPICS[qos], f"{qos}:{seq}".encode(), qos=qos)
        return int(info.mid)

    def start_publishing(self) -> None:
        self._publishing.start()

    def stop_publishing(self) -> None:
        self._stop_publishing.set()
        if self._publishing.ident is not None:  # started
            self._publishing.join()

    def _run(self) -> None:
        try:
            total = 2 * self.messages
            interval = self.duration / total
            started = time.monotonic()
            for index in range(total):
                if self._stop_publishing.is_set():
                    break
                qos = 1 + index % 2
                seq = index // 2
                self.sent[self.publish(qos, seq)] = (qos, seq)
                delay = started + (index + 1) * interval - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        except BaseException as error:  # reported by `drain`
            self.error = error
        finally:
            self.finished_publishing.set()

    def acknowledged(self) -> dict[int, set[int]]:
        done: dict[int, set[int]] = {1: set(), 2: set()}
        for mid in list(self.acknowledged_ids):
            qos, seq = self.sent[mid]
            done[qos].add(seq)
        return done


def drain(
    publisher: CountingPublisher, subscriber: CountingSubscriber, messages: int, stall: float
) -> None:
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


@dataclass(kw_only=True)
class TrafficResult:
    """The counts every soak reports; each soak's `ok` and `summary` add its own to
    `traffic_ok` and `traffic_summary`."""

    seed: int
    kills: int
    sent: dict[int, int]
    acknowledged: dict[int, int]
    received: dict[int, int]
    lost: dict[int, list[int]]
    duplicates: dict[int, list[int]]
    unacknowledged: dict[int, int]
    sessions_lost: int
    seconds: float
    workdir: str
    broker_errors: list[str] = field(default_factory=list)

    @property
    def traffic_ok(self) -> bool:
        """Nothing acknowledged lost, no QoS 2 duplicate, everything acknowledged, no session
        lost, no broker error."""
        return (
            not self.lost[1]
            and not self.lost[2]
            and not self.duplicates[2]
            and not self.unacknowledged[1]
            and not self.unacknowledged[2]
            and not self.sessions_lost
            and not self.broker_errors
        )

    @property
    def ok(self) -> bool:
        return self.traffic_ok

    def summary(self) -> str:
        return f"{self.traffic_summary()}: {'PASS' if self.ok else 'FAIL'}"

    def details(self) -> str:
        """The summary and what a failed run needs looked at: lost messages, QoS 2
        duplicates, the first broker errors, the work directory."""
        return (
            f"{self.summary()}\nlost: {self.lost}\nQoS 2 duplicates: {self.duplicates[2]}\n"
            f"broker errors: {self.broker_errors[:5]}\nwork directory: {self.workdir}"
        )

    def traffic_summary(self) -> str:
        return (
            f"sent {self.sent[1]}+{self.sent[2]} (QoS 1+2), acknowledged"
            f" {self.acknowledged[1]}+{self.acknowledged[2]}; lost"
            f" {len(self.lost[1])}+{len(self.lost[2])}, QoS 2 duplicates"
            f" {len(self.duplicates[2])}, QoS 1 duplicates {len(self.duplicates[1])},"
            f" unacknowledged {self.unacknowledged[1]}+{self.unacknowledged[2]}"
        )


def traffic_counts(publisher: CountingPublisher, subscriber: CountingSubscriber) -> dict[str, Any]:
    """A finished run's sent / acknowledged / received / lost / duplicates / unacknowledged
    per QoS and lost sessions: `TrafficResult`'s fields."""
    acknowledged = publisher.acknowledged()
    received = subscriber.received
    sent = {qos: sum(1 for q, _ in publisher.sent.values() if q == qos) for qos in (1, 2)}
    return {
        "sent": sent,
        "acknowledged": {qos: len(acknowledged[qos]) for qos in (1, 2)},
        "received": {qos: len(received[qos]) for qos in (1, 2)},
        "lost": {
            qos: sorted(s for s in acknowledged[qos] if s not in received[qos]) for qos in (1, 2)
        },
        "duplicates": {
            qos: sorted(s for s, n in received[qos].items() for _ in range(n - 1)) for qos in (1, 2)
        },
        "unacknowledged": {qos: sent[qos] - len(acknowledged[qos]) for qos in (1, 2)},
        "sessions_lost": subscriber.sessions_lost,
    }


def positive(kind: type[int] | type[float]) -> Any:
    """An argparse type: a finite number >= 0."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (value >= 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text!r}")
        return value

    return parse


def add_output_arguments(parser: argparse.ArgumentParser, *, json_option: bool = True) -> None:
    """--workdir, --keep and (with `json_option`) --json."""
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: temporary)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    if json_option:
        parser.add_argument("--json", action="store_true", help="print the result as JSON too")


def parse_config(
    parser: argparse.ArgumentParser, argv: list[str] | None, kind: type[Config]
) -> tuple[argparse.Namespace, Config]:
    """Parse `argv`, check --window and --messages (exit 2 naming the problem), draw a seed
    when none is given; the options, and the soak's configuration (a dataclass) of those it
    has."""
    args = parser.parse_args(argv)
    if args.window < 1:
        parser.error("--window must be at least 1")
    if not 1 <= args.messages <= MAX_MESSAGES:
        parser.error(f"--messages must be 1 to {MAX_MESSAGES} (packet ids are not reused)")
    args.seed = args.seed if args.seed is not None else random.randrange(2**31)
    names = {f.name for f in fields(kind)}  # type: ignore[arg-type]
    return args, kind(**{name: value for name, value in vars(args).items() if name in names})


def report(result: TrafficResult, *, show_workdir: bool, as_json: bool) -> None:
    """Print a finished run: its summary, the first lost messages and QoS 2 duplicates, the
    brokers' errors, the work directory when kept, and with `as_json` the whole result."""
    print(result.summary())
    for qos in (1, 2):
        if result.lost[qos]:
            print(f"  lost QoS {qos}: {result.lost[qos][:20]}")
    if result.duplicates[2]:
        print(f"  QoS 2 duplicates: {result.duplicates[2][:20]}")
    for line in result.broker_errors[:10]:
        print(f"  broker: {line}")
    if not result.ok or show_workdir:
        print(f"  work directory: {result.workdir}")
    if as_json:
        print(json.dumps({**result.__dict__, "ok": result.ok}))
