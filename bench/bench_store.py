"""Store benchmark: commits/s and messages/s for each sync mode and batch size.

Two workloads, each with `size` messages per batch (group commit of `size` PUBLISHes):

- qos1: one journal append per message, the cost of accepting a QoS 1 publication that
  no persistent session must keep;
- persistent: journal + message + delivery per message in one batch, then a second batch
  deleting the deliveries and messages, as the subscriber's PUBACKs would.
  Its commits/s counts both batches.

Run from a checkout: `python bench/bench_store.py --seconds 2`. Uses a temporary directory,
so the numbers are those of the file system that holds it (set TMPDIR to measure another).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from telemq.store import (
    DeliveryRecord,
    JournalRecord,
    MemoryStore,
    SqliteStore,
    Store,
    StoredMessage,
    SyncMode,
    WriteBatch,
)

Workload = Callable[[Store, int, int, bytes], int]  # (store, first id, size, payload) -> commits


def qos1(store: Store, first: int, size: int, payload: bytes) -> int:
    batch = WriteBatch()
    for seq in range(first, first + size):
        batch.append_journal(
            JournalRecord(seq, seq, "sensors/a/temp", "", 1, False, payload, "pub", "user")
        )
    store.commit(batch)
    return 1


def persistent(store: Store, first: int, size: int, payload: bytes) -> int:
    publish = WriteBatch()
    ids = range(first, first + size)
    for i in ids:
        publish.append_journal(
            JournalRecord(i, i, "sensors/a/temp", "", 1, False, payload, "pub", "user")
        )
        publish.put_message(
            StoredMessage(i, "sensors/a/temp", payload, 1, False, "", "pub", "user", i)
        )
        publish.put_delivery(DeliveryRecord(i, "subscriber", i, 1))
    store.commit(publish)
    acks = WriteBatch()
    for i in ids:
        acks.delete_delivery(i)
        acks.delete_message(i)
    store.commit(acks)
    return 2


WORKLOADS: dict[str, Workload] = {"qos1": qos1, "persistent": persistent}


def measure(
    kind: str, mode: SyncMode, workload: Workload, size: int, payload: bytes, seconds: float
) -> tuple[float, float]:
    """(commits/s, messages/s) of one workload on a fresh store."""
    with tempfile.TemporaryDirectory(prefix="telemq-bench-") as tmp:
        store: Store = (
            SqliteStore(Path(tmp) / "telemq.db", mode) if kind == "sqlite" else MemoryStore()
        )
        try:
            store.load()
            commits = messages = 0
            next_id = 1
            start = time.perf_counter()
            deadline = start + seconds
            while time.perf_counter() < deadline:
                commits += workload(store, next_id, size, payload)
                next_id += size
                messages += size
            elapsed = time.perf_counter() - start
        finally:
            store.close()
    return commits / elapsed, messages / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="run time per measurement")
    parser.add_argument("--modes", default="full,normal,off", help="sync modes, comma-separated")
    parser.add_argument("--sizes", default="1,10,100", help="messages per batch")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="qos1, persistent")
    parser.add_argument("--payload", type=int, default=64, help="payload bytes per message")
    parser.add_argument("--kind", choices=("sqlite", "memory"), default="sqlite")
    args = parser.parse_args()

    modes = [SyncMode(m) for m in args.modes.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    workloads = args.workloads.split(",")
    payload = os.urandom(args.payload)
    print(
        f"telemq store benchmark: {args.kind} (SQLite {sqlite3.sqlite_version}),"
        f" payload {args.payload} B, {args.seconds:g} s per line, dir {tempfile.gettempdir()}"
    )
    print(f"{'sync':<8}{'workload':<12}{'batch':>6}{'commits/s':>12}{'messages/s':>13}")
    for mode in modes if args.kind == "sqlite" else [SyncMode.OFF]:
        for name in workloads:
            for size in sizes:
                commits, messages = measure(
                    args.kind, mode, WORKLOADS[name], size, payload, args.seconds
                )
                label = mode.value if args.kind == "sqlite" else "-"
                print(f"{label:<8}{name:<12}{size:>6}{commits:>12,.0f}{messages:>13,.0f}")


if __name__ == "__main__":
    main()
