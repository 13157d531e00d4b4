"""Process-wide settings for a broker process (`telemq serve` applies them).

They are measured choices (docs/performance.md), process-wide by nature, so the library
does not apply them by itself: a program that embeds `Broker` calls `tune_interpreter()`
and `reserve_descriptors()`.
"""

from __future__ import annotations

import fcntl
import gc
import os
import resource
import sys

# Generation thresholds for a broker process. Each message makes a few short-lived objects
# that outlive a young collection while they wait for a commit (1-3 ms), so with CPython's
# defaults (700, 10, 10) they reach the oldest generation by the thousand and a full
# collection, which scans every object of the process, ran several times a second: the
# largest part of the QoS 2 tail latency (p99 about 11 ms -> 5 ms) and a few percent of the
# throughput. Almost everything is freed by reference counting anyway; cycles are rare.
GC_THRESHOLDS = (2000, 20, 100)

# The store's writer thread needs the GIL between its SQLite statements. A thread waiting
# for the GIL only asks for it after a whole switch interval without a hand-over, and
# uvloop releases and re-takes the GIL around every poll and callback, so under load the
# writer waited hundreds of milliseconds per statement with the default 5 ms: the journal
# fell behind the event loop. With 0.5 ms it keeps up (QoS 0 fan-in +15%, tail latency of
# the journal's commits from ~100 ms to ~20 ms, nothing else measurably changed).
SWITCH_INTERVAL = 0.0005


def tune_interpreter() -> None:
    """Process-wide settings for a broker (see GC_THRESHOLDS and SWITCH_INTERVAL)."""
    gc.set_threshold(*GC_THRESHOLDS)
    gc.freeze()  # what start-up loaded is never scanned again
    sys.setswitchinterval(SWITCH_INTERVAL)


# A process's descriptor table grows by doubling (64, 128, 256, ... entries) as descriptors
# are opened, and in a process with more than one thread (the store's writer) the kernel
# waits for an RCU grace period at each growth (`expand_fdtable`), 4 to 7 ms here, inside the
# accept that needed it, while the event loop waits: the 256th and 512th connections of a
# burst stalled every client for that long, a fifth of the time 1,000 connections took.
# Grown once at start to what the descriptor limit allows, up to this many entries (8 bytes
# of kernel memory each, none in the broker's RSS), it never grows under load.
RESERVED_DESCRIPTORS = 65536


def reserve_descriptors(limit: int = RESERVED_DESCRIPTORS) -> int:
    """Grow the descriptor table now (see RESERVED_DESCRIPTORS) to `limit` entries or the
    soft RLIMIT_NOFILE, the smaller; returns the size asked for (0: nothing done)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = limit if soft == resource.RLIM_INFINITY else min(soft, limit)
    if count <= 64:  # the table every process starts with
        return 0
    probe = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        # The lowest free descriptor from count - 1 on: the table grows to hold it.
        os.close(fcntl.fcntl(probe, fcntl.F_DUPFD_CLOEXEC, count - 1))
    except OSError:
        return 0
    finally:
        os.close(probe)
    return count
