"""bench/bench_interpreted_calls.py still counts what it says: the interpreted calls a broker
makes per QoS 1 and QoS 2 message, by function, for the build the tests run; and among them
no generated dataclass `__init__` per message (each one a Python call per object under
mypyc: the events and in-flight records of a message write theirs out)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import telemq

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_interpreted_calls.py"


def test_the_census_of_interpreted_calls_per_message() -> None:
    run = subprocess.run(
        [sys.executable, str(BENCH), "--qos", "1,2", "--seconds", "0.4", "--top", "200"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    build = "compiled" if telemq.compiled() else "pure Python"
    assert f"telemq {build} build, window 10" in run.stdout
    totals = re.findall(r"^QoS (\d): (\d+) messages, ([\d.]+) interpreted calls", run.stdout, re.M)
    assert [qos for qos, _, _ in totals] == ["1", "2"]
    for _, messages, _ in totals:
        assert int(messages) > 0
    # The store's batch is interpreted in every build: asked per message whether it is empty.
    assert re.search(r"^ +[\d.]+ +store/base\.py:WriteBatch\.__bool__$", run.stdout, re.M)
    # Per connection or subscription some remain (`Connect`, `Subscribe`...): not per message.
    generated = re.findall(r"^ +([\d.]+) +(\S+) \(generated\)$", run.stdout, re.M)
    assert all(float(calls) < 0.05 for calls, _ in generated), generated
