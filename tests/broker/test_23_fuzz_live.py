"""The live broker fuzzer (fuzz/fuzz_broker.py), bounded: a fixed seed and a random one.

Each run starts its own broker, fuzzes it from several connections while well-behaved paho
clients exchange numbered QoS 0/1/2 messages, and fails on a crash, a logged traceback, a
lost or duplicated QoS 1/2 message, a disconnected well-behaved client or a leaked
connection. The random seed is printed (and named in the failure) for reproduction, here
(``TELEMQ_FUZZ_SEED=N python3 -m pytest tests/broker/test_23_fuzz_live.py``) or longer
(``python3 fuzz/fuzz_broker.py --seed N --duration 60``). A run must also have done its
work: a minimum of fuzz connections and bytes, and well-behaved messages sent and received.
"""

from __future__ import annotations

import os
import random
import re

import pytest

from fuzz_loader import load_fuzz_module

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

FIXED_SEED = 20240607
FUZZ_SECONDS = 6.0
RANDOM_SEED = int(os.environ.get("TELEMQ_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
MIN_CONNECTIONS = 20  # 4 workers for 6 s make hundreds; a stalled fuzzer makes none
MIN_BYTES = 10_000


fuzz_broker = load_fuzz_module()


@pytest.mark.parametrize("seed", [FIXED_SEED, RANDOM_SEED], ids=["fixed", "random"])
def test_broker_survives_fuzzing(seed: int) -> None:
    print(f"fuzz seed {seed}")
    config = fuzz_broker.FuzzConfig(
        seed=seed, duration=FUZZ_SECONDS, connections=4, clients=3, settle=15.0
    )
    result = fuzz_broker.run(config)
    print(result.summary())
    summary = result.summary()
    assert result.ok, f"seed {seed}:\n{summary}"
    work = re.search(
        r"fuzz: (\d+) connections by \d+ workers in [\d.]+ s, (\d+) bytes sent", summary
    )
    assert work is not None, summary
    assert int(work[1]) >= MIN_CONNECTIONS and int(work[2]) >= MIN_BYTES, summary
    sent = re.search(r"well-behaved: 3 clients, .*received (\d+), sent (\d+)", summary)
    assert sent is not None and int(sent[1]) > 0 and int(sent[2]) > 0, summary


def test_iteration_bound_and_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """The command line: a fixed number of fuzz connections, exit code 0, a summary."""
    code = fuzz_broker.main(
        ["--seed", "5", "--iterations", "40", "--connections", "2", "--store", "memory"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "fuzzing with --seed 5" in out
    assert "fuzz: 40 connections" in out
    assert "result: OK" in out
