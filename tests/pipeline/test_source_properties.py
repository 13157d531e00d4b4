"""MQTT 5.0 properties from a live broker's journal to Spark (`local[2]`).

A broker subprocess journals what paho clients publish: a 5.0 message with a Content Type
and User Properties (one name twice), a 5.0 message without properties and a 3.1.1 one.
Spark reads the journal through the store file (option ``path``, the live file) and through
the journal service (option ``journal``): both give ``content_type`` and ``user_properties``
(name -> first value), NULL where the message has none; ingest carries them into the lake.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from telemq.filters.spark import to_column
from telemq.pipeline.ingest import journal_table, run_ingest
from telemq.pipeline.source import read_journal
from testsupport.paho import MQTT5, MQTT311, PahoClient

from .helpers import journal_service

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

USERS = [("site", "lab"), ("unit", "C"), ("site", "roof")]  # "site" twice: the first wins
EXPECTED = [
    ("m/five", "application/json", {"site": "lab", "unit": "C"}),
    ("m/five/plain", None, None),
    ("m/three", None, None),
]


def _publish(port: int) -> None:
    five = PahoClient(port, version=MQTT5)
    three = PahoClient(port, version=MQTT311)
    five.connect()
    three.connect()
    try:
        props = Properties(PacketTypes.PUBLISH)
        props.ContentType = "application/json"
        props.UserProperty = USERS
        five.publish("m/five", b'{"temp": 21}', qos=1, properties=props)  # acknowledged:
        five.publish("m/five/plain", b'{"temp": 22}', qos=1)  # in the journal
        three.publish("m/three", b'{"temp": 23}', qos=1)
    finally:
        five.close()
        three.close()


@pytest.fixture(scope="module")
def journaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    with journal_service(tmp_path_factory.mktemp("properties")) as (broker, url):
        _publish(broker.port)
        yield broker.data_dir, url


def _rows(frame: Any) -> list[tuple[Any, ...]]:
    rows = frame.orderBy("seq").select("topic", "content_type", "user_properties").collect()
    return [(r["topic"], r["content_type"], r["user_properties"]) for r in rows]


def test_the_local_and_network_sources_read_the_properties(
    spark: Any, journaled: tuple[Path, str]
) -> None:
    data, url = journaled
    local = read_journal(spark, str(data))
    assert dict(local.dtypes)["user_properties"] == "map<string,string>"
    assert _rows(local) == EXPECTED
    assert _rows(read_journal(spark, url)) == EXPECTED
    # Spark's own functions read the map, as the compiled filters do.
    site = local.selectExpr("try_element_at(user_properties, 'site') AS site").collect()
    assert sorted(str(r["site"]) for r in site) == ["None", "None", "lab"]


def test_ingest_carries_the_properties_into_the_lake(
    spark: Any, journaled: tuple[Path, str], tmp_path: Path
) -> None:
    data, _ = journaled
    lake = tmp_path / "lake"
    assert run_ingest(spark, data, lake).rows == 3
    table = pq.read_table(journal_table(lake), columns=["seq", "content_type", "user_properties"])
    rows = sorted(table.to_pylist(), key=lambda r: r["seq"])
    assert [(r["content_type"], r["user_properties"]) for r in rows] == [
        ("application/json", [("site", "lab"), ("unit", "C")]),
        (None, None),
        (None, None),
    ]


@pytest.mark.parametrize(
    ("text", "topics"),
    [
        ("Properties.User.site = 'lab'", ["m/five"]),
        ("Properties.ContentType = 'application/json' AND temp < 22", ["m/five"]),
        ("Properties.User.site IS NULL", ["m/five/plain", "m/three"]),
        # The broker the publication was made at: the default name, on both sources.
        ("Properties.Broker = 'telemq' AND temp > 21", ["m/five/plain", "m/three"]),
        ("Properties.Broker <> 'telemq'", []),
        (
            "Properties.User.unit = 'C' OR Properties.ContentType IS NULL",
            ["m/five", "m/five/plain", "m/three"],
        ),
    ],
)
def test_filters_read_the_properties_in_spark_and_in_the_source(
    spark: Any, journaled: tuple[Path, str], text: str, topics: list[str]
) -> None:
    """A filter on the properties, as a Spark Column over the journal's columns and as the
    source's own `filter` option (evaluated in Python while reading), over both sources."""
    data, url = journaled
    for location in (str(data), url):
        frame = read_journal(spark, location)
        picked = frame.filter(to_column(text)).orderBy("seq").select("topic").collect()
        assert [r["topic"] for r in picked] == topics
        read = spark.read.format("telemq").option("filter", text)
        read = read.option("journal" if location == url else "path", location)
        assert [r["topic"] for r in read.load().orderBy("seq").collect()] == topics
