#!/usr/bin/env python3
"""Failover soak: an `[ha]` pair on one PostgreSQL database, the active member SIGKILLed over
and over under QoS 1 and QoS 2 traffic (docs/ha.md, docs/reliability.md).

Theory of operation. Two telemq brokers, members ``a`` and ``b`` of one `[ha]` group
(``poll_interval = 0.2``), run on 127.0.0.1 with fixed MQTT and HTTP ports, on one
PostgreSQL database: the one `--dsn` names, or a server of the soak's own (started with the
tests' support code, `tests/testsupport/postgres.py`, and removed at the end). Two real
paho-mqtt clients with persistent sessions know both addresses and move to the other one
whenever their connection ends or is refused (a standby answers CONNACK 3), the way the
`Failover` clients of the tests and docs/ha.md do:

* the **subscriber** subscribes once to `soak/q1` at QoS 1 and `soak/q2` at QoS 2 and counts
  what paho hands to the application (QoS 2 is delivered on PUBREL: a second delivery is a
  real duplicate);
* the **publisher** publishes `--messages` QoS 1 and as many QoS 2 messages, interleaved,
  payload `<qos>:<seq>`, paced over `--duration` seconds, at most `--window`
  unacknowledged; paho re-sends what is unacknowledged on every new connection. A message
  counts as acknowledged when paho reports it published (PUBACK, or PUBCOMP); the soak notes
  the address each acknowledgement came from, in order.

`--kills` times: once the standby stands by, 0 to `--up` seconds later the active member is
SIGKILLed; the time until the other one's `/health` answers 200 is a **takeover time**; the
killed member is started again and becomes the standby, so the active member alternates.
Every random choice comes from `--seed`. After the last kill the soak waits until every
message is acknowledged and received, or nothing arrived for `--stall` seconds. The report:

* lost: acknowledged messages the subscriber never got (must be 0);
* QoS 2 duplicates (must be 0); QoS 1 duplicates (allowed: at least once);
* unacknowledged: messages never acknowledged (must be 0);
* acknowledged by two brokers: the addresses of the acknowledgements, in the order they
  came, form one run per active term; runs beyond the takeovers + 1 mean two members
  acknowledged in the same term (must be 0);
* takeovers that did not happen (must be 0), and the takeover times' median and p95.

Exit code 0 when every "must" holds, 1 otherwise, 2 for a bad argument. The work directory
(the members' logs, kill times) is kept when the run fails or with `--keep`.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from soak_common import (
    HOST,
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

NAMES = ("a", "b")
POLL = 0.2  # the members' [ha] poll_interval
MEMBER_CONFIG = """\
[[listeners]]
host = "{host}"
port = {port}

[[http]]
host = "{host}"
port = {http}

[limits]
# The soak checks durability across takeovers, not the queue bound: nothing is dropped.
max_queued_messages = 0

[ha]
enabled = true
member = "{name}"
poll_interval = {poll}
rejoin_delay = 1.0
server_reference = "{host}:{other}"

[store]
kind = "postgres"
dsn = "{dsn}"
sync = "full"
"""


@dataclass
class FailoverSoakConfig:
    kills: int = 100
    seed: int = 0
    messages: int = 3000  # per QoS
    duration: float = 380.0
    window: int = 20
    up: float = 1.0
    stall: float = 60.0
    dsn: str = ""  # "": a PostgreSQL server of the soak's own
    workdir: Path | None = None
    keep: bool = False
    quiet: bool = False


@dataclass(kw_only=True)
class FailoverSoakResult(TrafficResult):
    acknowledged_by_two: int  # acknowledgement runs beyond one per active term
    missed_takeovers: int
    takeover_seconds: list[float]

    @property
    def ok(self) -> bool:
        return self.traffic_ok and not self.acknowledged_by_two and not self.missed_takeovers

    @property
    def takeover_median(self) -> float:
        return statistics.median(self.takeover_seconds) if self.takeover_seconds else 0.0

    @property
    def takeover_p95(self) -> float:
        times = sorted(self.takeover_seconds)
        return times[min(len(times) - 1, int(0.95 * len(times)))] if times else 0.0

    def summary(self) -> str:
        return (
            f"seed {self.seed}: {self.kills} kills of the active member in {self.seconds:.0f} s;"
            f" {self.traffic_summary()}, acknowledged by two brokers {self.acknowledged_by_two},"
            f" missed takeovers {self.missed_takeovers}, sessions lost {self.sessions_lost};"
            f" takeover median {self.takeover_median:.2f} s, p95 {self.takeover_p95:.2f} s:"
            f" {'PASS' if self.ok else 'FAIL'}"
        )


class Member(BrokerProcess):
    """``python -m telemq serve`` as member `name` of the group, killed and restarted."""

    def __init__(self, workdir: Path, name: str, ports: dict[str, tuple[int, int]], dsn: str):
        super().__init__(workdir / name)
        self.name = name
        self.port, self.http = ports[name]
        other = ports[NAMES[1 - NAMES.index(name)]][0]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = self.workdir / "telemq.toml"
        self.config.write_text(
            MEMBER_CONFIG.format(
                host=HOST, port=self.port, http=self.http, name=name, poll=POLL, other=other,
                dsn=dsn.replace("\\", "\\\\").replace('"', '\\"'),
            )
        )  # fmt: skip

    def start(self, timeout: float = 60.0) -> None:
        """Start it and wait until its `/health` answers (as a standby or active)."""
        proc = self.launch("--config", str(self.config))
        deadline = time.monotonic() + timeout
        while self.role() == "down":
            if proc.poll() is not None:
                raise RuntimeError(f"member {self.name} exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"member {self.name} not answering within {timeout} s")
            time.sleep(0.02)

    def role(self) -> str:
        """`/health`'s role: "active", "standby", or "down" when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.http}/health", timeout=2) as answer:
                return str(json.loads(answer.read()).get("role", "down"))
        except urllib.error.HTTPError as error:
            try:
                return str(json.loads(error.read()).get("role", "down"))
            except ValueError:
                return "down"
        except (OSError, ValueError):
            return "down"


def failover_client(client_id: str) -> mqtt.Client:
    """A persistent paho client whose connections `FollowMembers` makes."""
    return mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=False,
        reconnect_on_failure=False,
    )


class FollowMembers:
    """A thread that connects `client` to one member, runs paho's loop until the connection
    ends or is refused, then tries the other (paho keeps the session's messages in flight
    and re-sends them)."""

    def __init__(self, client: mqtt.Client, ports: list[int]) -> None:
        self.client = client
        self.ports = ports
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            try:
                self.client.connect(HOST, self.ports[index], keepalive=30)
                self.client.loop_forever()
            except OSError:
                pass
            index = (index + 1) % len(self.ports)
            self._stop.wait(0.05)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.client.disconnect()
        self._thread.join(10)


class Subscriber(CountingSubscriber):
    """The persistent QoS 1 + QoS 2 subscriber (module docstring)."""

    def __init__(self, ports: list[int]) -> None:
        super().__init__(failover_client("failover-soak-sub"))
        self.connection = FollowMembers(self.client, ports)

    def start(self) -> None:
        self.connection.start()

    def stop(self) -> None:
        self.connection.stop()


class Publisher(CountingPublisher):
    """The persistent, paced QoS 1 + QoS 2 publisher (module docstring)."""

    def __init__(self, config: FailoverSoakConfig, ports: list[int]) -> None:
        client = failover_client("failover-soak-pub")
        super().__init__(client, config.messages, config.duration, config.window)
        self.connection = FollowMembers(client, ports)
        self.ack_ports: list[int] = []  # the member's port of each acknowledgement, in order

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
        super()._on_publish(client, userdata, mid, reason, props)
        self.ack_ports.append(self.client.port)  # this callback runs on the connection's thread

    def start(self) -> None:
        self.connection.start()
        self.start_publishing()

    def stop(self) -> None:
        self.stop_publishing()
        self.connection.stop()


def _in_role(member: Member, role: str) -> bool:
    return member.role() == role


def _wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _own_database() -> tuple[Any, str]:
    """A PostgreSQL server of the soak's own and a DSN of a database on it."""
    from testsupport.postgres import start_server

    server = start_server()
    return server, server.dsn(server.create_database())


def run_failover_soak(config: FailoverSoakConfig) -> FailoverSoakResult:
    """Run one failover soak (see the module docstring) and return its counts."""
    rng = random.Random(config.seed)
    own_workdir = config.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="telemq-failover-")) if own_workdir else config.workdir
    assert workdir is not None
    workdir.mkdir(parents=True, exist_ok=True)
    server, dsn = (None, config.dsn) if config.dsn else _own_database()
    ports = {name: (free_port(), free_port()) for name in NAMES}
    members = {name: Member(workdir, name, ports, dsn) for name in NAMES}
    mqtt_ports = [ports[name][0] for name in NAMES]
    subscriber = Subscriber(mqtt_ports)
    publisher = Publisher(config, mqtt_ports)
    kill_log = (workdir / "kills.log").open("a", encoding="utf-8")
    takeovers: list[float] = []
    missed = 0
    kills = 0
    started = time.monotonic()
    try:
        active, standby = members["a"], members["b"]
        active.start()
        if not _wait_for(lambda: active.role() == "active", 60):
            raise RuntimeError("member a never became active")
        standby.start()
        subscriber.start()
        if not subscriber.subscribed.wait(30.0):
            raise RuntimeError("the subscriber's SUBSCRIBE was not acknowledged")
        publisher.start()
        for kills in range(1, config.kills + 1):
            if not _wait_for(functools.partial(_in_role, standby, "standby"), 60):
                raise RuntimeError(f"member {standby.name} never stood by")
            time.sleep(rng.uniform(0.0, config.up))
            killed_at = time.monotonic()
            active.kill()
            kill_log.write(f"{killed_at - started:.4f} kill {kills} of member {active.name}\n")
            if _wait_for(functools.partial(_in_role, standby, "active"), 60):
                takeovers.append(time.monotonic() - killed_at)
                kill_log.write(f"  takeover by {standby.name} in {takeovers[-1]:.3f} s\n")
            else:
                missed += 1
                kill_log.write(f"  no takeover by {standby.name}\n")
            kill_log.flush()
            active.start()  # back, as the standby
            active, standby = standby, active
            if kills % 10 == 0:
                say(
                    config.quiet,
                    f"  {kills} kills, {time.monotonic() - started:.0f} s,"
                    f" {subscriber.deliveries} received",
                )
        drain(publisher, subscriber, config.messages, config.stall)
    finally:
        publisher.stop()
        subscriber.stop()
        for member in members.values():
            member.stop()
        kill_log.close()
        if server is not None:
            server.stop()
    errors = [line for member in members.values() for line in member.errors()]
    result = failover_result(
        config, kills, publisher, subscriber, takeovers, missed, started, workdir, errors
    )
    if own_workdir and result.ok and not config.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def ack_runs(ports: list[int]) -> int:
    """How many runs of one address the acknowledgements' addresses form."""
    return sum(1 for i, port in enumerate(ports) if i == 0 or ports[i - 1] != port)


def failover_result(
    config: FailoverSoakConfig,
    kills: int,
    publisher: Publisher,
    subscriber: Subscriber,
    takeovers: list[float],
    missed: int,
    started: float,
    workdir: Path,
    broker_errors: list[str],
) -> FailoverSoakResult:
    """The counts of a finished soak (see the module docstring)."""
    return FailoverSoakResult(
        seed=config.seed,
        kills=kills,
        **traffic_counts(publisher, subscriber),
        acknowledged_by_two=max(0, ack_runs(list(publisher.ack_ports)) - (len(takeovers) + 1)),
        missed_takeovers=missed,
        takeover_seconds=takeovers,
        seconds=time.monotonic() - started,
        workdir=str(workdir),
        broker_errors=broker_errors,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="SIGKILL the active member of a telemq [ha] pair over and over under QoS"
        " 1/2 traffic between two persistent paho-mqtt clients that know both members; report"
        " lost messages, duplicates and takeover times."
    )
    parser.add_argument("--kills", type=positive(int), default=100, help="kills (100)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (random)")
    parser.add_argument("--messages", type=positive(int), default=3000, help="per QoS (3000)")
    parser.add_argument(
        "--duration",
        type=positive(float),
        default=380.0,
        help="seconds the publisher's pace spreads the messages over (380)",
    )
    parser.add_argument(
        "--window", type=positive(int), default=20, help="unacknowledged at most (20)"
    )
    parser.add_argument(
        "--up",
        type=positive(float),
        default=1.0,
        help="a kill comes 0 to UP seconds after the standby stands by (1.0)",
    )
    parser.add_argument(
        "--stall",
        type=positive(float),
        default=60.0,
        help="end when nothing arrived for this many seconds (60)",
    )
    parser.add_argument(
        "--dsn",
        default="",
        help="the database (a libpq DSN with its password; default: a PostgreSQL server of"
        " the soak's own, which needs initdb and pg_ctl)",
    )
    add_output_arguments(parser)
    args, config = parse_config(parser, argv, FailoverSoakConfig)
    print(
        f"failover soak: seed {config.seed}, {config.kills} kills, {config.messages} messages"
        " per QoS",
        flush=True,
    )
    result = run_failover_soak(config)
    report(result, show_workdir=bool(args.keep or args.workdir), as_json=args.json)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
