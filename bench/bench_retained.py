"""Retained lookup benchmark (not a test): the time to find the retained messages that a
SUBSCRIBE of many filters matches, with many messages retained.

``python bench/bench_retained.py [--retained 50000] [--filters 1000]``

The case that stalled the broker before the index: `--retained` messages on
`r/NNN/NNNN` and one SUBSCRIBE of `--filters` filters `nomatch/{i}/+`, which match nothing.
Two ways, in the same run, over the same topics:

- **index** (the broker's behaviour): `broker.retained.TopicIndex.match`, a walk along the
  filter's levels;
- **scan**: every retained topic tested with `protocol.topic_matches` (what the broker did
  before), for comparison.

A second line matches `r/+/0001`-style filters that each find one message: the `+` visits
the 1,000 children of `r`, so the index costs what the filter covers, still far below the
scan. Compare the modes of one run; absolute times depend on the machine.
"""

from __future__ import annotations

import argparse
import time

from telemq.broker.core.retained import TopicIndex
from telemq.protocol import topic_matches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--retained", type=int, default=50_000)
    parser.add_argument("--filters", type=int, default=1_000)
    args = parser.parse_args()
    topics = [f"r/{n % 1000:03d}/{n:04d}" for n in range(args.retained)]
    index = TopicIndex()
    for topic in topics:
        index.add(topic)
    for label, filters in (
        ("match nothing", [f"nomatch/{i}/+" for i in range(args.filters)]),
        ("match one each", [f"r/+/{i:04d}" for i in range(args.filters)]),
    ):
        start = time.perf_counter()
        found = sum(len(index.match(f)) for f in filters)
        indexed = time.perf_counter() - start
        start = time.perf_counter()
        scanned = sum(1 for f in filters for t in topics if topic_matches(f, t))
        scan = time.perf_counter() - start
        assert found == scanned
        print(
            f"{label}: {args.filters} filters x {args.retained} retained, {found} matches: "
            f"index {indexed * 1000:.1f} ms, scan {scan * 1000:.0f} ms ({scan / indexed:.0f}x)"
        )


if __name__ == "__main__":
    main()
