"""The shared broker-process helper fails a test on what a passing test could hide: a broker
that ignores SIGTERM, or one that logged a traceback (a handler that crashed and went on);
`free_port` hands out ports no other test process and no outgoing connection can take."""

from __future__ import annotations

import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from testsupport import process as process_module
from testsupport.process import HOST, BrokerProcess, free_port, wait_until, worker_ports
from testsupport.requirements import require, require_command


class ScriptProcess(BrokerProcess):
    """A stand-in for the broker: a Python script, started without waiting for MQTT."""

    script: str = ""

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.script]


def started(tmp_path: Path, script: str, **options: object) -> ScriptProcess:
    process = ScriptProcess(tmp_path / "p", **options)  # type: ignore[arg-type]
    process.script = script
    process.start(wait=False)
    return process


# Printed by the script, built at run time: the logged command line must not match it.
READY = "import sys, time; print('up and ' + 'running', file=sys.stderr, flush=True); "


def wait_for_ready(process: ScriptProcess) -> None:
    assert wait_until(lambda: "up and running" in process.log_text(), 10)


def test_a_clean_stop_passes(tmp_path: Path) -> None:
    process = started(tmp_path, READY + "time.sleep(60)")
    wait_for_ready(process)
    process.finalize()


def test_a_traceback_in_the_log_fails_the_test(tmp_path: Path) -> None:
    crash = "import traceback\ntry:\n    1 / 0\nexcept Exception:\n    traceback.print_exc()\n"
    process = started(tmp_path, crash + READY + "time.sleep(60)")
    wait_for_ready(process)
    with pytest.raises(AssertionError, match="the broker logged a traceback"):
        process.finalize()


def test_a_test_that_expects_a_traceback_says_so(tmp_path: Path) -> None:
    crash = "import traceback\ntry:\n    1 / 0\nexcept Exception:\n    traceback.print_exc()\n"
    process = started(tmp_path, crash + READY + "time.sleep(60)", allow_tracebacks=True)
    wait_for_ready(process)
    process.finalize()


def test_a_broker_that_ignores_sigterm_fails_the_test(tmp_path: Path) -> None:
    script = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + READY
    process = started(tmp_path, script + "time.sleep(60)", stop_deadline=0.5)
    wait_for_ready(process)
    with pytest.raises(AssertionError, match="ignored signal"):
        process.finalize()
    assert not process.running  # killed all the same


def test_a_missing_program_fails_the_test_naming_the_fix() -> None:
    """A program the test command installs is never a reason to skip (requirements.py)."""
    with pytest.raises(pytest.fail.Exception, match=r"bootstrap\.sh --test` installs it"):
        require_command("telemq-no-such-program", "nothing")
    with pytest.raises(pytest.fail.Exception, match=r"MQTT\.js .*: gone"):
        require("MQTT.js", "gone")
    require("a program that is there", None)
    assert require_command("sh", "dash") == shutil.which("sh")


def test_each_xdist_worker_has_ports_of_its_own() -> None:
    assert worker_ports("", 1) == range(20000, 32000)
    assert worker_ports("gw0", 2) == range(20000, 26000)
    assert worker_ports("gw1", 2) == range(26000, 32000)
    assert worker_ports("gw2", 2) == range(20000, 26000)  # a replaced worker
    shares = [worker_ports(f"gw{n}", 3) for n in range(3)]
    assert all(len(set(a) & set(b)) == 0 for a in shares for b in shares if a is not b)
    assert all(share.stop <= 32768 for share in shares), "below the ephemeral range"


def test_free_port_never_repeats_and_skips_busy_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    handed = [free_port() for _ in range(50)]
    assert len(set(handed)) == len(handed)
    assert all(port in worker_ports() for port in handed)
    with socket.create_server((HOST, 0)) as busy:
        taken = busy.getsockname()[1]
        monkeypatch.setattr(process_module, "_candidates", iter([taken, handed[0] + 1]))
        assert free_port() == handed[0] + 1
        with pytest.raises(RuntimeError, match="handed out or busy"):
            free_port()


def test_free_port_comes_round_again_after_the_whole_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = free_port()
    monkeypatch.setattr(process_module, "worker_ports", lambda: range(first, first + 2))
    monkeypatch.setattr(process_module, "_candidates", None)
    handed = [free_port() for _ in range(4)]
    assert sorted(handed[:2]) == [first, first + 1] and handed[2:] == handed[:2]


def test_a_broker_listens_below_the_ephemeral_range(tmp_path: Path) -> None:
    """So no outgoing connection can hold its port while it restarts."""
    plain = BrokerProcess(tmp_path / "plain")
    configured = BrokerProcess(
        tmp_path / "configured", config_text="", sub_points_of_ports=("", "points/a")
    )
    assert plain.port in worker_ports()
    assert configured.port == configured.ports[0]
    assert all(port in worker_ports() for port in configured.ports)


def hold_port(port: int) -> socket.socket:
    """A listener on `port`. With SO_REUSEADDR (`create_server`'s default), as the broker's
    own listener: the stopped broker's connections in TIME_WAIT do not stand in the way,
    and the broker still cannot listen beside it. An outgoing connection of another test
    may hold the port for a moment: tried again for a few seconds."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return socket.create_server((HOST, port))
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_a_restart_waits_while_its_port_is_taken(tmp_path: Path) -> None:
    """While the broker is down, something else may take its port (another program; here a
    listener, released after a second). A later start is tried again until the port is
    free."""
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        port = broker.port
        broker.stop()
        holder = hold_port(port)
        releaser = threading.Timer(1.0, holder.close)
        releaser.start()
        try:
            broker.start()
        finally:
            releaser.join()
        assert broker.port == port
        assert broker.starts >= 3  # the first, at least one refused by the busy port, the last
        assert "address already in use" in broker.log_text()
    finally:
        broker.finalize()


def test_a_first_start_on_a_busy_port_fails_at_once(tmp_path: Path) -> None:
    """Only a restart waits: a port given for the first start is the test's own choice."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind((HOST, 0))
        holder.listen()
        broker = BrokerProcess(tmp_path / "b", port=holder.getsockname()[1], pass_port=True)
        with pytest.raises(process_module.BrokerStartError, match="already in use"):
            broker.start()
        assert broker.starts == 1
    broker.finalize()
