"""The live broker fuzzer (fuzz/fuzz_broker.py), bounded: a fixed seed and a random one.

Each run starts its own broker, fuzzes it from several connections while well-behaved paho
clients exchange numbered QoS 0/1/2 messages, and fails on a crash, a logged traceback, a
lost or duplicated QoS 1/2 message, a disconnected well-behaved client or a leaked
connection. The random seed is printed (and named in the failure) for reproduction:
``python3 fuzz/fuzz_broker.py --seed N --duration 60``.
"""

from __future__ import annotations

import random

import pytest

from fuzz_loader import load_fuzz_module

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

FIXED_SEED = 20240607
FUZZ_SECONDS = 6.0


fuzz_broker = load_fuzz_module()


@pytest.mark.parametrize(
    "seed", [FIXED_SEED, random.SystemRandom().randrange(2**32)], ids=["fixed", "random"]
)
def test_broker_survives_fuzzing(seed: int) -> None:
    print(f"fuzz seed {seed}")
    config = fuzz_broker.FuzzConfig(
        seed=seed, duration=FUZZ_SECONDS, connections=4, clients=3, settle=15.0
    )
    result = fuzz_broker.run(config)
    print(result.summary())
    assert result.ok, f"seed {seed}:\n{result.summary()}"
    assert "fuzz: " in result.summary()


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
