"""Persistence options across a broker restart (design §5 "persistence", the seed: of several
persistence options the last one wins), and registrations kept by the durable store.

All queues are registered and fed first, then the broker restarts once, then each queue's
session is resumed and checked; a sentinel published after the resumption marks the end of what
the restart kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from .conftest import start_broker
from .helpers import (
    BrokerProcess,
    MQClient,
    Received,
    assert_ok,
    connected,
    unique,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


@dataclass
class Case:
    """One offline queue with one subscription and the publications made while offline."""

    options: list[str]
    form: str
    publications: list[tuple[bytes, int]]  # payload, QoS
    survivors: list[tuple[bytes, int]]  # payload, delivered QoS after the restart
    queue: str = field(default_factory=lambda: unique("pq"))
    topic: str = field(default_factory=lambda: unique("per/"))
    name: str = field(default_factory=lambda: unique("pn"))


CASES: dict[str, Case] = {
    "Pers keeps QoS 0 and delivers it at QoS 1": Case(
        ["Pers"], "xml", [(b"q0", 0), (b"q1", 1)], [(b"q0", 1), (b"q1", 1)]
    ),
    "NonPers loses QoS 1": Case(["NonPers"], "json", [(b"q1", 1), (b"q2", 2)], []),
    "PersAsPub keeps QoS 1, not QoS 0": Case(
        ["PersAsPub"], "xml", [(b"q0", 0), (b"q1", 1), (b"q2", 2)], [(b"q1", 1), (b"q2", 2)]
    ),
    "default is PersAsPub": Case([], "json", [(b"q0", 0), (b"q1", 1)], [(b"q1", 1)]),
    "PersAsQueue on a durable queue keeps QoS 0": Case(
        ["PersAsQueue"], "json", [(b"q0", 0), (b"q1", 1)], [(b"q0", 1), (b"q1", 1)]
    ),
    "Pers then NonPers: NonPers wins": Case(["Pers", "NonPers"], "xml", [(b"q1", 1)], []),
    "NonPers then Pers: Pers wins": Case(
        ["NonPers", "Pers"], "json", [(b"q0", 0), (b"q1", 1)], [(b"q0", 1), (b"q1", 1)]
    ),
    "PersAsPub then Pers then NonPers: NonPers wins": Case(
        ["PersAsPub", "Pers", "NonPers"], "json", [(b"q1", 1)], []
    ),
}


@dataclass
class Restarted:
    broker: BrokerProcess
    kept: dict[str, list[Received]]  # case -> what the queue received before the sentinel
    retained_topic: str


# A named subscription moved to another queue by a second RegSub with its SubName.
REPOINTED_NAME = unique("moved")
REPOINTED_FROM = unique("pq-z-from")  # loads after REPOINTED_TO (by queue name)
REPOINTED_TO = unique("pq-a-to")
REPOINTED_TOPIC = unique("per/moved/")


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restarted]:
    broker = start_broker(tmp_path_factory, 'name = "QM.PERSIST"\n[sys]\ninterval = 0\n')
    opened: list[MQClient] = []
    try:
        admin = connected(broker.port)
        opened.append(admin)
        publisher = connected(broker.port)
        opened.append(publisher)
        for case in CASES.values():
            psc: dict[str, str | list[str]] = {
                "Command": "RegSub",
                "Topic": case.topic,
                "QName": case.queue,
                "SubName": case.name,
            }
            if case.options:
                psc["RegOpt"] = case.options
            assert_ok(admin.command(psc, form=case.form))
        for queue in (REPOINTED_FROM, REPOINTED_TO):
            assert_ok(
                admin.command(
                    {
                        "Command": "RegSub",
                        "Topic": REPOINTED_TOPIC,
                        "QName": queue,
                        "SubName": REPOINTED_NAME,
                    }
                )
            )
        retained_topic = unique("per/retained/")
        assert_ok(
            publisher.command(
                {"Command": "Publish", "Topic": retained_topic, "PubOpt": "RetainPub"},
                body=b"retained state",
            )
        )
        for case in CASES.values():
            for payload, qos in case.publications:
                publisher.publish(case.topic, payload, qos=qos)
        # A QoS 1 PUBACK comes after the commit of everything this connection sent before it.
        publisher.publish(unique("per/barrier/"), b"barrier", qos=1)
        for client in opened:
            client.close()
        opened.clear()

        broker.restart()

        kept: dict[str, list[Received]] = {}
        for key, case in CASES.items():
            subscriber = MQClient(broker.port, case.queue, clean=False)
            opened.append(subscriber)
            assert subscriber.connect() is True, f"{key}: the queue's session was lost"
            subscriber.sync()
            kept[key] = subscriber.deliveries(case.topic)
        yield Restarted(broker, kept, retained_topic)
    finally:
        for client in opened:
            try:
                client.close()
            except Exception:
                client.client.loop_stop()
        broker.finalize()


@pytest.mark.parametrize("key", list(CASES))
def test_persistence_option_across_restart(restarted: Restarted, key: str) -> None:
    case = CASES[key]
    got = [(m.payload, m.qos) for m in restarted.kept[key]]
    assert got == case.survivors, f"{key} (RegOpt {case.options}): kept {got}"


def test_registrations_survive_the_restart(restarted: Restarted) -> None:
    port = restarted.broker.port
    admin = connected(port)
    publisher = connected(port)
    try:
        for key, case in CASES.items():
            listed = admin.list_subs(SubName=case.name)
            assert [s["Topic"] for s in listed] == [[case.topic]], key
            assert listed[0]["QName"] == [case.queue]
        # Live publications still reach the queues (the subscribers are connected).
        case = CASES["NonPers loses QoS 1"]
        subscriber = MQClient(port, case.queue, clean=False)
        subscriber.connect()
        publisher.publish(case.topic, b"after restart", qos=1)
        got = subscriber.wait_deliveries(1, case.topic)
        assert [m.payload for m in got] == [b"after restart"]
        subscriber.close()
        # Named subscriptions can still be deregistered by name.
        for case in CASES.values():
            assert_ok(admin.command({"Command": "DeregSub", "SubName": case.name}))
    finally:
        admin.close()
        publisher.close()


def test_a_repointed_subscription_is_restored_once_on_its_new_queue(
    restarted: Restarted,
) -> None:
    admin = connected(restarted.broker.port)
    try:
        listed = admin.list_subs(SubName=REPOINTED_NAME)
        assert [s["QName"] for s in listed] == [[REPOINTED_TO]]
        assert admin.list_subs(QName=REPOINTED_FROM) == []
    finally:
        admin.close()


def test_retained_publication_survives_the_restart(restarted: Restarted) -> None:
    probe = connected(restarted.broker.port)
    try:
        probe.subscribe(restarted.retained_topic, 1)
        got = probe.wait_deliveries(1, restarted.retained_topic)
        assert [(m.payload, m.retain) for m in got] == [(b"retained state", True)]
    finally:
        probe.close()


def test_pers_raises_qos_0_to_1_for_a_connected_queue(restarted: Restarted) -> None:
    port = restarted.broker.port
    subscriber = connected(port, clean=False)
    publisher = connected(port)
    try:
        topic = unique("per/online/")
        assert_ok(subscriber.command({"Command": "RegSub", "Topic": topic, "RegOpt": "Pers"}))
        publisher.publish(topic, b"zero", qos=0)
        got = subscriber.wait_deliveries(1, topic)
        assert [(m.payload, m.qos) for m in got] == [(b"zero", 1)]
    finally:
        subscriber.close()
        publisher.close()


def test_non_pers_deliveries_wait_in_memory_while_the_broker_runs(restarted: Restarted) -> None:
    """NonPers is not "never queued": without a restart the offline queue gets its message."""
    port = restarted.broker.port
    admin = connected(port)
    queue = unique("pq")
    topic = unique("per/mem/")
    try:
        assert_ok(
            admin.command(
                {"Command": "RegSub", "Topic": topic, "QName": queue, "RegOpt": "NonPers"}
            )
        )
        admin.publish(topic, b"in memory", qos=1)
        subscriber = MQClient(port, queue, clean=False)
        try:
            subscriber.connect()
            got = subscriber.wait_deliveries(1, topic)
            assert [(m.payload, m.qos) for m in got] == [(b"in memory", 1)]
        finally:
            subscriber.close()
    finally:
        admin.close()
