"""Routing benchmark (not a test): publications/s routed by a broker holding 1,000
subscriptions with distinct SQL filters on one topic.

``python bench/bench_routing.py [--subscriptions 1000] [--seconds 2]``

The broker runs in-process (memory store, journal off, no listener traffic): each
publication goes through `Broker.publish`, i.e. the topic match (cached per topic) and the
filters, exactly as a client's PUBLISH would after decoding; the subscribers' sessions are
offline, so nothing is encoded or sent and the number is the routing cost alone. Two modes,
in the same run:

- **indexed** (the broker's behaviour): the route's filters are matched through a
  `FilterSet`, which files each filter under an equality, IN or range conjunct, reads each
  indexed field once per message and evaluates only the filters whose index entry matches;
- **one by one**: every filter evaluated for every message (what the broker would do
  without the index), for comparison.

The filters have the shapes users write (equality, IN, ranges, BETWEEN, with extra
conjuncts); the payloads vary so that each message matches a few subscriptions. The issue's
target is >= 20,000 publications/s routed for 1,000 filters. Numbers depend on the machine
and its load; compare the two modes of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from telemq.broker.server import Broker
from telemq.broker.settings.config import BrokerConfig
from telemq.filters import Message, compile_filter
from telemq.subscriptions import Identity, Persistence, Subscription, registry

TOPIC = "sensors/lab4/d"
DEVICES = 200


def filter_text(i: int) -> str:
    """The i-th of the distinct filters, cycling through common shapes."""
    shape = i % 5
    if shape == 0:
        return f"device = 'd-{i % DEVICES:04d}' AND temp > {i / 25}"
    if shape == 1:
        return f"temp BETWEEN {i % 50} AND {i % 50 + 0.5} AND humidity < {i}"
    if shape == 2:
        return f"site.id IN ({i}, {i + 1000}, {i + 2000}) AND status = 'on'"
    if shape == 3:
        return f"humidity BETWEEN {40 + i} AND {45 + i} AND site.name LIKE 'Lab%'"
    return f"status IN ('s{i}', 't{i}')"


def payloads(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [
        json.dumps(
            {
                "device": f"d-{rng.randrange(DEVICES):04d}",
                "temp": round(rng.uniform(0, 50), 1),
                "humidity": rng.randrange(20, 1100),
                "status": rng.choice(["on", "off", "s5", "t9"]),
                "site": {"name": "Lab 4", "id": rng.randrange(1000)},
            }
        ).encode()
        for _ in range(count)
    ]


async def measure(subscriptions: int, seconds: float, indexed: bool) -> tuple[float, float]:
    """(publications/s, mean matching subscriptions per publication)."""
    config = BrokerConfig()
    config.store.kind = "memory"
    config.journal.enabled = False
    config.sys.interval = 0
    config.listeners[0].port = 0
    broker = Broker(config)
    await broker.start()
    saved = registry.FILTER_SET_MIN
    registry.FILTER_SET_MIN = saved if indexed else 1 << 30
    try:
        texts = [filter_text(i) for i in range(subscriptions)]
        assert len(set(texts)) == subscriptions, "filters must be distinct"
        for i, text in enumerate(texts):
            queue = f"app-{i:04d}"
            broker.sessions_room.ensure_queue(queue, "")
            broker.registry.add(
                Subscription(
                    id=broker.registry.new_id(),
                    identity=Identity(config.name, queue),
                    topic=TOPIC,
                    filter_text=text,
                    persistence=Persistence.NON_PERS,
                    compiled=compile_filter(text),
                )
            )
        bodies = payloads(500)
        compiled = [compile_filter(t) for t in texts]
        sample = [Message(body, {"Topic": TOPIC}) for body in bodies[:50]]
        matches = sum(1 for m in sample for f in compiled if f.evaluate_message(m) is True)
        route = broker.registry.route("", TOPIC)
        assert route is not None and (route.filter_set is not None) == indexed
        published = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for body in bodies:
                broker.publish(TOPIC, body)
            published += len(bodies)
        elapsed = time.perf_counter() - start
        return published / elapsed, matches / len(sample)
    finally:
        registry.FILTER_SET_MIN = saved
        await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscriptions", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    args = parser.parse_args()
    print(f"{args.subscriptions} subscriptions, distinct filters, one topic ({TOPIC})")
    results = {}
    for indexed in (True, False):
        rate, matched = asyncio.run(measure(args.subscriptions, args.seconds, indexed))
        results[indexed] = rate
        label = "indexed (FilterSet)" if indexed else "one by one"
        print(f"  {label:<22} {rate:>10,.0f} publications/s  ({matched:.1f} matches each)")
    print(
        f"  indexed / one by one: {results[True] / results[False]:.1f}x"
        "  (target: >= 20,000 publications/s indexed)"
    )


if __name__ == "__main__":
    main()
