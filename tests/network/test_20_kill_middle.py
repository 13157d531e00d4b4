"""SIGKILL of the middle broker of A - B - C while QoS 1 and QoS 2 publications flow from a
persistent publisher at A to a persistent subscriber at C: nothing A acknowledged is lost,
and no QoS 2 message arrives twice (docs/network.md §6, "Durability, end to end").

Bounded: 1,500 messages per QoS, B killed three times at seeded moments, every wait with a
deadline."""

from __future__ import annotations

import random
import threading
from collections import Counter
from pathlib import Path

from testsupport.paho import PahoClient, sys_value
from testsupport.process import unique, wait_until

from .netsupport import Network, wait_link_state
from .test_11_forwarding import wait_proxies

MESSAGES = 1500
QUEUED = "$SYS/broker/links/%s/queued"
KILLS = 3


def test_killing_the_middle_broker_loses_nothing_acknowledged(tmp_path: Path) -> None:
    # The subscriber's queue at C is unbounded: a backlog crossing B after a restart comes
    # in a burst, and a bounded client queue would drop (and count) what overflows it.
    limits = "\n[limits]\nmax_queued_messages = 0\n"
    network = Network(tmp_path, ["A", "B", "C"], [("A", "B"), ("B", "C")], extra=limits)
    rng = random.Random(23)
    base = unique("kill")
    try:
        network.start()
        for broker, link in (("A", "B"), ("C", "B")):
            assert wait_link_state(network, broker, link, "connected"), (broker, link)
        subscriber = PahoClient(network.ports["C"], "sub-" + base, clean=False)
        subscriber.connect()
        subscriber.subscribe(f"{base}/q1/#", qos=1)
        subscriber.subscribe(f"{base}/q2/#", qos=2)
        wait_proxies(network, "A", "B", 2)
        publisher = PahoClient(network.ports["A"], "pub-" + base, clean=False)
        publisher.connect()
        acknowledged: list[tuple[str, bytes]] = []
        # Seeded moments, counted in acknowledged messages, in the first 60% of the traffic.
        moments = sorted(rng.sample(range(100, int(1.2 * MESSAGES)), KILLS))
        # The publisher waits at each moment until B is killed there: A acknowledges whether
        # B is up or not, so a publisher left to run (B restarting on a busy machine) could
        # pass the next moments before the kills.
        reached = {moment: threading.Event() for moment in moments}
        killed = {moment: threading.Event() for moment in moments}

        def publish_all() -> None:
            for n in range(MESSAGES):
                for qos in (1, 2):
                    if len(acknowledged) in reached:
                        reached[len(acknowledged)].set()
                        killed[len(acknowledged)].wait(60.0)
                    topic, payload = f"{base}/q{qos}/m", b"%d" % n
                    publisher.publish(topic, payload, qos=qos)  # returns once acknowledged
                    acknowledged.append((topic, payload))

        sender = threading.Thread(target=publish_all, daemon=True)
        sender.start()
        middle = network.brokers["B"]
        killed_at: list[int] = []
        for moment in moments:
            reached[moment].wait(60.0)
            killed_at.append(len(acknowledged))
            middle.kill()
            killed[moment].set()  # the publisher goes on while B is down and restarts
            wait_until(lambda: False, rng.uniform(0.1, 0.5))  # down a moment
            middle.start()
        sender.join(120)
        assert not sender.is_alive(), f"publisher stuck after {len(acknowledged)} messages"
        # The kills came while messages were flowing, at the seeded moments.
        assert killed_at == moments, (killed_at, moments)
        assert killed_at[-1] < 2 * MESSAGES, killed_at
        expected = Counter(acknowledged)
        assert len(expected) == 2 * MESSAGES

        def arrived() -> Counter[tuple[str, bytes]]:
            return Counter((m.topic, m.payload) for m in subscriber.received())

        missing = lambda: sorted(set(expected) - set(arrived()))  # noqa: E731
        assert wait_until(lambda: not missing(), 60.0, 0.2), (
            f"{len(missing())} acknowledged messages never arrived: {missing()[:10]}; "
            f"queued at A for B: {sys_value(network.ports['A'], QUEUED % 'B')}, "
            f"at B for C: {sys_value(network.ports['B'], QUEUED % 'C')}, "
            f"kills at {killed_at}"
        )
        for broker in ("A", "B", "C"):
            assert sys_value(network.ports[broker], "$SYS/broker/messages/dropped") == "0"
        got = arrived()
        duplicates = [key for key, count in got.items() if count > 1 and "/q2/" in key[0]]
        assert not duplicates, f"QoS 2 messages delivered twice: {duplicates[:5]}"
        publisher.close()
        subscriber.close()
    finally:
        network.finalize()
