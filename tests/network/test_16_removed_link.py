"""A `[[links]]` entry taken out of the configuration: the broker stops collecting for it
at start and says so, keeps what it held, and `telemq links forget` drops that with the
broker stopped (docs/network.md §3)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from telemq.cli.main import main
from testsupport.paho import PahoClient
from testsupport.process import unique, wait_until

from .netsupport import Network, wait_link_state
from .test_11_forwarding import wait_proxies


def without_links(config: Path) -> None:
    """The configuration file without its `[[links]]` tables."""
    text = config.read_text(encoding="utf-8")
    config.write_text(re.sub(r"\[\[links\]\]\n(?:[^\[\n][^\n]*\n)*", "", text), "utf-8")


def test_a_removed_link_stops_collecting_and_forget_drops_what_it_held(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    network = Network(tmp_path, ["A", "B"], [("A", "B")])
    try:
        network.start()
        assert wait_link_state(network, "A", "B", "connected")
        base = unique("removed")
        subscriber = PahoClient(network.ports["B"], unique("sub"), clean=False)
        subscriber.connect()
        subscriber.subscribe(f"{base}/#", qos=1)
        subscriber.close()
        wait_proxies(network, "A", "B", 1)
        a, b = network.brokers["A"], network.brokers["B"]
        b.stop()
        publisher = PahoClient(network.ports["A"])
        publisher.connect()
        for index in range(3):  # owed to B, queued in A's $link/B
            publisher.publish(f"{base}/t", f"m{index}".encode(), qos=1)
        publisher.close()
        a.stop()
        assert "link" in a.config_path.read_text(encoding="utf-8")
        without_links(a.config_path)
        assert "[[links]]" not in a.config_path.read_text(encoding="utf-8")
        a.start()
        assert wait_until(lambda: "link 'B' is no longer configured" in a.log_text(), 10.0)
        assert "its 1 proxy subscriptions are removed" in a.log_text()
        assert "keeps 3 messages for it" in a.log_text()
        # Nothing more is collected for B.
        publisher = PahoClient(network.ports["A"])
        publisher.connect()
        for index in range(3, 5):
            publisher.publish(f"{base}/t", f"m{index}".encode(), qos=1)
        publisher.close()
        data_dir = str(a.data_dir)
        # While the broker runs, the store is its own.
        assert main(["links", "forget", "B", "-d", data_dir]) == 2
        assert "in use by another process" in capsys.readouterr().err
        a.stop()
        # A link still in a configuration is not forgotten.
        b_config = str(b.config_path)
        assert main(["links", "forget", "A", "-c", b_config, "-d", str(b.data_dir)]) == 2
        assert "is in the configuration" in capsys.readouterr().err
        assert main(["links", "forget", "B", "-d", data_dir]) == 0
        assert "3 messages owed to it" in capsys.readouterr().out
        assert main(["links", "forget", "B", "-d", data_dir]) == 2
        assert "no session for link 'B'" in capsys.readouterr().err
        a.start()
        assert "no longer configured" not in a.log_text().split("--- start 3")[1]
    finally:
        network.finalize()
