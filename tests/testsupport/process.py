"""`BrokerProcess`: ``python -m telemq serve`` as a subprocess a test starts and stops.

Two ways to configure it: command-line options (`port`, `args`, an optional `config` file),
or `config_text`, a TOML text to which one `[[listeners]]` table per entry of
`sub_points_of_ports` is appended (the MQ tests' subscription points).

Ports: a broker's MQTT ports come from `free_port`, below the system's ephemeral range, unless
the test passes its own. A restart binds the same ports again, and no outgoing connection can
have been given one of them as its local port while the broker was down: a port the system
picked (port 0) could, and stay taken for as long as that connection lives. The broker says
which ports it bound in its ready file (``telemq serve --ready-file``: this process's pid, the
ports of every listener and HTTP listener); a restart still waits a few seconds for a port
that something else holds (`BUSY_PORT_WAIT`): a listener a test put there, another program.

The broker is ready when this start's ready file names every port the test expects (`port`,
`ports`) and every plain (not TLS) MQTT listener in it answers a CONNECT with a CONNACK (of
any code: a broker that refuses anonymous clients is ready too). A CONNACK alone could come
from another test's broker on a port this one failed to bind.

`finalize`, which every fixture calls at the end, stops the broker with SIGTERM and fails
the test if the broker ignored it, or if its stderr holds a Python traceback: a broker that
crashes a connection handler and goes on would otherwise pass every test. A test that
provokes one on purpose sets `allow_tracebacks`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telemq.broker.security.passwords import hash_password

HOST = "127.0.0.1"
START_DEADLINE = 15.0
STOP_DEADLINE = 10.0
# How long a start after the first waits for its port to be free again.
BUSY_PORT_WAIT = 10.0
BUSY_PORT = "already in use"
TRACEBACK = "Traceback (most recent call last)"

# Ports `free_port` hands out: below Linux's ephemeral range (32768-60999 by default,
# /proc/sys/net/ipv4/ip_local_port_range), from which the system picks the local port of
# every outgoing connection and of every bind to port 0.
PORT_RANGE = range(20000, 32000)


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def worker_ports(
    worker: str | None = None, count: int | None = None, ports: range = PORT_RANGE
) -> range:
    """This test process's share of `ports`: the whole range, or, under pytest-xdist, the
    slice of worker ``gwN`` of `count` (``PYTEST_XDIST_WORKER``, ``..._WORKER_COUNT``)."""
    if worker is None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if count is None:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or not worker[2:].isdigit() or count <= 1:
        return ports
    size = len(ports) // count
    first = ports.start + int(worker[2:]) % count * size  # a replaced worker: gwN, N >= count
    return range(first, first + size)


def _port_cycle() -> Iterator[int]:
    """Every port of this process's share in turn, from a random point on (two test runs on
    one machine then rarely walk the same ports in step), then round again: a port comes back
    only after every other one of the share was handed out, long after its test ended."""
    ports = worker_ports()
    offset = random.SystemRandom().randrange(len(ports))
    return itertools.cycle(itertools.chain(ports[offset:], ports[:offset]))


_candidates: Iterator[int] | None = None


def free_port() -> int:
    """A loopback port for a server a test starts later and must name first (the port of a
    broker in its neighbour's configuration, an HTTP port in a configuration, mosquitto's).

    Why not bind port 0 and release it: that port comes from the ephemeral range, where the
    system also picks the local port of every outgoing connection (a broker's link, a client)
    and of every other bind to port 0, in this process or another pytest-xdist worker. Between
    the release and the server's own bind, any of those can take it: the server then fails to
    start, or, worse, a test reaches another test's server there. So the ports come from
    `PORT_RANGE`, below the ephemeral range, which only this function hands out; each
    pytest-xdist worker has a slice of its own (`worker_ports`); a port is handed out again
    only after the rest of the slice, and one that a bind finds busy (another program, a
    running broker, a connection still in TIME_WAIT) is skipped."""
    global _candidates
    if _candidates is None:
        _candidates = _port_cycle()
    for port in itertools.islice(_candidates, len(worker_ports())):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((HOST, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"free_port: every port of {worker_ports()} was handed out or busy")


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def connack_code(port: int, timeout: float = 2.0) -> int | None:
    """The CONNACK return code a clean MQTT 3.1.1 CONNECT gets on `port`, or None."""
    client_id = unique("ready").encode()
    body = (
        struct.pack(">H", 4)
        + b"MQTT"
        + bytes([4, 0x02])
        + struct.pack(">H", 0)
        + struct.pack(">H", len(client_id))
        + client_id
    )
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            sock.sendall(bytes([0x10, len(body)]) + body)
            data = b""
            while len(data) < 4:
                chunk = sock.recv(4 - len(data))
                if not chunk:
                    return None
                data += chunk
            with contextlib.suppress(OSError):
                sock.sendall(b"\xe0\x00")  # DISCONNECT
            return data[3] if data[0] == 0x20 else None
    except OSError:
        return None


class BrokerStartError(RuntimeError):
    pass


LIVE_BROKERS: list[BrokerProcess] = []


@dataclass(frozen=True)
class ReadyReport:
    """What a broker wrote to its ready file (``telemq serve --ready-file``)."""

    pid: int
    listeners: list[tuple[list[int], bool]]  # (bound ports, TLS) per listener, in order
    http: list[int]

    @classmethod
    def read(cls, path: Path) -> ReadyReport | None:
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        listeners = [
            ([int(port) for port in listener["ports"]], bool(listener.get("tls", False)))
            for listener in data["listeners"]
        ]
        return cls(int(data["pid"]), listeners, [int(port) for port in data["http"]])

    @property
    def ports(self) -> set[int]:
        return {port for ports, _ in self.listeners for port in ports} | set(self.http)


class BrokerProcess:
    """``python -m telemq serve`` on 127.0.0.1 with its own data dir, log files and ready file.

    `port`: the first listener's (``--port``, with `pass_port`; None: one from `free_port`;
    without `pass_port`, None: whichever the configuration names, known once it started).
    `ports`: with `config_text`, one per entry of `sub_points_of_ports` (0 or missing: one
    from `free_port`). `ready_ports`: the listener ports to probe with a CONNECT, if not
    every plain one."""

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        args: Sequence[str] = (),
        config: Path | None = None,
        pass_port: bool = True,
        ready_ports: Sequence[int] | None = None,
        config_text: str | None = None,
        sub_points_of_ports: Sequence[str] = ("",),
        ports: Sequence[int] = (),
        allow_tracebacks: bool = False,
        stop_deadline: float = STOP_DEADLINE,
    ) -> None:
        self.workdir = workdir
        self._port = port
        if port is None and pass_port and config_text is None:
            self._port = free_port()
        self.args = list(args)
        self.config = config
        self.pass_port = pass_port
        self.ready_ports = list(ready_ports) if ready_ports is not None else None
        self.config_text = config_text
        self.sub_points_of_ports = sub_points_of_ports
        self.ports = list(ports)
        self.allow_tracebacks = allow_tracebacks
        self.stop_deadline = stop_deadline
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.report: ReadyReport | None = None  # the last start's ready file
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.stderr_path = self.workdir / "broker.stderr.log"
        self.stdout_path = self.workdir / "broker.stdout.log"
        self.config_path = self.workdir / "telemq.toml"
        self.ready_path = self.workdir / "broker.ready.json"
        if self.config_text is not None:
            if not self.ports:
                self.ports = [0 for _ in self.sub_points_of_ports]
            self.ports = [port or free_port() for port in self.ports]
            self._write_config()
            self.config = self.config_path
            self._port = self.ports[0]
            self.pass_port = False
            self.args = ["--data-dir", str(self.data_dir), *self.args]

    def _write_config(self) -> None:
        assert self.config_text is not None
        listeners = "".join(
            f'\n[[listeners]]\nhost = "{HOST}"\nport = {port}\nsub_point = "{point}"\n'
            for port, point in zip(self.ports, self.sub_points_of_ports, strict=True)
        )
        # Top-level keys first (the test's text), then the listener tables.
        self.config_path.write_text(self.config_text + "\n" + listeners, encoding="utf-8")

    @property
    def port(self) -> int:
        """The first listener's port (see `ports` for the others with `config_text`)."""
        if self._port is None:
            raise AttributeError("the broker picks its port when it starts: start it first")
        return self._port

    @port.setter
    def port(self, port: int) -> None:
        self._port = port

    @property
    def http_ports(self) -> list[int]:
        """The HTTP listeners' ports, as the last start bound them."""
        assert self.report is not None, "the broker has not started"
        return self.report.http

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "telemq", "serve", "--ready-file", str(self.ready_path)]
        if self.pass_port:
            cmd += ["--host", HOST, "--port", str(self._port), "--data-dir", str(self.data_dir)]
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        return cmd + self.args

    def start(self, *, wait: bool = True) -> BrokerProcess:
        """Start the broker and, with `wait`, wait until it is ready. A start after the first
        whose port is busy (see BUSY_PORT_WAIT) is tried again for a few seconds."""
        deadline = time.monotonic() + BUSY_PORT_WAIT
        while True:
            self._launch()
            if not wait:
                return self
            try:
                self.wait_ready()
                return self
            except BrokerStartError:
                if self.starts == 1 or time.monotonic() > deadline or not self._port_was_busy():
                    raise
                time.sleep(0.2)

    def _port_was_busy(self) -> bool:
        """Whether this start ended because a port it binds was in use."""
        text = self.log_text()
        this_start = text[text.rfind(f"--- start {self.starts}:") :]
        return BUSY_PORT in this_start.lower()

    def _launch(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.starts += 1
        self.report = None
        self.ready_path.unlink(missing_ok=True)  # a killed broker's: not this start's
        with self.stderr_path.open("ab") as err, self.stdout_path.open("ab") as out:
            marker = f"--- start {self.starts}: {' '.join(self.command())}\n".encode()
            err.write(marker)
            err.flush()
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=self.workdir,
            )
        if self not in LIVE_BROKERS:
            LIVE_BROKERS.append(self)

    def wait_ready(self, timeout: float = START_DEADLINE) -> None:
        """Wait for this start's ready file, learn the ports the broker picked, check that it
        bound the ones expected, then poll until its plain listeners answer a CONNECT."""
        deadline = time.monotonic() + timeout
        report = self._wait_report(deadline)
        self.report = report
        if self._port is None:  # picked by the broker: the first listener's
            self._port = report.listeners[0][0][0]
        expected = {self.port, *self.ports, *(self.ready_ports or [])}
        missing = expected - report.ports
        if missing:
            raise BrokerStartError(
                f"the broker did not bind {sorted(missing)}: {report}\n{self.log_tail()}"
            )
        if self.ready_ports is not None:
            probes = list(self.ready_ports)
        else:
            probes = [port for ports, tls in report.listeners if not tls for port in ports]
        for port in probes:
            while connack_code(port) is None:
                self._check_alive()
                if time.monotonic() > deadline:
                    raise BrokerStartError(
                        f"broker not ready on port {port} within {timeout} s\n" + self.log_tail()
                    )
                time.sleep(0.05)

    def _wait_report(self, deadline: float) -> ReadyReport:
        assert self.proc is not None
        while True:
            report = ReadyReport.read(self.ready_path)
            if report is not None and report.pid == self.proc.pid:
                return report
            self._check_alive()
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"broker wrote no ready file ({self.ready_path.name}) in time\n"
                    + self.log_tail()
                )
            time.sleep(0.02)

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise BrokerStartError(
                f"broker exited with {self.proc.returncode} during start\n{self.log_tail()}"
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Ask the broker to stop; SIGKILL it, and fail, if it has not exited in time."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(self.stop_deadline)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_DEADLINE)
                raise AssertionError(
                    f"broker ignored signal {sig} for {self.stop_deadline} s\n{self.log_tail()}"
                ) from None
        return int(proc.returncode)

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_DEADLINE)

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def finalize(self) -> None:
        """Stop the broker (see the module docstring: fails on an ignored SIGTERM or a
        traceback in the broker's stderr)."""
        try:
            if self.running:
                self.stop()
        finally:
            if self in LIVE_BROKERS:
                LIVE_BROKERS.remove(self)
        if not self.allow_tracebacks and TRACEBACK in self.log_text():
            raise AssertionError(f"the broker logged a traceback\n{self.log_tail(120)}")

    def log_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        tail = self.log_text().splitlines()[-lines:]
        return f"--- broker stderr ({self.stderr_path.name}, last {len(tail)} lines) ---\n" + (
            "\n".join(tail)
        )


def users_and_acl(
    passwords: Mapping[str, str],
    acl: Sequence[tuple[str, str, str, bool]],
    admins: Collection[str] = (),
) -> str:
    """`[[users]]` (cheaply hashed passwords; `admins` marked `admin = true`) and `[[acl]]`
    tables for a test configuration; `acl` holds (user, action, topic, allow) rules."""
    lines: list[str] = []
    for user, password in passwords.items():
        digest = hash_password(password, iterations=1000)
        lines += ["[[users]]", f'name = "{user}"', f'password_hash = "{digest}"']
        lines += ["admin = true", ""] if user in admins else [""]
    for user, action, topic, allow in acl:
        lines += [
            "[[acl]]",
            f'user = "{user}"',
            f'action = "{action}"',
            f'topic = "{topic}"',
            f"allow = {'true' if allow else 'false'}",
            "",
        ]
    return "\n".join(lines)
