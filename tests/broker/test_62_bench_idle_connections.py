"""bench/bench_idle_connections.py still measures what it says: a few hundred idle
connections to telemq and to Mosquitto at 3.1.1 and 5.0, every one accepted and answering
a PINGREQ, and N capped by the hard RLIMIT_NOFILE with a line that says so."""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_idle_connections.py"
HARD_LIMIT = 500  # descriptors: the default 100,000 connections are capped to 300
MOSQUITTO = shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin:/usr/bin")


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (HARD_LIMIT, HARD_LIMIT))


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed")
def test_idle_connections_to_telemq_and_mosquitto() -> None:
    source = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([source, os.environ.get("PYTHONPATH", "")]))
    options = ["--protocol", "4,5", "--idle-seconds", "0.2", "--settle", "0.2", "--workers", "2"]
    run = subprocess.run(
        [sys.executable, str(BENCH), *options],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=_low_fd_limit,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"hard limit is {HARD_LIMIT}: 300 connections instead of 100,000" in run.stdout
    keys = re.findall(r"^KEY idle_connections: (\S+) mqtt(\d) (.*)$", run.stdout, re.M)
    assert sorted((name, level) for name, level, _ in keys) == [
        ("mosquitto", "4"),
        ("mosquitto", "5"),
        ("telemq", "4"),
        ("telemq", "5"),
    ]
    for _, _, figures in keys:
        values = dict(pair.split("=") for pair in figures.split())
        assert float(values["connected"]) == 300
        assert float(values["rss_after_mib"]) > 0
        assert float(values["ping_all_s"]) > 0
    assert "| telemq | 5.0 | 300 |" in run.stdout
