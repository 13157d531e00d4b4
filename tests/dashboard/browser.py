"""`Browser`: Debian's Chromium, headless, driven through ``browser.mjs`` (playwright-core).

Theory of operation
-------------------
This directory holds a private npm package whose only dependency is ``playwright-core``
(the library without any browser download), pinned in ``package-lock.json``;
``scripts/bootstrap.sh --test`` installs Debian's ``chromium``, ``nodejs`` and ``npm`` and
runs ``npm ci`` here. `Browser.start` runs ``node browser.mjs``, which launches the system's
Chromium (`chromium_path`) with a new, empty profile and one page, and then takes one JSON
command per line on stdin and answers each with one JSON line (the script's header lists
them). A reader thread files answers by id and keeps the page's own events (console
messages, uncaught errors, dialogs) in `events`; `request` sends a command and waits for its
answer with a deadline, raising `BrowserError` with the script's stderr and the recent page
events when anything fails. `close` (also the context manager's exit) closes the browser
and ends the script: SIGTERM (on which it closes the browser too) and then SIGKILL if it
has not exited within a few seconds. That process plumbing (the threads, the stderr, the
end) is `testsupport.node_script.NodeScript`'s, shared with the MQTT.js client.

`require_browser` is what a test calls first: a missing Chromium, Node or ``node_modules``
fails the test, naming the fix (the test command's bootstrap installs all three).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Self

from testsupport.node_script import NodeScript
from testsupport.requirements import require

HARNESS_DIR = Path(__file__).resolve().parent
SCRIPT = HARNESS_DIR / "browser.mjs"
CHROMIUM_NAMES = ("chromium", "chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT = 15.0  # default deadline for the page to show what a test waits for
START_DEADLINE = 60.0  # Node's start and Chromium's, on a slow CI machine
EXIT_DEADLINE = 10.0


class BrowserError(AssertionError):
    """A command failed or timed out, or the script died; the message says why."""


def chromium_path() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    return None


def harness_problem() -> str | None:
    """Why browser.mjs cannot run (no Node, no playwright-core), or None."""
    if shutil.which("node") is None:
        return "no `node` on the PATH (Debian's nodejs)"
    if not (HARNESS_DIR / "node_modules" / "playwright-core" / "package.json").is_file():
        return f"playwright-core is not installed in {HARNESS_DIR / 'node_modules'}"
    return None


def require_browser() -> str:
    """The path of Chromium; fails the calling test without one, or when the harness that
    drives it cannot run."""
    executable = chromium_path()
    require("Chromium", None if executable else "no `chromium` on the PATH (Debian's chromium)")
    require("the dashboard test's browser driver", harness_problem())
    assert executable is not None
    return executable


class Browser(NodeScript):
    """One ``node browser.mjs`` process and the Chromium it drives (see module docstring)."""

    script = SCRIPT
    error = BrowserError
    start_deadline = START_DEADLINE
    exit_deadline = EXIT_DEADLINE
    terminate_first = True  # browser.mjs closes the browser on SIGTERM

    def __init__(self, profile_dir: Path, *, executable: str | None = None) -> None:
        super().__init__(name="browser")
        self.profile_dir = profile_dir
        self.executable = executable or chromium_path()
        self.events: list[dict[str, Any]] = []
        self.version: str | None = None
        self._answers: dict[int, dict[str, Any]] = {}
        self._ready = False

    # -- the process ----------------------------------------------------------------------

    def start(self) -> Self:
        if self.executable is None:
            raise BrowserError("no Chromium on the PATH")
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        return super().start()

    def _handshake(self) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready or self._eof, self.start_deadline):
                raise self._failure("browser.mjs did not start")
            if not self._ready:
                raise self._failure("browser.mjs exited at start")
        self.version = self.request(
            "launch",
            timeout=self.start_deadline,
            executablePath=self.executable,
            userDataDir=str(self.profile_dir),
            args=CHROMIUM_FLAGS,
        )

    def _ask_to_exit(self) -> None:
        """Close the browser (the script exits when its stdin ends, closed next)."""
        self.request("close", timeout=self.exit_deadline)

    def _on_line(self, line: str) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = {"event": "garbage", "text": line.rstrip()}
        if "id" in message and "event" not in message:
            self._answers[int(message["id"])] = message
        elif message.get("event") == "ready":
            self._ready = True
        else:
            self.events.append(message)

    def _explain(self, what: str) -> str:
        with self._cond:
            events = "\n".join(json.dumps(event) for event in self.events[-20:])
        stderr = self._stderr_tail(40)
        return f"{what}\n--- page events ---\n{events}\n--- browser.mjs stderr ---\n{stderr}"

    # -- commands -------------------------------------------------------------------------

    def request(self, op: str, timeout: float = WAIT, **args: Any) -> Any:
        """Send a command and return its answer's value (see browser.mjs for the commands);
        `timeout` in seconds, also given to the script's own wait in milliseconds."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.poll() is not None:
            raise self._failure(f"{op}: browser.mjs is not running")
        command_id = next(self._ids)
        command = {"id": command_id, "op": op, "timeout": int(timeout * 1000), **args}
        try:
            self._write(command)
        except (OSError, ValueError) as error:
            raise self._failure(f"{op}: cannot write to browser.mjs: {error}") from error
        with self._cond:
            arrived = self._cond.wait_for(
                lambda: command_id in self._answers or self._eof, timeout + 5.0
            )
            answer = self._answers.pop(command_id, None)
        if answer is None:
            why = "browser.mjs exited" if arrived else f"no answer within {timeout + 5.0} s"
            raise self._failure(f"{op} {args}: {why}")
        if not answer.get("ok"):
            raise self._failure(f"{op} {args} failed: {answer.get('error')}")
        return answer.get("value")

    def goto(self, url: str) -> int | None:
        status = self.request("goto", url=url)
        return None if status is None else int(status)

    def fill(self, selector: str, value: str) -> None:
        self.request("fill", selector=selector, value=value)

    def click(self, selector: str) -> None:
        self.request("click", selector=selector)

    def wait_visible(self, selector: str, timeout: float = WAIT) -> None:
        self.request("waitVisible", timeout=timeout, selector=selector)

    def wait_text(self, selector: str, text: str, timeout: float = WAIT) -> None:
        """Wait until the element's text content contains `text`."""
        self.request("waitText", timeout=timeout, selector=selector, text=text)

    def wait_no_text(self, selector: str, text: str, timeout: float = WAIT) -> None:
        self.request("waitNoText", timeout=timeout, selector=selector, text=text)

    def text(self, selector: str) -> str | None:
        value = self.request("text", selector=selector)
        return None if value is None else str(value)

    def wait_for(self, expression: str, timeout: float = WAIT) -> None:
        """Wait until the JavaScript `expression` is true in the page."""
        self.request("waitFor", timeout=timeout, expression=expression)

    def block(self, pattern: str) -> None:
        """Answer every later request for a URL matching the glob `pattern` with a 404."""
        self.request("block", pattern=pattern)

    def evaluate(self, expression: str) -> Any:
        return self.request("evaluate", expression=expression)

    def screenshot(self, path: Path) -> Path:
        self.request("screenshot", path=str(path), fullPage=True)
        return path

    def page_events(self, kind: str) -> list[dict[str, Any]]:
        with self._cond:
            return [event for event in self.events if event.get("event") == kind]
