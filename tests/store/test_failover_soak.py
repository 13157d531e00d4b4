"""The failover soak, bounded: 20 SIGKILLs of the active member of an `[ha]` pair under QoS 1
and QoS 2 traffic between real paho clients that know both members' addresses.

`soak/failover_soak.py` (docs/reliability.md) with fewer messages and kills, on a database of
the session's PostgreSQL server: the active member killed at seeded random moments, the
standby taking over, the killed one started again as the new standby, so the active member
alternates. Nothing acknowledged may be lost, no QoS 2 message may arrive twice, every
message must end acknowledged, every kill must end in a takeover, and no two members may
acknowledge in the same term. The takeover times are printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz_loader import load_failover_soak

pytestmark = [pytest.mark.interop]


@pytest.mark.timeout(300)
def test_twenty_takeovers_lose_nothing_acknowledged(postgres_dsn: str, tmp_path: Path) -> None:
    soak = load_failover_soak()
    config = soak.FailoverSoakConfig(
        kills=20,
        seed=20261128,
        messages=500,
        duration=25.0,
        up=0.3,
        stall=45.0,
        dsn=postgres_dsn,
        workdir=tmp_path,
        quiet=True,
    )
    result = soak.run_failover_soak(config)
    print(result.summary())
    assert result.kills == 20
    assert result.ok, result.details()
