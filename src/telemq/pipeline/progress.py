"""Progress output for the jobs: timestamped lines, and Spark's task counts while a job runs.

`Reporter` prints ``[  12.3s] message`` lines (stderr by default, so stdout stays for
results). `Reporter.watch(spark)` is a context manager whose thread polls Spark's status
tracker twice a second and reports the running stages' finished/total tasks: on a terminal
one line updated in place, otherwise a line every few seconds while stages run.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Reporter"]

_LINE_EVERY_S = 5.0  # not a terminal: a task-count line at most this often


class Reporter:
    """Timestamped progress lines (see the module docstring)."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._inline = False  # a status line is shown and must be cleared first
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        with self._lock:
            self._clear()
            self.stream.write(f"[{time.monotonic() - self.started:7.1f}s] {message}\n")
            self.stream.flush()

    def _clear(self) -> None:
        if self._inline:
            self.stream.write("\r\033[K")
            self._inline = False

    def _status(self, text: str) -> None:
        with self._lock:
            self.stream.write(f"\r\033[K[{time.monotonic() - self.started:7.1f}s] {text}")
            self.stream.flush()
            self._inline = True

    @contextmanager
    def watch(self, spark: SparkSession, label: str = "spark") -> Iterator[None]:
        """Report Spark's running stages until the block ends."""
        if self.quiet:
            yield
            return
        done = threading.Event()
        thread = threading.Thread(
            target=self._poll, args=(spark, label, done), name="telemq-progress", daemon=True
        )
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=5)
            with self._lock:
                self._clear()
                self.stream.flush()

    def _poll(self, spark: SparkSession, label: str, done: threading.Event) -> None:
        tracker = spark.sparkContext.statusTracker()
        printed = 0.0
        while not done.wait(0.5):
            try:
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # the session is stopping: nothing more to show
                return
            running = sorted(
                (s.stageId, s.numCompletedTasks, s.numTasks) for s in stages if s is not None
            )
            if not running:
                continue
            text = ", ".join(f"stage {i}: {d}/{n} tasks" for i, d, n in running)
            if self.tty:
                self._status(f"{label}: {text}")
            elif time.monotonic() - printed >= _LINE_EVERY_S:
                self(f"{label}: {text}")
                printed = time.monotonic()
