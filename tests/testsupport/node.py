"""`MqttJsClient`: MQTT.js (the npm package ``mqtt``) under Node, driven from a test.

Theory of operation
-------------------
``tests/interop/node`` holds a private npm package whose only dependency is ``mqtt``, pinned
in ``package-lock.json``; ``scripts/bootstrap.sh --test`` installs Node and npm (Debian's)
when they are missing and runs ``npm ci`` there. Its ``mqttjs_client.mjs`` reads commands as
JSON lines on stdin and reports what its MQTT.js client does as JSON lines on stdout (the
script's header lists both). `MqttJsClient` starts that script with ``node``, in that
directory, and waits for its ``ready`` line; the process itself (its threads, its stderr,
its end) is `NodeScript`'s (``node_script.py``), which the dashboard's browser shares.

A reader thread parses every stdout line into an event (a dict with an ``"event"`` key) and
appends it, under one condition variable, to the events not yet taken; another thread keeps
the script's stderr. `wait_for` takes the first pending event of the kinds asked for (and
matching a predicate), waiting up to a deadline; the others stay pending, so a test can
wait for a message and a result in either order. Every command carries an ``id``, and
`request` waits for the ``result`` event with that id. Whatever goes wrong (a deadline, a
failed command, the script's exit, a ``fatal`` event) raises `MqttJsError` with the recent
events and the script's stderr. `history` keeps every event, taken or not.

MQTT.js's options pass through unchanged (camelCase, as MQTT.js spells them), so an MQTT
5.0 test writes ``connect(port, protocolVersion=5, properties={...})`` and reads the
``properties`` of the packets it gets. A Buffer travels as ``{"$b64": ...}`` both ways
(`buffer` makes one, `from_buffers` turns them back into bytes); a payload is plain bytes.

`close` (also the context manager's exit) asks the script to exit, and kills it if it has
not within a few seconds: the process never outlives the test.

`node_problem` says why MQTT.js cannot run here (no Node, too old a Node, no or a stale
``node_modules``); `require_mqttjs` turns that into a failure that names the fix (the test
command's bootstrap installs all of it, so a missing piece is never a reason to skip).
"""

from __future__ import annotations

import base64
import functools
import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from .node_script import NodeScript
from .process import HOST
from .requirements import require

NODE_DIR = Path(__file__).resolve().parents[1] / "interop" / "node"
SCRIPT = NODE_DIR / "mqttjs_client.mjs"
# package.json's "engines": mqtt 5.x asks for Node 16, one of its dependencies (fast-unique-numbers,
# through worker-timers) for 18.2; Debian 12 has 18.20.
MIN_NODE = (18, 2)
WAIT = 10.0  # default deadline for anything the broker or the script should do "at once"
START_DEADLINE = 20.0  # Node's start and MQTT.js's import, on a slow CI machine
EXIT_DEADLINE = 5.0
RECENT_EVENTS = 30

Event = dict[str, Any]


class MqttJsError(AssertionError):
    """The script did not do what a test waited for (or died); the message says why."""


@functools.cache
def node_problem() -> str | None:
    """Why MQTT.js cannot run here, or None when it can."""
    node = shutil.which("node")
    if node is None:
        return "no `node` on the PATH (Debian's nodejs)"
    try:
        version = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as error:
        return f"`{node} --version` failed: {error}"
    found = re.match(r"v(\d+)\.(\d+)\.", version)
    if found is None or (int(found.group(1)), int(found.group(2))) < MIN_NODE:
        wanted = ".".join(map(str, MIN_NODE))
        return f"Node {version or '?'} at {node} is older than {wanted}"
    installed = NODE_DIR / "node_modules" / "mqtt" / "package.json"
    if not installed.is_file():
        return f"MQTT.js is not installed in {NODE_DIR / 'node_modules'} (or `npm ci` there)"
    try:
        lock = json.loads((NODE_DIR / "package-lock.json").read_text(encoding="utf-8"))
        locked = lock["packages"]["node_modules/mqtt"]["version"]
        have = json.loads(installed.read_text(encoding="utf-8"))["version"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"cannot compare the installed MQTT.js with package-lock.json: {error!r}"
    if have != locked:
        return f"node_modules holds mqtt {have}, package-lock.json pins {locked}"
    return None


def require_mqttjs() -> None:
    """Fail the calling test when MQTT.js cannot run here (see `node_problem`)."""
    require("MQTT.js under Node", node_problem())


def buffer(data: bytes) -> dict[str, str]:
    """How a Buffer (correlation data, a will's payload, a password) goes into options."""
    return {"$b64": base64.b64encode(data).decode("ascii")}


def from_buffers(value: Any) -> Any:
    """`value` (an event or part of one) with every ``{"$b64": ...}`` turned into bytes."""
    if isinstance(value, dict):
        if set(value) == {"$b64"} and isinstance(value["$b64"], str):
            return base64.b64decode(value["$b64"])
        return {key: from_buffers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_buffers(item) for item in value]
    return value


def payload(event: Mapping[str, Any]) -> bytes:
    """The payload of a ``message`` event."""
    return base64.b64decode(event["payload_b64"])


class MqttJsClient(NodeScript):
    """One ``node mqttjs_client.mjs`` process and its MQTT.js client (see module docstring)."""

    script = SCRIPT
    error = MqttJsError
    start_deadline = START_DEADLINE
    exit_deadline = EXIT_DEADLINE

    def __init__(self, *, timeout: float = WAIT, name: str = "mqttjs") -> None:
        super().__init__(name=name)
        self.timeout = timeout
        self.history: list[Event] = []
        self.ready: Event | None = None
        self._pending: list[Event] = []

    # -- the process ----------------------------------------------------------------------

    def _handshake(self) -> None:
        self.ready = self.wait_for("ready", timeout=self.start_deadline)

    def _ask_to_exit(self) -> None:
        """Send ``exit`` (the script ends its client at once); no need to wait for it."""
        self.send("exit")

    def _on_line(self, line: str) -> None:
        if not line.strip():
            return
        try:
            event = json.loads(line)
        except ValueError:
            event = {"event": "fatal", "error": {"message": "not JSON"}, "line": line}
        if not isinstance(event, dict):
            event = {"event": "fatal", "error": {"message": "not an object"}, "line": line}
        self.history.append(event)
        self._pending.append(event)

    def _explain(self, what: str) -> str:
        proc = self._proc
        status = "not started" if proc is None else f"exit status {proc.poll()}"
        with self._cond:
            recent = self.history[-RECENT_EVENTS:]
        lines = [f"{self.name}: {what} ({status})", f"--- last {len(recent)} events ---"]
        lines += [json.dumps(event)[:2000] for event in recent]
        lines += ["--- node stderr ---", self._stderr_tail(200).rstrip() or "(empty)"]
        return "\n".join(lines)

    # -- commands and events --------------------------------------------------------------

    def send(self, op: str, **fields: Any) -> int:
        """Write one command; return its id (its ``result`` event carries it)."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise MqttJsError(f"{self.name}: not started")
        command_id = next(self._ids)
        command = {"op": op, "id": command_id, **fields}
        try:
            self._write(command)
        except (OSError, ValueError) as error:
            raise self._failure(f"cannot send {op!r}: {error}") from error
        return command_id

    def wait_for(
        self,
        *events: str,
        match: Callable[[Event], bool] | None = None,
        timeout: float | None = None,
    ) -> Event:
        """Take the first pending event of one of the kinds `events` (any kind when none is
        given) for which `match` holds, waiting up to `timeout` seconds for it."""
        event = self._take(events, match, timeout)
        if event is None:
            what = "/".join(events) or "any event"
            raise self._failure(f"no {what} within {timeout or self.timeout} s")
        return event

    def _take(
        self,
        kinds: Collection[str],
        match: Callable[[Event], bool] | None,
        timeout: float | None,
    ) -> Event | None:
        """`wait_for`'s search: the event, or None when the deadline passed without one.
        A ``fatal`` event or the script's end raises at once: neither is a quiet deadline."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self._cond:
            while True:
                for index, event in enumerate(self._pending):
                    if (not kinds or event.get("event") in kinds) and (
                        match is None or match(event)
                    ):
                        del self._pending[index]
                        return event
                fatal = [e for e in self._pending if e.get("event") == "fatal"]
                if fatal:
                    raise self._failure(f"the script reported a fatal error: {fatal[0]}")
                if self._eof:
                    what = "/".join(kinds) or "any event"
                    raise self._failure(f"the script ended before {what} came")
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def expect_none(self, *events: str, within: float = 0.5) -> None:
        """Fail if an event of one of the kinds `events` comes within `within` seconds, or
        if the script ends or reports a fatal error meanwhile: a dead script sends nothing,
        which proves nothing."""
        event = self._take(events, None, within)
        if event is not None:
            raise self._failure(f"unexpected {event.get('event')} event: {event}")
        if not self.running:
            raise self._failure(f"the script exited while no {'/'.join(events)} was expected")

    def request(
        self, op: str, *, check: bool = True, timeout: float | None = None, **fields: Any
    ) -> Event:
        """Send a command and wait for its ``result`` event; raise if it failed and `check`."""
        command_id = self.send(op, **fields)
        result = self.wait_for("result", match=lambda e: e.get("id") == command_id, timeout=timeout)
        if check and not result.get("ok"):
            raise self._failure(f"{op} failed: {result.get('error')}")
        return result

    def connect(
        self,
        port: int | None = None,
        *,
        url: str | None = None,
        trace: bool = False,
        timeout: float | None = None,
        **options: Any,
    ) -> Event:
        """Connect (to 127.0.0.1:`port`, or to `url`) with MQTT.js's `options`, and return the
        ``connect`` event (its ``packet`` is the CONNACK). Raises if an ``error`` or a
        ``close`` event comes first: to watch a refusal, use ``send("connect", ...)`` and
        `wait_for`."""
        if url is None:
            assert port is not None, "connect needs a port or a url"
            url = f"mqtt://{HOST}:{port}"
        self.request("connect", url=url, options=options, trace=trace, timeout=timeout)
        event = self.wait_for("connect", "error", "close", timeout=timeout)
        if event["event"] != "connect":
            raise self._failure(f"connection to {url} failed: {event}")
        return event

    def subscribe(
        self,
        topic: str | list[str] | Mapping[str, Any],
        *,
        timeout: float | None = None,
        **options: Any,
    ) -> Event:
        """Subscribe; the result's ``granted`` is MQTT.js's list, ``packet`` the SUBACK."""
        return self.request("subscribe", topic=topic, options=options, timeout=timeout)

    def publish(
        self, topic: str, data: bytes, *, timeout: float | None = None, **options: Any
    ) -> Event:
        """Publish and wait until MQTT.js calls back (QoS 0: written; 1: PUBACK; 2: PUBCOMP);
        the result's ``acks`` are the acknowledgements received."""
        encoded = base64.b64encode(data).decode("ascii")
        return self.request(
            "publish", topic=topic, payload_b64=encoded, options=options, timeout=timeout
        )

    def unsubscribe(
        self, topic: str | list[str], *, timeout: float | None = None, **options: Any
    ) -> Event:
        """Unsubscribe; the result's ``packet`` is the UNSUBACK."""
        return self.request("unsubscribe", topic=topic, options=options, timeout=timeout)

    def end(self, *, force: bool = False, timeout: float | None = None, **options: Any) -> Event:
        """End the client (`options`: the DISCONNECT's fields, e.g. ``reasonCode`` in 5.0)."""
        return self.request("end", force=force, options=options, timeout=timeout)

    def messages(self, count: int, *, timeout: float | None = None) -> list[Event]:
        """The next `count` ``message`` events, in arrival order."""
        return [self.wait_for("message", timeout=timeout) for _ in range(count)]
