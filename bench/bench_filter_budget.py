"""Content-filter time per publication (not a test): the bound `limits.max_filter_time` sets.

``python bench/bench_filter_budget.py [--users 2] [--payload 60000] [--publications 50]``

The worst the default registration budgets admit, per user: 64 filters of 127
``s LIKE '%...%'`` terms (size 255 each: `max_filter_size` 256, `max_filter_size_per_user`
16,384), all on one topic, against a publication whose ``s`` is `--payload` characters long,
so every LIKE scans it all. `--users` users fill their budgets. Two ways, in the same run:

- **budget**: `Registry.targets` with the default `max_filter_time` (5 ms per user):
  evaluation of a user's filters stops once they have spent it, the rest of that user's is
  skipped (counted);
- **unbounded**: `max_filter_time = 0`, every filter evaluated: what one publication cost
  before the budget.

Prints the median and the maximum time per publication and how many filtered subscriptions
were skipped. The maximum with the budget is, per user, the budget plus one filter's
evaluation (a filter is never interrupted). Compare the modes of one run; absolute times
depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import string
import time

from telemq.broker.settings.config import LimitsConfig
from telemq.filters import compile_filter
from telemq.subscriptions import Identity, Registry, Subscription

TERMS = 127  # 2 nodes per LIKE, 1 for the OR: size 255


def build(registry: Registry, users: int, rng: random.Random) -> None:
    for user in range(users):
        for n in range(64):
            words = (
                "".join(rng.choice(string.ascii_lowercase) for _ in range(5)) for _ in range(TERMS)
            )
            text = " OR ".join(f"s LIKE '%{w}%'" for w in words)
            registry.add(
                Subscription(
                    id=registry.new_id(),
                    identity=Identity("QM", f"u{user}-q{n}"),
                    topic="h",
                    filter_text=text,
                    compiled=compile_filter(text),
                    owner=f"user{user}",
                )
            )


def measure(filter_time: float, args: argparse.Namespace) -> tuple[list[float], int]:
    registry = Registry(filter_time=filter_time)
    build(registry, args.users, random.Random(1))
    payload = json.dumps({"s": "x" * args.payload}).encode()
    times: list[float] = []
    for _ in range(args.publications):
        start = time.perf_counter()
        registry.targets("", "h", payload, 1, False, "pub", "")
        times.append(time.perf_counter() - start)
    return times, registry.filters_skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=2)
    parser.add_argument("--payload", type=int, default=60_000)
    parser.add_argument("--publications", type=int, default=50)
    args = parser.parse_args()
    logging.getLogger("telemq").setLevel(logging.ERROR)  # the skips are counted below
    default = LimitsConfig().max_filter_time
    print(f"{args.users} users x 64 filters x {TERMS} LIKE terms, s of {args.payload:,} characters")
    for label, budget in (("budget", default), ("unbounded", 0.0)):
        publications = args.publications if budget else max(3, args.publications // 10)
        times, skipped = measure(
            budget, argparse.Namespace(**{**vars(args), "publications": publications})
        )
        print(
            f"{label:>9} ({budget * 1000:.0f} ms): median {statistics.median(times) * 1000:7.2f} ms"
            f"  max {max(times) * 1000:7.2f} ms"
            f"  skipped {skipped / publications:.0f} per publication"
        )


if __name__ == "__main__":
    main()
