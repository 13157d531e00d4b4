"""The durable floor of a small window (not a test): this disk's fdatasync, and the store's commit.

``python bench/bench_fsync.py [--dir DIR] [--count 2000] [--window 10]``

With ``sync = "full"`` (the default) telemq acknowledges a QoS 1 or 2 PUBLISH after the
commit that holds it, and a commit ends in one ``fdatasync`` of SQLite's write-ahead log. A
publisher that keeps `--window` messages unacknowledged (the yardstick's q1_w10: 10) lets the
broker gather at most a window per commit, so no broker that stores before it acknowledges
goes faster than ``window / commit time``. This measures the two halves of that floor in
`--dir` (a temporary directory on the data disk's file system; default: the system's
temporary directory, which may be another disk or a tmpfs: give the broker's data directory's
disk):

- **fdatasync**: 4 KiB appended to a file, then ``os.fdatasync``, `--count` times: what the
  disk alone costs a commit (p50, p99, max);
- **store commit**: telemq's SQLite store (``sync = "full"``, the broker's own pragmas)
  committing a batch of `--window` QoS 1 journal rows, `--count` times: the commit as the
  broker's writer thread runs it.

and prints each one's ceiling for a window: ``window / p50`` messages per second. The broker's
q1_w10 rate in the yardstick (``../shared/bench``, scenario q1_w10) is then read against the
store commit's ceiling (docs/performance.md, "Small durable windows").
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from telemq.store import JournalRecord, SqliteStore, SyncMode, WriteBatch


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    """(p50, p99, max) in seconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99, ordered[-1]


def timed(count: int, step: Callable[[int], None]) -> list[float]:
    samples = []
    for index in range(count):
        start = time.perf_counter()
        step(index)
        samples.append(time.perf_counter() - start)
    return samples


def fdatasync_samples(directory: Path, count: int) -> list[float]:
    block = os.urandom(4096)
    fd = os.open(directory / "fsync.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:

        def append(_: int) -> None:
            os.write(fd, block)
            os.fdatasync(fd)

        return timed(count, append)
    finally:
        os.close(fd)


def commit_samples(directory: Path, count: int, window: int) -> list[float]:
    store = SqliteStore(directory / "telemq.db", SyncMode.FULL)
    payload = b'{"temp": 21.5, "hum": 40}'
    store.load()
    try:

        def commit(index: int) -> None:
            batch = WriteBatch()
            first = index * window + 1
            for seq in range(first, first + window):
                record = JournalRecord(
                    seq, seq, "sensors/a/temp", "", 1, False, payload, "pub", "user"
                )
                batch.append_journal(record)
            store.commit(batch)

        return timed(count, commit)
    finally:
        store.close()


def line(name: str, samples: list[float], window: int) -> str:
    p50, p99, worst = percentiles(samples)
    ceiling = window / p50
    return (
        f"{name:<14} p50 {p50 * 1e6:8.0f} us  p99 {p99 * 1e6:8.0f} us  max {worst * 1e6:8.0f} us"
        f"  ceiling for a window of {window}: {ceiling:10,.0f} msgs/s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="a directory on the data disk")
    parser.add_argument("--count", type=int, default=2000, help="fsyncs and commits to time")
    parser.add_argument("--window", type=int, default=10, help="messages per commit")
    args = parser.parse_args(argv)
    if args.count < 1 or args.window < 1:
        parser.error("--count and --window must be at least 1")
    if args.dir is not None and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: not a directory")
    with tempfile.TemporaryDirectory(prefix="telemq-fsync-", dir=args.dir) as tmp:
        where = Path(tmp)
        print(
            f"{args.count} samples each in {where.parent} (load average {os.getloadavg()[0]:.2f})"
        )
        print(line("fdatasync", fdatasync_samples(where, args.count), args.window))
        print(line("store commit", commit_samples(where, args.count, args.window), args.window))
    return 0


if __name__ == "__main__":
    sys.exit(main())
