"""`MosquittoProcess`: Debian's `mosquitto` broker as a subprocess, for the bridge tests.

It listens on 127.0.0.1 on a port the test picks, allows anonymous clients, keeps nothing on
disk, and logs to a file in its work directory. `extra` adds configuration lines (a
`connection` section for Mosquitto's own bridge). Start waits for a CONNACK; `finalize`
stops it (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from .process import HOST, connack_code, free_port
from .requirements import require_command

START_DEADLINE = 10.0


def mosquitto_binary() -> str:
    """The broker's path (Debian installs it in /usr/sbin, which a user's PATH may lack);
    fails the calling test when it is not installed."""
    return require_command("mosquitto", "mosquitto", path="/usr/sbin:/usr/local/sbin")


class MosquittoProcess:
    def __init__(self, workdir: Path, extra: str = "", port: int | None = None) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port() if port is None else port
        self.log_path = workdir / "mosquitto.log"
        self.config_path = workdir / "mosquitto.conf"
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MosquittoProcess:
        binary = mosquitto_binary()
        self.config_path.write_text(
            f"listener {self.port} {HOST}\n"
            "allow_anonymous true\n"
            "persistence false\n"
            f"log_dest file {self.log_path}\n"
            "log_type all\n" + self.extra,
            encoding="utf-8",
        )
        with (self.workdir / "mosquitto.stderr").open("ab") as err:
            self.proc = subprocess.Popen(
                [binary, "-c", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                cwd=self.workdir,
            )
        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"mosquitto exited with {self.proc.returncode}: {self.log()}")
            if connack_code(self.port) is not None:
                return self
            time.sleep(0.05)
        raise AssertionError(f"mosquitto not ready on port {self.port}: {self.log()}")

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    finalize = stop

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""
