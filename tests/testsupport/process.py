"""`BrokerProcess`: ``python -m telemq serve`` as a subprocess a test starts and stops.

Two ways to configure it: command-line options (`port`, `args`, an optional `config` file),
or `config_text`, a TOML text to which one `[[listeners]]` table per entry of
`sub_points_of_ports` is appended (the MQ tests' subscription points). The broker is ready
when every listener answers a CONNECT with a CONNACK (of any code: a broker that refuses
anonymous clients is ready too).

`finalize`, which every fixture calls at the end, stops the broker with SIGTERM and fails
the test if the broker ignored it, or if its stderr holds a Python traceback: a broker that
crashes a connection handler and goes on would otherwise pass every test. A test that
provokes one on purpose sets `allow_tracebacks`.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from telemq.broker.security.passwords import hash_password

HOST = "127.0.0.1"
START_DEADLINE = 15.0
STOP_DEADLINE = 10.0
TRACEBACK = "Traceback (most recent call last)"


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


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


@dataclass
class BrokerProcess:
    """``python -m telemq serve`` on 127.0.0.1 with its own data dir and log files."""

    workdir: Path
    port: int = field(default_factory=free_port)
    args: list[str] = field(default_factory=list)
    config: Path | None = None
    pass_port: bool = True
    ready_ports: list[int] | None = None
    config_text: str | None = None
    sub_points_of_ports: Sequence[str] = ("",)
    ports: list[int] = field(default_factory=list)
    allow_tracebacks: bool = False
    stop_deadline: float = STOP_DEADLINE
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.stderr_path = self.workdir / "broker.stderr.log"
        self.stdout_path = self.workdir / "broker.stdout.log"
        self.config_path = self.workdir / "telemq.toml"
        if self.config_text is not None:
            if not self.ports:
                self.ports = [free_port() for _ in self.sub_points_of_ports]
            listeners = "".join(
                f'\n[[listeners]]\nhost = "{HOST}"\nport = {port}\nsub_point = "{point}"\n'
                for port, point in zip(self.ports, self.sub_points_of_ports, strict=True)
            )
            # Top-level keys first (the test's text), then the listener tables.
            self.config_path.write_text(self.config_text + "\n" + listeners, encoding="utf-8")
            self.config = self.config_path
            self.port = self.ports[0]
            self.pass_port = False
            self.args = ["--data-dir", str(self.data_dir), *self.args]
            self.ready_ports = self.ports

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "telemq", "serve"]
        if self.pass_port:
            cmd += ["--host", HOST, "--port", str(self.port), "--data-dir", str(self.data_dir)]
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        return cmd + self.args

    def start(self, *, wait: bool = True) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.starts += 1
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
        if wait:
            for port in self.ready_ports or [self.port]:
                self.wait_ready(port)
        return self

    def wait_ready(self, port: int | None = None, timeout: float = START_DEADLINE) -> None:
        """Poll until a CONNECT on `port` gets a CONNACK."""
        port = self.port if port is None else port
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"broker exited with {self.proc.returncode} during start\n{self.log_tail()}"
                )
            if connack_code(port) is not None:
                return
            time.sleep(0.05)
        raise BrokerStartError(
            f"broker not ready on port {port} within {timeout} s\n" + self.log_tail()
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
