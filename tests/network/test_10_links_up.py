"""Links between broker subprocesses come up, say what they reach, and refuse what is not a
link: a chain A - B - C on loopback, `$SYS/broker/links/...` read with paho-mqtt, and
CONNECTs with `$link/` client ids from raw clients (docs/network.md §3-4, §9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testsupport.paho import MQTT5, PahoClient, sys_value
from testsupport.process import wait_until

from .netsupport import LINK_TIMEOUT, Network, wait_link_state


def test_a_chain_comes_up_and_every_broker_knows_who_it_reaches(chain: Network) -> None:
    for broker, link in (("A", "B"), ("B", "A"), ("B", "C"), ("C", "B")):
        assert wait_link_state(chain, broker, link, "connected"), (broker, link)
    reaches = {
        (broker, link): f"$SYS/broker/links/{link}/reaches"
        for broker, link in (("A", "B"), ("B", "A"), ("B", "C"), ("C", "B"))
    }
    expected = {("A", "B"): "B,C", ("B", "A"): "A", ("B", "C"): "C", ("C", "B"): "B,A"}
    for (broker, link), topic in reaches.items():
        port = chain.ports[broker]
        assert wait_until(
            lambda port=port, topic=topic, want=expected[(broker, link)]: (
                sys_value(port, topic, 1.0) == want
            ),
            LINK_TIMEOUT,
            0.2,
        ), (broker, link, sys_value(port, topic, 1.0))


def test_a_link_comes_back_after_its_neighbour_restarts(chain: Network) -> None:
    assert wait_link_state(chain, "A", "B", "connected")
    chain.brokers["B"].stop()
    assert wait_link_state(chain, "A", "B", "connecting") or wait_link_state(
        chain, "A", "B", "down"
    )
    chain.brokers["B"].start()
    assert wait_link_state(chain, "A", "B", "connected")
    assert wait_link_state(chain, "C", "B", "connected")
    assert sys_value(chain.ports["A"], "$SYS/broker/links/B/reaches") == "B,C"


def test_a_client_cannot_take_a_link_client_id(chain: Network) -> None:
    """A `$link/` client id is a link's: anyone else gets CONNACK 0x87 (5.0) or 5 (3.1.1),
    even with the right name."""
    assert wait_link_state(chain, "B", "A", "connected")
    client = PahoClient(chain.ports["B"], "$link/A", version=MQTT5, clean=False)
    with pytest.raises(AssertionError, match="return code 135"):
        client.connect(timeout=5.0)
    client.close()
    old = PahoClient(chain.ports["B"], "$link/nobody")
    with pytest.raises(AssertionError, match="return code 135"):  # paho: CONNACK 5 is 135
        old.connect(timeout=5.0)
    old.close()
    # The real link is still up.
    assert sys_value(chain.ports["B"], "$SYS/broker/links/A/state") == "connected"
    log = chain.brokers["B"].log_text()
    assert "link from 127.0.0.1:" in log and "refused" in log


def test_a_client_cannot_subscribe_to_link_topics(chain: Network) -> None:
    client = PahoClient(chain.ports["B"], version=MQTT5)
    client.connect()
    assert client.subscribe([("$link/control", 1), ("$link/#", 0)]) == [0x87, 0x87]
    client.close()


def test_two_dialing_sides_are_refused_with_a_hint(tmp_path: Path) -> None:
    network = Network(tmp_path, ["A", "B"], [("A", "B")])
    # B dials A as well, instead of accepting.
    text = network.config_text("B").replace(
        '[[links]]\nname = "A"\nuser = "link-A"\n',
        f'[[links]]\nname = "A"\nhost = "127.0.0.1"\nport = {network.ports["A"]}\n'
        "reconnect_min = 0.1\nreconnect_max = 1.0\n",
    )
    broker_b = network.brokers["B"]
    broker_b.config_path.write_text(
        text + f'\n[[listeners]]\nhost = "127.0.0.1"\nport = {network.ports["B"]}\n',
        encoding="utf-8",
    )
    try:
        network.start()
        for broker in network.brokers.values():
            assert wait_until(
                lambda b=broker: "remove host on one side" in b.log_text(), LINK_TIMEOUT
            )
        for broker, link in (("A", "B"), ("B", "A")):
            port, topic = network.ports[broker], f"$SYS/broker/links/{link}/state"
            assert wait_until(
                lambda p=port, t=topic: (sys_value(p, t, 1.0) or "").startswith("refused: "),
                LINK_TIMEOUT,
                0.2,
            ), sys_value(port, topic)
    finally:
        network.finalize()


def test_a_link_that_comes_back_over_a_half_open_connection_keeps_its_reach(
    tmp_path: Path,
) -> None:
    """The dialer loses its connection but the acceptor does not notice (half-open TCP):
    the new CONNECT takes the link's session over, and the topology keeps the new link's
    paths (the old connection's end must not remove them)."""
    network = Network(tmp_path, ["A", "B", "C"], [("A", "B"), ("B", "C")], relayed=[("A", "B")])
    try:
        network.start()
        for broker, link in (("A", "B"), ("C", "B")):
            assert wait_link_state(network, broker, link, "connected"), (broker, link)
        relay = network.relays[("A", "B")]
        connections = relay.connections
        relay.cut(half_open=True)
        assert wait_until(lambda: relay.connections > connections, LINK_TIMEOUT)
        assert wait_until(lambda: "taken over" in network.brokers["B"].log_text(), LINK_TIMEOUT)
        for broker, link, reaches in (("B", "A", "A"), ("C", "B", "B,A"), ("A", "B", "B,C")):
            topic = f"$SYS/broker/links/{link}/reaches"
            port = network.ports[broker]
            assert wait_until(
                lambda p=port, t=topic, r=reaches: sys_value(p, t, 1.0) == r, LINK_TIMEOUT, 0.2
            ), (broker, link, sys_value(port, topic))
        # And it stays so: nothing later removes the paths.
        assert not wait_until(
            lambda: sys_value(network.ports["C"], "$SYS/broker/links/B/reaches", 1.0) != "B,A",
            2.0,
            0.3,
        )
    finally:
        network.finalize()
