#!/usr/bin/env python3
"""Network soak: QoS 1 and QoS 2 across three linked brokers, each of them killed with
SIGKILL in turn, then the first link down for minutes.

Theory of operation. Three telemq brokers on 127.0.0.1 form the chain A - B - C (A dials B
through a TCP relay the soak controls, B dials C; SQLite, `sync = "full"`, journal on). The
crash soak's two persistent paho-mqtt clients (crash_soak.py: paho's own reconnection,
`<qos>:<seq>` payloads, QoS 2 counted on PUBREL) take the two ends: the **publisher** at A,
the **subscriber** at C, so every message crosses both links, stored and forwarded at each
hop (docs/network.md §6).

1. **Kills.** `--kills` times a broker chosen at random (A, B or C) is SIGKILLed 0-`--up`
   seconds after the previous restart was ready, kept down 0-`--down` seconds and restarted
   on its data directory. Killing A cuts the publisher, C the subscriber, B both links.
2. **A link down for minutes.** The relay between A and B then drops its connections and
   refuses new ones for `--link-down` seconds while the publisher goes on: A acknowledges
   and keeps everything for B in its link queue, durably.
3. **Drain.** The relay lets the link come back; the soak waits until the publisher has
   every message acknowledged and the subscriber has them all, or nothing arrived for
   `--stall` seconds.

The publisher spreads its messages over `--duration` seconds, which should outlast the kills
and the link-down phase. Every random choice comes from `--seed`. The report counts lost
(acknowledged by A, never at C: must be 0), QoS 2 duplicates (must be 0), QoS 1 duplicates
(allowed), unacknowledged (must be 0), and ERROR lines or tracebacks in the three brokers'
logs (must be none). Exit code 0 when all hold, 1 otherwise, 2 for a bad argument; the work
directory is kept when the run fails or `--keep` is given. docs/reliability.md records runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from crash_soak import (
    BROKER_CONFIG,
    PROTOCOLS,
    Broker,
    Publisher,
    SoakConfig,
    SoakResult,
    Subscriber,
    Trace,
    soak_result,
)
from soak_common import drain, free_port, parse_config, positive

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from testsupport.process import users_and_acl
from testsupport.relay import Relay

NAMES = ("A", "B", "C")


@dataclasses.dataclass
class NetworkSoakConfig:
    kills: int = 30
    seed: int = 0
    messages: int = 3000  # per QoS
    duration: float = 300.0
    window: int = 20
    up: float = 2.0
    down: float = 1.0
    link_down: float = 180.0
    stall: float = 90.0
    protocol: str = "3.1.1"
    workdir: Path | None = None
    keep: bool = False


def broker_config(name: str, dials: tuple[str, int] | None, accepts: str | None) -> str:
    """The configuration of broker `name`: the soak's limits, the link user it accepts, the
    link it dials (`(neighbour, port)`)."""
    lines = [f'name = "{name}"', "allow_anonymous = true", BROKER_CONFIG]
    if accepts is not None:
        lines.append(users_and_acl({f"link-{accepts}": f"secret-{accepts}"}, []))
        lines += ["[[links]]", f'name = "{accepts}"', f'user = "link-{accepts}"', ""]
    if dials is not None:
        neighbour, port = dials
        lines += [
            "[[links]]",
            f'name = "{neighbour}"',
            'host = "127.0.0.1"',
            f"port = {port}",
            f'username = "link-{name}"',
            f'password = "secret-{name}"',
            "reconnect_min = 0.1",
            "reconnect_max = 1.0",
            "",
        ]
    return "\n".join(lines)


def run_network_soak(config: NetworkSoakConfig) -> SoakResult:
    rng = random.Random(config.seed)
    own_workdir = config.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="telemq-netsoak-")) if own_workdir else config.workdir
    assert workdir is not None
    ports = {name: free_port() for name in NAMES}
    while len(set(ports.values())) < len(NAMES):  # a port just released may come again
        ports = {name: free_port() for name in NAMES}
    relay = Relay(ports["B"])
    brokers: dict[str, Broker] = {}
    links = {"A": (("B", relay.port), None), "B": (("C", ports["C"]), "A"), "C": (None, "B")}
    for name in NAMES:
        (workdir / name).mkdir(parents=True, exist_ok=True)
        dials, accepts = links[name]
        brokers[name] = Broker(workdir / name, ports[name], broker_config(name, dials, accepts))
    clients = SoakConfig(
        seed=config.seed,
        messages=config.messages,
        duration=config.duration,
        window=config.window,
        stall=config.stall,
        protocol=config.protocol,
    )
    no_trace = Trace(None)
    subscriber = Subscriber(clients, ports["C"], random.Random(rng.random()), no_trace)
    publisher = Publisher(clients, ports["A"], no_trace)
    log = (workdir / "events.log").open("a", encoding="utf-8")
    started = time.monotonic()

    def note(text: str) -> None:
        log.write(f"{time.monotonic() - started:.3f} {text}\n")
        log.flush()
        print(f"  {time.monotonic() - started:5.0f} s  {text}", flush=True)

    kills = 0
    try:
        for name in ("C", "B", "A"):
            brokers[name].start()
        subscriber.start()
        if not subscriber.subscribed.wait(30.0):
            raise RuntimeError("the subscriber's SUBSCRIBE was not acknowledged")
        time.sleep(2.0)  # the subscription's proxies reach B and A
        publisher.start()
        for kills in range(1, config.kills + 1):
            time.sleep(rng.uniform(0.0, config.up))
            victim = rng.choice(NAMES)
            brokers[victim].kill()
            time.sleep(rng.uniform(0.0, config.down))
            brokers[victim].start()
            if kills % 10 == 0:
                note(f"{kills} kills, {subscriber.deliveries} received")
        note(f"link A - B down for {config.link_down:.0f} s")
        relay.blocked = True
        relay.cut()
        time.sleep(config.link_down)
        relay.blocked = False
        note(f"link A - B back; {subscriber.deliveries} received")
        drain(publisher, subscriber, config.messages, config.stall)
    finally:
        publisher.stop()
        subscriber.stop()
        for broker in brokers.values():
            broker.stop()
        relay.close()
        log.close()
    errors = [f"{name}: {e}" for name, b in brokers.items() for e in b.errors()]
    kind = "at C, publisher at A"
    result = soak_result(clients, kind, kills, publisher, subscriber, started, workdir, errors)
    if own_workdir and result.ok and not config.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="SIGKILL each of three linked telemq brokers in turn, then hold a link "
        "down for minutes, under QoS 1/2 traffic from A to C; report losses and duplicates."
    )
    parser.add_argument("--kills", type=positive(int), default=30, help="kills (30)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (random)")
    parser.add_argument("--messages", type=positive(int), default=3000, help="per QoS (3000)")
    parser.add_argument(
        "--duration", type=positive(float), default=300.0, help="publishing spread (300 s)"
    )
    parser.add_argument("--window", type=positive(int), default=20, help="in flight (20)")
    parser.add_argument("--up", type=positive(float), default=2.0, help="up 0-UP s (2.0)")
    parser.add_argument("--down", type=positive(float), default=1.0, help="down 0-DOWN s (1)")
    parser.add_argument(
        "--link-down", type=positive(float), default=180.0, help="link A - B down (180 s)"
    )
    parser.add_argument("--stall", type=positive(float), default=90.0, help="stall (90 s)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="3.1.1")
    parser.add_argument("--workdir", type=Path, help="keep everything here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    _, config = parse_config(parser, argv, NetworkSoakConfig)
    print(
        f"network soak: seed {config.seed}, {config.kills} kills, link down "
        f"{config.link_down:.0f} s, {config.messages} messages per QoS, MQTT {config.protocol}",
        flush=True,
    )
    result = run_network_soak(config)
    print(result.summary())
    for qos in (1, 2):
        if result.lost[qos]:
            print(f"  lost QoS {qos}: {result.lost[qos][:20]}")
    for line in result.broker_errors[:20]:
        print(f"  broker: {line}")
    if not result.ok:
        print(f"  work directory kept: {result.workdir}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
