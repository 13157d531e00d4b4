"""Journal retention: rows beyond `max_rows` / older than `max_age` go, but never rows a
running pipeline query has not committed (its record in `<data_dir>/pipeline-commits`)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from telemq.store import consumers
from telemq.store.sqlite import open_journal_reader

from .conftest import BrokerFactory
from .helpers import BrokerProcess, raw_connected, unique, wait_until, write_config

pytestmark = pytest.mark.interop


def journal_seqs(broker: BrokerProcess) -> list[int]:
    reader = open_journal_reader(broker.data_dir)
    try:
        return [row[0] for row in reader.execute("SELECT seq FROM journal ORDER BY seq")]
    except sqlite3.OperationalError:
        return []
    finally:
        reader.close()


def publish(broker: BrokerProcess, count: int, topic: str) -> None:
    with raw_connected(broker.port, unique("pub")) as client:
        for n in range(count):
            client.publish(topic, str(n).encode(), qos=1)


def retention_broker(factory: BrokerFactory, tmp_path: Path, settings: str) -> BrokerProcess:
    config = write_config(
        tmp_path / "retention.toml", f"[journal]\nretention_interval = 0.2\n{settings}\n"
    )
    return factory("--log-level", "debug", config=config)


def passes_done(broker: BrokerProcess, count: int) -> None:
    """Wait for `count` more retention passes that deleted nothing (the broker logs each at
    DEBUG): the evidence that nothing was trimmed, instead of a sleep."""
    marker = "journal retention: nothing to delete"
    seen = broker.log_text().count(marker)
    assert wait_until(lambda: broker.log_text().count(marker) >= seen + count, 10), count


def test_max_rows_keeps_the_newest_rows(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    broker = retention_broker(broker_factory, tmp_path, "max_rows = 50")
    publish(broker, 200, "sensors/a")
    assert wait_until(lambda: journal_seqs(broker) == list(range(151, 201)), 10)
    publish(broker, 10, "sensors/a")
    assert wait_until(lambda: journal_seqs(broker) == list(range(161, 211)), 10)
    assert "journal retention:" in broker.log_text()


def test_max_age_drops_old_rows_only(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    broker = retention_broker(broker_factory, tmp_path, "max_age = 1.5")
    publish(broker, 20, "sensors/old")
    assert wait_until(lambda: journal_seqs(broker) == [], 10)
    publish(broker, 5, "sensors/new")
    seqs = journal_seqs(broker)
    assert seqs == list(range(21, 26)), "fresh rows are kept, seq does not restart"


def test_a_running_consumer_holds_rows_it_has_not_committed(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = retention_broker(broker_factory, tmp_path, "max_rows = 10")
    # The record names this test process (alive), so the consumer counts as running.
    consumers.write_record(broker.data_dir, consumers.ConsumerRecord("ingest-held", None))
    publish(broker, 100, "sensors/a")
    passes_done(broker, 2)  # two retention passes since all 100 rows were there
    assert journal_seqs(broker) == list(range(1, 101)), "position unknown: nothing trimmed"

    consumers.write_record(broker.data_dir, consumers.ConsumerRecord("ingest-held", 40))
    assert wait_until(lambda: journal_seqs(broker)[:1] == [41], 10)
    passes_done(broker, 2)
    assert journal_seqs(broker) == list(range(41, 101)), "never past the committed seq"

    consumers.update_record(broker.data_dir, "ingest-held", 40, running=False)
    assert wait_until(lambda: journal_seqs(broker) == list(range(91, 101)), 10)


def test_a_dead_consumer_does_not_hold_rows(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    broker = retention_broker(broker_factory, tmp_path, "max_rows = 10")
    record = consumers.ConsumerRecord("ingest-dead", 5)
    consumers.write_record(broker.data_dir, record)
    path = consumers.record_path(broker.data_dir, "ingest-dead")
    text = path.read_text(encoding="utf-8").replace(f'"pid": {os.getpid()}', '"pid": 999999999')
    path.write_text(text, encoding="utf-8")
    publish(broker, 50, "sensors/a")
    assert wait_until(lambda: journal_seqs(broker) == list(range(41, 51)), 10)


def test_bad_retention_settings_are_refused(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    config = write_config(tmp_path / "bad.toml", "[journal]\nmax_rows = -1\n")
    broker = broker_factory(config=config, start=False)
    proc = broker.start(wait=False).proc
    assert proc is not None
    assert proc.wait(timeout=30) != 0
    assert "journal.max_age / journal.max_rows" in broker.log_text()
