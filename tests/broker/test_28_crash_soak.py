"""The crash soak, bounded: 20 SIGKILLs under QoS 1/2 traffic between real paho clients.

`soak/crash_soak.py` (docs/reliability.md) with fewer messages and kills: a persistent paho
publisher and a persistent paho subscriber, the broker killed 20 times at seeded random
moments, kept down a random moment and restarted on the same data directory. Once per kind
of subscriber: one that acknowledges at once, a slow one (its acknowledgements come late),
and one whose own connection is cut at random moments. Nothing acknowledged may be lost, no
QoS 2 message may arrive twice, and every message must end acknowledged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz_loader import load_crash_soak

pytestmark = [pytest.mark.interop]

SEEDS = {"normal": 20261124, "slow": 20261125, "reconnecting": 20261126}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("subscriber", sorted(SEEDS))
def test_nothing_acknowledged_is_lost_and_qos2_stays_exactly_once_across_20_kills(
    tmp_path: Path, subscriber: str
) -> None:
    soak = load_crash_soak()
    config = soak.SoakConfig(
        kills=20,
        seed=SEEDS[subscriber],
        messages=800,
        duration=18.0,
        up=0.6,
        down=0.4,
        stall=45.0,
        subscriber=subscriber,
        workdir=tmp_path,
        quiet=True,
    )
    result = soak.run_soak(config)
    assert result.kills == 20
    assert result.ok, result.details()
