"""Benchmark of the SQL filter evaluator (not a test): ``python bench/bench_filters.py``.

Reports evaluations per second for a simple, a medium and a deep (64 levels) filter, the
cost ratio of the deep filter to its flat equivalent, and publications per second through
`FilterSet` with 1, 100 and 1,000 distinct filters on one message. Numbers depend on the
machine and its load; compare ratios taken in the same run.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from functools import partial

from telemq.filters import FilterSet, Message, compile_filter

PAYLOAD = json.dumps(
    {
        "device": "d-0042",
        "temp": 31.5,
        "humidity": 48,
        "status": "on",
        "site": {"name": "Lab 4", "id": 2, "floor": 3},
        "readings": [30.9, 31.2, 31.5],
        "tags": ["hvac", "north"],
    }
).encode()
PROPERTIES = {"Topic": "sensors/lab4/d-0042", "QoS": 1, "Retain": False, "ClientId": "d-0042"}

SIMPLE = "temp > 30"
MEDIUM = (
    "temp > 30 AND (site.name LIKE 'Lab%' OR site.id IN (1, 2, 3)) AND status <> 'off'"
    " AND humidity BETWEEN 20 AND 80 AND readings[0] * 1.8 + 32 > 80"
)


def deep_and_flat(depth: int = 64) -> tuple[str, str]:
    """A filter nested `depth` levels (alternating OR/AND in parentheses) and a flat one
    with the same comparisons; on PAYLOAD both evaluate every comparison."""
    fields = [f"x{i}" for i in range(depth + 1)]
    nested = f"{fields[depth]} IS NULL"
    for i in range(depth - 1, -1, -1):
        word = "AND" if i % 2 else "OR"
        nested = f"({fields[i]} = {i} {word} {nested})"
    flat = " OR ".join(f"{f} = {i}" for i, f in enumerate(fields[:-1]))
    return nested, f"{flat} OR {fields[depth]} IS NULL"


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of `fn`, timed over about `seconds`."""
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed
        n = max(n * 2, int(n * seconds / max(elapsed, 1e-9) * 1.1))


def many_filters(count: int, indexable: bool) -> FilterSet[int]:
    """`count` distinct filters in three shapes.

    Indexable: each has an equality or numeric range conjunct that `FilterSet` can file
    under (so most filters are skipped for a given message). Not indexable: the same kind
    of work hidden behind OR and arithmetic, so every filter is evaluated.
    """
    fs: FilterSet[int] = FilterSet()
    for i in range(count):
        shape = i % 3
        if indexable:
            text = [
                f"device = 'd-{i:04d}' AND temp > {i % 40}",
                f"temp BETWEEN {i % 50} AND {i % 50 + 0.5} AND humidity < {i}",
                f"humidity >= {40 + i} AND site.name LIKE 'Lab%'",
            ][shape]
        else:
            text = [
                f"device = 'd-{i:04d}' OR temp > {i % 40 + 60}",
                f"temp - {i % 50} BETWEEN 0 AND 0.5 AND humidity < {i}",
                f"site.name LIKE 'Lab {i}%' OR Properties.QoS IN ({i % 3 + 3}, {i % 3 + 4})",
            ][shape]
        fs.add(i, text)
    assert fs.distinct == count
    return fs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    args = parser.parse_args()
    seconds = args.seconds

    print(f"payload: {len(PAYLOAD)} bytes of JSON\n")
    print(f"{'filter':<42} {'eval/s (parse+eval)':>20} {'eval/s (parsed)':>16}")
    deep, flat = deep_and_flat()
    cases = [
        ("simple: " + SIMPLE, SIMPLE),
        ("medium: 5 predicates, LIKE, IN", MEDIUM),
        ("deep: 64 nested levels", deep),
        ("flat equivalent of deep", flat),
    ]
    parsed_rates = {}
    for label, text in cases:
        f = compile_filter(text)
        message = Message(PAYLOAD, PROPERTIES)
        assert f.evaluate_message(message) is f.evaluate(PAYLOAD, PROPERTIES)
        full = rate(partial(f.evaluate, PAYLOAD, PROPERTIES), seconds)
        parsed = rate(partial(f.evaluate_message, message), seconds)
        parsed_rates[text] = parsed
        print(f"{label:<42} {full:>20,.0f} {parsed:>16,.0f}")
    print(
        f"\ndeep/flat evaluation cost ratio: {parsed_rates[flat] / parsed_rates[deep]:.2f}"
        " (1.00 = same cost)"
    )
    compile_deep = rate(lambda: compile_filter(deep), seconds)
    compile_flat = rate(lambda: compile_filter(flat), seconds)
    print(
        f"deep/flat compile cost ratio:    {compile_flat / compile_deep:.2f}"
        f" ({compile_deep:,.0f} deep compiles/s)"
    )
    print(
        "parse only (json, once per message): "
        f"{rate(lambda: Message(PAYLOAD).document, seconds):,.0f} payloads/s"
    )

    print(f"\n{'FilterSet, one message':<52} {'messages/s':>12} {'filters/s':>14} {'matches':>8}")
    for indexable in (True, False):
        for count in (1, 100, 1000):
            fs = many_filters(count, indexable)
            matched = fs.matching(PAYLOAD, PROPERTIES)
            expected = {k for k, v in fs.evaluate(PAYLOAD, PROPERTIES).items() if v is True}
            assert matched == expected
            per_second = rate(partial(fs.matching, PAYLOAD, PROPERTIES), seconds)
            kind = "indexable" if indexable else "not indexable"
            label = f"{count:>5} distinct filters ({kind}, {fs.indexed} indexed)"
            print(
                f"{label:<52} {per_second:>12,.0f} {per_second * count:>14,.0f} {len(matched):>8}"
            )


if __name__ == "__main__":
    main()
