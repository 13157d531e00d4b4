"""Consumer records: how far each streaming query has committed, for journal retention.

Design section 8: retention "never drops rows that a running pipeline query has not
committed". The broker cannot ask Spark, so each stream reader leaves a small JSON file in
the broker's data directory, ``<data_dir>/pipeline-commits/<consumer>.json``::

    {"consumer": "ingest-3f9c...", "committed_seq": 41200, "running": true,
     "pid": 8123, "host": "node-1", "updated_us": 1732240000000000}

- written when the query starts (``committed_seq`` null: position not known yet, so nothing
  may be trimmed), on every source `commit`, and at least every `HEARTBEAT_S` seconds while
  the query polls the journal (``updated_us`` is a heartbeat);
- ``committed_seq`` is the last seq the query has fully processed. Spark calls the source's
  `commit` one batch late (when it plans the *next* batch; never for the last batch of a run
  that ends), so the value is conservative: a restarted query may re-read rows above it,
  never below;
- ``pid``/``host`` are those of the process running the query's offset methods (on the
  driver's machine). Spark kills that process when the query stops, usually without calling
  the source's `stop`, so "running" is judged by `is_live`: the flag, and the pid alive (same
  host) or a recent heartbeat (another host). The jobs mark their own consumer stopped, with
  the final offset, when their query ends (`update_record`).

A trimmer may delete rows with ``seq <= retention_floor(data_dir)``. Files are replaced
atomically (write + rename), so a reader sees either the old or the new content.

Queries that read the journal over the network (the journal service) have no file here: they
commit their offsets to the broker, which keeps them in the store (`ConsumerOffset`), stamped
with the broker's own clock. Such an offset holds retention back while it is running and was
written within `STALE_AFTER_S` (a polling query writes at least every `HEARTBEAT_S`):
`offsets_floor`. The broker's retention takes the lower of the two floors.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from .base import ConsumerOffset

__all__ = [
    "COMMITS_DIR",
    "HEARTBEAT_S",
    "STALE_AFTER_S",
    "ConsumerRecord",
    "is_live",
    "offset_is_live",
    "offsets_floor",
    "read_records",
    "record_path",
    "remove_record",
    "retention_floor",
    "update_record",
    "write_record",
]

COMMITS_DIR = "pipeline-commits"
HEARTBEAT_S = 10.0  # a polling query rewrites its record at least this often
STALE_AFTER_S = 120.0  # a record from another host not updated for this long: not live
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(slots=True)
class ConsumerRecord:
    """One streaming query's position in the journal (see the module docstring)."""

    consumer: str
    committed_seq: int | None
    running: bool = True
    pid: int = 0
    host: str = ""
    updated_us: int = 0


def record_path(data_dir: str | os.PathLike[str], consumer: str) -> Path:
    """Where `consumer`'s record lives (the name made safe for a file name)."""
    return Path(data_dir) / COMMITS_DIR / f"{_UNSAFE.sub('_', consumer)}.json"


def write_record(data_dir: str | os.PathLike[str], record: ConsumerRecord) -> None:
    """Replace `record`'s file atomically, stamping pid, host and time."""
    record.pid = os.getpid()
    record.host = socket.gethostname()
    record.updated_us = time.time_ns() // 1000
    path = record_path(data_dir, record.consumer)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(asdict(record)), encoding="utf-8")
    os.replace(temp, path)


def remove_record(data_dir: str | os.PathLike[str], consumer: str) -> None:
    record_path(data_dir, consumer).unlink(missing_ok=True)


def read_records(data_dir: str | os.PathLike[str]) -> list[ConsumerRecord]:
    """Every consumer record under `data_dir` (unreadable files are skipped)."""
    records = []
    for path in sorted((Path(data_dir) / COMMITS_DIR).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            seq = data.get("committed_seq")
            records.append(
                ConsumerRecord(
                    consumer=str(data["consumer"]),
                    committed_seq=seq if isinstance(seq, int) else None,
                    running=bool(data.get("running", True)),
                    pid=int(data.get("pid", 0)),
                    host=str(data.get("host", "")),
                    updated_us=int(data.get("updated_us", 0)),
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return records


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def is_live(record: ConsumerRecord, now_us: int | None = None) -> bool:
    """Whether `record` belongs to a query that is still running (see the module docstring)."""
    if not record.running:
        return False
    if record.host == socket.gethostname():
        return _pid_alive(record.pid)
    now = time.time_ns() // 1000 if now_us is None else now_us
    return now - record.updated_us <= STALE_AFTER_S * 1_000_000


def update_record(
    data_dir: str | os.PathLike[str],
    consumer: str,
    committed_seq: int | None = None,
    *,
    running: bool,
) -> None:
    """Create or update `consumer`'s record: running or ended, having processed up to
    `committed_seq` (None: as recorded)."""
    found = {r.consumer: r for r in read_records(data_dir)}.get(consumer)
    record = found or ConsumerRecord(consumer, None)
    if committed_seq is not None:
        record.committed_seq = committed_seq
    record.running = running
    write_record(data_dir, record)


def retention_floor(
    data_dir: str | os.PathLike[str], *, include_stopped: bool = False
) -> int | None:
    """The largest seq that journal retention may delete, as far as the pipeline is concerned.

    None when no live consumer constrains it; 0 when one has not committed yet. Stopped (or
    dead) consumers count only with `include_stopped`: they resume from their checkpoint.
    """
    floor: int | None = None
    for record in read_records(data_dir):
        if not include_stopped and not is_live(record):
            continue
        seq = record.committed_seq if record.committed_seq is not None else 0
        floor = seq if floor is None else min(floor, seq)
    return floor


def offset_is_live(offset: ConsumerOffset, now_us: int | None = None) -> bool:
    """Whether a network consumer's offset belongs to a query still running: flagged so, and
    written within `STALE_AFTER_S` (its heartbeat)."""
    if not offset.running:
        return False
    now = time.time_ns() // 1000 if now_us is None else now_us
    return now - offset.updated_us <= STALE_AFTER_S * 1_000_000


def offsets_floor(offsets: Iterable[ConsumerOffset], now_us: int | None = None) -> int | None:
    """`retention_floor` for the offsets the broker keeps: the lowest committed seq of the
    live ones, 0 for one that has not committed yet, None when none is live."""
    seqs = [
        o.committed_seq if o.committed_seq is not None else 0
        for o in offsets
        if offset_is_live(o, now_us)
    ]
    return min(seqs) if seqs else None
