"""`NodeScript`: a Node script run as a subprocess that speaks one JSON object per line.

Theory of operation
-------------------
A subclass names its ``script``; `start` runs ``node script`` in the script's directory
(text mode, line buffered), starts two daemon threads, one handing every stdout line to
`_on_line` under the condition variable `_cond` (and waking its waiters), the other keeping
the script's stderr, then runs the subclass's `_handshake` (its ``ready`` line and whatever
else the script needs first). `_write` sends one command line. `close` (also the context
manager's exit) asks the script to stop (`_ask_to_exit`), closes its stdin and waits; past
`exit_deadline` it is sent SIGTERM (where `terminate_first` says so) and SIGKILL, so the
process never outlives the test; `finish` closes it the same way and fails unless it exited
with status 0. Whatever goes wrong raises the subclass's `error`, whose
message `_explain` builds from the script's recent output and stderr.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import json
import shutil
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from .requirements import BOOTSTRAP


class NodeScript(abc.ABC):
    """One ``node script`` process speaking JSON lines (see module docstring)."""

    script: ClassVar[Path]  # run in its own directory
    error: ClassVar[type[AssertionError]] = AssertionError  # what a failure raises
    start_deadline: ClassVar[float] = 20.0
    exit_deadline: ClassVar[float] = 5.0
    terminate_first: ClassVar[bool] = False  # SIGTERM before SIGKILL when it does not exit

    def __init__(self, *, name: str) -> None:
        self.name = name
        self._stderr: list[str] = []
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._eof = False
        self._proc: subprocess.Popen[str] | None = None
        self._threads: list[threading.Thread] = []

    # -- what a subclass says -------------------------------------------------------------

    @abc.abstractmethod
    def _on_line(self, line: str) -> None:
        """File one line of the script's stdout (called with `_cond` held)."""

    @abc.abstractmethod
    def _handshake(self) -> None:
        """Wait for the script to be ready (within `start_deadline`), raising on failure."""

    @abc.abstractmethod
    def _ask_to_exit(self) -> None:
        """Ask the running script to stop; may raise `error`, `OSError` or `ValueError`."""

    @abc.abstractmethod
    def _explain(self, what: str) -> str:
        """The message of a failure: `what`, and what the script said lately."""

    # -- the process ----------------------------------------------------------------------

    def start(self) -> Self:
        """Start the script and wait for `_handshake`."""
        assert self._proc is None, "already started"
        node = shutil.which("node")
        if node is None:
            raise self.error(f"no `node` on the PATH (Debian's nodejs; {BOOTSTRAP})")
        self._proc = subprocess.Popen(
            [node, str(self.script)],
            cwd=self.script.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self._threads = [
            threading.Thread(target=self._read_stdout, name=f"{self.name}-out", daemon=True),
            threading.Thread(target=self._read_stderr, name=f"{self.name}-err", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        try:
            self._handshake()
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> Self:
        return self if self._proc is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int:
        """The Node process's id (to signal it: a test stops it to keep its client away)."""
        assert self._proc is not None, "not started"
        return self._proc.pid

    def close(self) -> int | None:
        """Ask the script to exit, kill it if it has not within `exit_deadline`; return its
        exit status (None if it was never started)."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(self.error, OSError, ValueError):
                self._ask_to_exit()
            with contextlib.suppress(OSError, ValueError):
                assert proc.stdin is not None
                proc.stdin.close()
            try:
                proc.wait(self.exit_deadline)
            except subprocess.TimeoutExpired:
                if self.terminate_first:
                    proc.terminate()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(self.exit_deadline)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(self.exit_deadline)
        for thread in self._threads:
            thread.join(self.exit_deadline)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.close()
        return proc.returncode

    def finish(self) -> None:
        """`close`, then fail (`error`) unless the script exited with status 0: a script
        that crashed, reported a fatal error or had to be killed fails the test that ran it."""
        status = self.close()
        if status != 0:
            raise self._failure(f"the script ended with exit status {status}, not 0")

    def _read_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            for line in self._proc.stdout:
                with self._cond:
                    self._on_line(line)
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass  # closed under us by `close`
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        try:
            for line in self._proc.stderr:
                with self._cond:
                    self._stderr.append(line)
        except (OSError, ValueError):
            pass

    @property
    def stderr(self) -> str:
        """Everything the script has written to its stderr so far."""
        with self._cond:
            return "".join(self._stderr)

    def _stderr_tail(self, lines: int) -> str:
        """The last `lines` lines of the script's stderr, without the final newline."""
        with self._cond:
            return "".join(self._stderr[-lines:]).removesuffix("\n")

    def _failure(self, what: str) -> AssertionError:
        """The error to raise when `what` went wrong."""
        return self.error(self._explain(what))

    # -- commands -------------------------------------------------------------------------

    def _write(self, command: Mapping[str, Any]) -> None:
        """Write `command` as one JSON line; `OSError` or `ValueError` if the pipe is gone."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise ValueError("the script is not started")
        proc.stdin.write(json.dumps(command) + "\n")
        proc.stdin.flush()
