"""`SparkplugPeer`: a Sparkplug edge node or host application (tests/sparkplug/peers, on
pysparkplug) run as a subprocess with the Python of `.venv-sparkplug`.

Theory of operation
-------------------
pysparkplug 0.6.1 needs paho-mqtt < 2 and the test suite runs paho-mqtt 2, so the peers
live in a virtual environment of their own at the repository's root, which
``bash scripts/bootstrap.sh --test`` makes (`venv_python` fails the test, naming that
command, when it is missing). A peer script prints one JSON object per line on stdout and
reads commands, one a line, on stdin (each script's docstring lists both). A reader thread
files every line as an event under a condition variable; `wait_for` returns the first
event a predicate accepts, waiting up to a deadline, and raises `AssertionError` with the
recent events and the script's stderr when none comes. `kill` ends the process with
SIGKILL (its connection then drops without DISCONNECT: the broker publishes its will);
`close` asks it to exit and kills it past a deadline, so no peer outlives its test.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .requirements import require

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv-sparkplug" / "bin" / "python"
PEERS = ROOT / "tests" / "sparkplug" / "peers"
WAIT = 15.0  # what a peer should do "at once", with its interpreter's start
EXIT_DEADLINE = 5.0

Event = dict[str, Any]


def venv_python() -> Path:
    """The Python of `.venv-sparkplug`, with pysparkplug 0.6.1; fails the test otherwise."""
    problem = None
    if not VENV_PYTHON.exists():
        problem = f"{VENV_PYTHON.relative_to(ROOT)} does not exist"
    else:
        check = subprocess.run(
            [str(VENV_PYTHON), "-c", "import pysparkplug; print(pysparkplug.__version__)"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check.returncode != 0 or check.stdout.strip() != "0.6.1":
            problem = f"pysparkplug 0.6.1 is not importable there ({check.stderr.strip()[-200:]})"
    require("The Sparkplug peers' environment (.venv-sparkplug, pysparkplug 0.6.1)", problem)
    return VENV_PYTHON


class SparkplugPeer:
    """One peer script's process (see module docstring)."""

    def __init__(self, script: str, *args: str) -> None:
        self.name = script
        self.events: list[Event] = []
        self._stderr: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        self._proc = subprocess.Popen(
            [str(venv_python()), str(PEERS / script), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read_stdout(self) -> None:
        assert self._proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            for line in self._proc.stdout:
                with self._cond:
                    try:
                        self.events.append(json.loads(line))
                    except ValueError:
                        self.events.append({"event": "unreadable", "line": line})
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        with contextlib.suppress(OSError, ValueError):
            for line in self._proc.stderr:
                with self._cond:
                    self._stderr.append(line)

    def wait_for(self, accept: Callable[[Event], bool], what: str, timeout: float = WAIT) -> Event:
        """The first event (of all so far) that `accept` takes, waiting up to `timeout` s."""
        return self._wait(lambda events: next(filter(accept, events), None), what, timeout)

    def wait_message(self, topic: str, after: int = 0, timeout: float = WAIT) -> Event:
        """The (`after` + 1)-th message on `topic`, waiting up to `timeout` s."""

        def find(events: list[Event]) -> Event | None:
            found = [e for e in events if e.get("event") == "message" and e["topic"] == topic]
            return found[after] if len(found) > after else None

        return self._wait(find, f"message {after + 1} on {topic!r}", timeout)

    def _wait(
        self, find: Callable[[list[Event]], Event | None], what: str, timeout: float
    ) -> Event:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = find(self.events)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self._eof:  # past the deadline, or the script has ended
                    break
                self._cond.wait(min(left, 0.5))
            recent = "\n".join(json.dumps(e) for e in self.events[-20:])
            stderr = "".join(self._stderr[-20:])
        raise AssertionError(
            f"{self.name}: {what} did not happen within {timeout} s (exit status"
            f" {self._proc.poll()}); its last events:\n{recent}\nits stderr:\n{stderr}"
        )

    def messages(self, topic: str) -> list[Event]:
        """The messages on `topic` the peer has printed so far."""
        with self._cond:
            return [e for e in self.events if e.get("event") == "message" and e["topic"] == topic]

    def send(self, command: str) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()

    def kill(self) -> None:
        """SIGKILL: the connection drops without DISCONNECT."""
        self._proc.kill()
        self._proc.wait(EXIT_DEADLINE)

    def close(self) -> None:
        """Ask the script to exit (clean DISCONNECT); kill it past the deadline."""
        if self._proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self.send("exit")
            try:
                self._proc.wait(EXIT_DEADLINE)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(EXIT_DEADLINE)
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.close()


def start_peer(script: str, args: Sequence[str], ready: str) -> SparkplugPeer:
    """Start `script` and wait for its event `ready`; a peer that fails to get there is
    killed before the error is raised."""
    peer = SparkplugPeer(script, *args)
    try:
        peer.wait_for(lambda e: e.get("event") == ready, f"the {ready!r} event")
    except BaseException:
        peer.close()
        raise
    return peer
