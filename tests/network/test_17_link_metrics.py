"""Each link's state and traffic in `/metrics` (docs/operations.md, "Prometheus"): the
dialing and the accepting broker both label their link with the neighbour's name; what
crosses is counted on both sides; a link that goes down reads 0 and what waits for it is
its queue depth."""

from __future__ import annotations

from pathlib import Path

from testsupport.metrics import samples, value
from testsupport.paho import PahoClient
from testsupport.process import unique, wait_until

from .netsupport import LINK_TIMEOUT, Network, wait_link_state
from .test_11_forwarding import wait_proxies


def test_links_in_metrics(tmp_path: Path) -> None:
    network = Network(tmp_path, ["A", "B"], [("A", "B")], http=True)
    try:
        network.start()
        assert wait_link_state(network, "A", "B", "connected")
        a, b = network.http_ports["A"], network.http_ports["B"]
        assert wait_until(
            lambda: value(samples(b), "telemq_link_connected", link="A") == 1, LINK_TIMEOUT
        )
        assert value(samples(a), "telemq_link_connected", link="B") == 1
        base = unique("metrics/link")
        subscriber = PahoClient(network.ports["B"], unique("sub"), clean=False)
        subscriber.connect()
        subscriber.subscribe(f"{base}/#", qos=1)
        wait_proxies(network, "A", "B", 1)
        publisher = PahoClient(network.ports["A"])
        publisher.connect()
        try:
            for n in range(3):
                publisher.publish(f"{base}/{n}", f"{n}", qos=1)
            subscriber.wait_messages(3)
            assert wait_until(
                lambda: value(samples(a), "telemq_link_messages_sent_total", link="B") == 3,
                LINK_TIMEOUT,
            )
            assert wait_until(
                lambda: value(samples(b), "telemq_link_messages_received_total", link="A") == 3,
                LINK_TIMEOUT,
            )
            # The queue depth counts what is sent but not yet acknowledged: B's last
            # acknowledgement must reach A before B stops, or it stays in the count.
            assert wait_until(
                lambda: value(samples(a), "telemq_link_queued_messages", link="B") == 0,
                LINK_TIMEOUT,
            )
            subscriber.close()
            network.brokers["B"].stop()
            assert wait_until(
                lambda: value(samples(a), "telemq_link_connected", link="B") == 0, LINK_TIMEOUT
            )
            for n in range(2):
                publisher.publish(f"{base}/later/{n}", "waits", qos=1)
            assert wait_until(
                lambda: value(samples(a), "telemq_link_queued_messages", link="B") == 2,
                LINK_TIMEOUT,
            )
            assert value(samples(a), "telemq_link_messages_dropped_total", link="B") == 0
        finally:
            publisher.close()
    finally:
        network.finalize()
