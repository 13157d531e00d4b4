"""The standing hostile-client suite: every attack of `soak/hostile.py` against one broker.

Each attack (the issue's reproductions: a wildcard SUBSCRIBE over 50,000 retained messages,
65 KB filters, 65,535-level filters, 100,000 subscriptions, 1,000 distinct 64 KB topic
names, another user's client id, queue and subscriptions, a NUL-padded password, a trickled
packet, malformed packets) must get the answer docs/security.md gives, leave the broker up,
and let a sentinel client be answered throughout. The sentinel's slowest answer is recorded
in the report (``record_property``) but not asserted: the latency bound is checked by
`python3 soak/hostile.py`, on a quiet machine (docs/security.md "Hostile clients").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fuzz_loader import load_script

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

HOSTILE = load_script("soak/hostile.py", "telemq_hostile")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    process = HOSTILE.Broker(tmp_path_factory.mktemp("hostile"))
    process.start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()[-3000:]


@pytest.mark.parametrize("attack", HOSTILE.ATTACKS, ids=[a.name for a in HOSTILE.ATTACKS])
def test_an_attack_gets_its_documented_answer_and_the_sentinel_is_served(
    broker: Any, attack: Any, record_property: Any
) -> None:
    outcome = HOSTILE.run_attack(broker, attack)
    record_property("sentinel_slowest_ms", round(outcome.slowest * 1000, 1))
    assert outcome.ok, outcome.problem
    assert outcome.answers > 0, "the sentinel was never answered during the attack"


@pytest.mark.parametrize("flood", HOSTILE.FLOODS, ids=[f.name for f in HOSTILE.FLOODS])
def test_a_flood_is_answered_in_full_and_the_bystander_is_served(
    broker: Any, flood: Any, record_property: Any
) -> None:
    """Each flood of the command, three bursts of it: everything it sent is acknowledged
    (or read) and the bystander's round trips go on meanwhile; times recorded, not asserted."""
    outcome = HOSTILE.run_flood(broker, flood, bursts=3)
    record_property("bystander_p99_ms", round(outcome.ms(0.99), 1))
    assert outcome.ok, outcome.problem
    assert outcome.count > 0
    assert outcome.latencies, "the bystander had no round trip during the flood"


def test_the_command_lists_its_attacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert HOSTILE.main(["--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    names = [a.name for a in HOSTILE.ATTACKS] + [f.name for f in HOSTILE.FLOODS]
    assert [line.split()[0] for line in listed] == names
    with pytest.raises(SystemExit) as exit_info:
        HOSTILE.main(["--attack", "no-such-attack"])
    assert exit_info.value.code == 2
