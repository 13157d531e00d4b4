"""bench/latency_floor.py, the minimal forwarder docs/performance.md compares telemq with,
still forwards what the latency scenarios send, with real clients, in each durability mode."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .helpers import PahoClient, free_port, unique, wait_until

FLOOR = Path(__file__).resolve().parents[2] / "bench" / "latency_floor.py"


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(params=["none", "thread", "inline", "handoff"])
def floor_port(request: pytest.FixtureRequest) -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(FLOOR), "--port", str(port), "--durable", request.param],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: _listening(port) or process.poll() is not None, 10)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        _, errors = process.communicate(timeout=10)
    assert process.returncode == 0, errors
    assert errors == ""


def test_forwards_qos0_and_qos1_to_matching_subscribers(
    floor_port: int, paho_client: Callable[..., PahoClient]
) -> None:
    base = unique("floor/")
    subscriber = paho_client(floor_port)
    subscriber.connect()
    assert subscriber.subscribe(f"{base}/+", 1) == [1]
    publisher = paho_client(floor_port)
    publisher.connect()

    publisher.publish(f"{base}/a", b"zero", qos=0)
    publisher.publish(f"{base}/a", b"one", qos=1)  # waits for the PUBACK
    publisher.publish(f"{base}/a/deeper", b"no match", qos=1)
    publisher.publish(f"{base}/b", b"last", qos=1)

    got = subscriber.wait_messages(3)
    assert [(m.topic, m.payload, m.qos) for m in got] == [
        (f"{base}/a", b"zero", 0),
        (f"{base}/a", b"one", 1),
        (f"{base}/b", b"last", 1),
    ]
