"""`/metrics` (docs/operations.md, "Prometheus"): the Prometheus text format parsed with
`prometheus_client`'s own parser, every family named `telemq_`, and values that move with
the traffic a real client makes: connections, messages by QoS, acknowledgements, bytes,
retained messages, queue depths, the store's commits and their histograms, the journal,
authentication failures and authorization denials; who may scrape (401, 403, 200)."""

from __future__ import annotations

import urllib.error
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testsupport.metrics import samples, scrape, value
from testsupport.paho import MQTT5, MQTT311
from testsupport.process import users_and_acl, wait_until

from .helpers import BrokerProcess, PahoClient, served_over_http, unique

BrokerFactory = Callable[..., BrokerProcess]

PASSWORDS = {"ops": "ops-pw", "app": "app-pw", "boss": "boss-pw"}
ACL = [
    ("ops", "subscribe", "$SYS/#", True),
    ("app", "all", "app/#", True),
]
FAMILIES = {
    "telemq_info",
    "telemq_uptime_seconds",
    "telemq_connections",
    "telemq_sessions",
    "telemq_connections_accepted",
    "telemq_subscriptions",
    "telemq_topics",
    "telemq_retained_messages",
    "telemq_retained_bytes",
    "telemq_queued_messages",
    "telemq_authentication_failures",
    "telemq_authorization_denied",
    "telemq_messages_received",
    "telemq_messages_sent",
    "telemq_messages_acked",
    "telemq_messages_dropped",
    "telemq_bytes_received",
    "telemq_bytes_sent",
    "telemq_commands",
    "telemq_store_commits",
    "telemq_store_commit_seconds",
    "telemq_store_sync_seconds",
    "telemq_store_commit_batch_ops",
    "telemq_store_bytes",
    "telemq_journal_rows",
    "telemq_journal_last_seq",
    "telemq_journal_trimmed",
}


def as_user(user: str) -> tuple[str, str]:
    return user, PASSWORDS[user]


@pytest.fixture
def served(broker_factory: BrokerFactory, tmp_path: Path) -> tuple[BrokerProcess, int]:
    """A broker with an HTTP listener, anonymous access and `$SYS` every 0.2 s."""
    return served_over_http(broker_factory, tmp_path, "[sys]\ninterval = 0.2")


def test_every_family_is_there_parsed_by_prometheus_client(
    served: tuple[BrokerProcess, int],
) -> None:
    _, http_port = served
    text, content_type = scrape(http_port)
    assert content_type.startswith("text/plain; version=0.0.4")
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert set(families) >= FAMILIES
    assert all(name.startswith("telemq_") for name in families)
    assert families["telemq_messages_received"].type == "counter"
    assert families["telemq_store_commit_seconds"].type == "histogram"
    assert families["telemq_connections"].type == "gauge"
    # OpenMetrics, for a scraper that asks for it.
    text, content_type = scrape(http_port, accept="application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert text.rstrip().endswith("# EOF")


def test_values_move_with_traffic(served: tuple[BrokerProcess, int]) -> None:
    broker, http_port = served
    before = samples(http_port)
    topic = unique("metrics/traffic")
    subscriber = PahoClient(broker.port, unique("sub"), version=MQTT5)
    publisher = PahoClient(broker.port, unique("pub"), version=MQTT311)
    try:
        subscriber.connect()
        publisher.connect()
        subscriber.subscribe(topic + "/#", qos=2)
        for qos in (0, 1, 2):
            publisher.publish(f"{topic}/{qos}", b"x" * 100, qos=qos)
        publisher.publish(f"{topic}/kept", b"retained", qos=1, retain=True)
        subscriber.wait_messages(4)

        def moved() -> bool:
            after = samples(http_port)
            return value(after, "telemq_messages_acked_total") >= (
                value(before, "telemq_messages_acked_total") + 3
            ) and value(after, "telemq_journal_rows") > value(before, "telemq_journal_rows")

        assert wait_until(moved, 10)
        after = samples(http_port)
        assert value(after, "telemq_connections") == 2
        assert value(after, "telemq_sessions") >= 2
        assert value(after, "telemq_subscriptions") >= 1
        assert value(after, "telemq_topics") >= 1
        assert value(after, "telemq_retained_messages") >= 1
        assert value(after, "telemq_retained_bytes") >= len(b"retained")

        def grew(name: str, **labels: str) -> float:
            return value(after, name, **labels) - value(before, name, **labels)

        assert grew("telemq_messages_received_total", qos="0") == 1
        assert grew("telemq_messages_received_total", qos="1") == 2
        assert grew("telemq_messages_received_total", qos="2") == 1
        assert grew("telemq_messages_sent_total", qos="0") == 1
        assert grew("telemq_messages_sent_total", qos="1") == 2
        assert grew("telemq_messages_sent_total", qos="2") == 1
        assert grew("telemq_messages_acked_total") == 3  # the QoS 1 and 2 deliveries
        assert grew("telemq_bytes_received_total") > 400
        assert grew("telemq_bytes_sent_total") > 400
        assert grew("telemq_store_commits_total") >= 1
        assert grew("telemq_store_commit_seconds_count") >= 1
        assert grew("telemq_store_commit_seconds_sum") > 0
        assert grew("telemq_store_sync_seconds_count") >= 1
        assert grew("telemq_store_commit_batch_ops_count") >= 1
        assert grew("telemq_store_commit_batch_ops_sum") >= 4  # at least the 4 messages
        assert grew("telemq_journal_last_seq") == 4
        count = value(after, "telemq_store_commit_seconds_count")
        assert value(after, "telemq_store_commit_seconds_bucket", le="+Inf") == count
        assert value(after, "telemq_store_bytes") > 0
    finally:
        subscriber.close()
        publisher.close()
    assert wait_until(lambda: value(samples(http_port), "telemq_connections") == 0, 10)


def test_queue_depths(served: tuple[BrokerProcess, int]) -> None:
    broker, http_port = served
    topic = unique("metrics/queue")
    away = PahoClient(broker.port, unique("away"), clean=False)
    away.connect()
    away.subscribe(topic, qos=1)
    away.close()
    publisher = PahoClient(broker.port)
    try:
        publisher.connect()
        for n in range(3):
            publisher.publish(topic, f"{n}", qos=1)
        assert wait_until(
            lambda: value(samples(http_port), "telemq_queued_messages", state="queued") == 3, 10
        )
    finally:
        publisher.close()
    back = PahoClient(broker.port, away.client_id, clean=False)
    try:
        back.connect()
        back.wait_messages(3)
        assert wait_until(
            lambda: value(samples(http_port), "telemq_queued_messages", state="queued") == 0, 10
        )
    finally:
        back.close()


def test_refusals_are_counted_and_scraping_needs_sys(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker, http_port = served_over_http(
        broker_factory, tmp_path, users_and_acl(PASSWORDS, ACL, admins={"boss"})
    )
    before = samples(http_port, as_user("ops"))
    with pytest.raises(AssertionError, match="CONNECT refused"):
        PahoClient(broker.port, username="app", password="wrong", version=MQTT311).connect()
    app = PahoClient(broker.port, username="app", password="app-pw", version=MQTT5)
    try:
        app.connect()
        assert app.subscribe("other/topic", qos=1) == [0x87]
        app.publish("other/topic", "denied", qos=1)
        after = before

        def counted() -> bool:
            nonlocal after
            after = samples(http_port, as_user("ops"))
            return value(after, "telemq_authorization_denied_total", action="publish") > value(
                before, "telemq_authorization_denied_total", action="publish"
            )

        assert wait_until(counted, 10)
    finally:
        app.close()
    assert value(after, "telemq_authentication_failures_total") == (
        value(before, "telemq_authentication_failures_total") + 1
    )
    assert value(after, "telemq_authorization_denied_total", action="subscribe") == (
        value(before, "telemq_authorization_denied_total", action="subscribe") + 1
    )
    # An administrator may scrape; a user the ACL keeps from $SYS may not; nobody anonymous.
    assert samples(http_port, as_user("boss"))
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape(http_port, as_user("app"))
    assert refused.value.code == 403
    assert "not authorized" in refused.value.read().decode()
    with pytest.raises(urllib.error.HTTPError) as unauthenticated:
        scrape(http_port)
    assert unauthenticated.value.code == 401


def test_without_store_histograms_stay_empty_but_present(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker, http_port = served_over_http(broker_factory, tmp_path, '[store]\nkind = "memory"')
    client = PahoClient(broker.port)
    try:
        client.connect()
        client.publish(unique("metrics/memory"), "m", qos=1)
    finally:
        client.close()
    found = samples(http_port)
    assert value(found, "telemq_store_sync_seconds_sum") == 0
    assert value(found, "telemq_store_bytes") == 0
