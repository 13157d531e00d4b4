"""The `telemq` data source's Sparkplug views (option ``sparkplug``): metric rows and the
quarantine straight from ``format("telemq")``, batch and streaming, with aliases resolved
through BIRTHs read before the range (telemq.pipeline.sparkplug_source).

The batch tests read one Sparkplug journal over the journal service, as a user whose ACL
allows only the group ``Plant``: the BIRTHs are fetched with topic filters it may read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from telemq.pipeline.source import SourceOptions, read_journal, register
from telemq.pipeline.sparkplug_rows import decode_batch, decode_sparkplug
from telemq.pipeline.sparkplug_schema import METRIC_COLUMNS, quarantine_schema
from telemq.pipeline.sparkplug_source import (
    BIRTH_FILTERS,
    DECODE_ROWS,
    SparkplugBatchReader,
    SparkplugRange,
    birth_filters,
    read_view,
)
from telemq.sparkplug import Metric
from testsupport.process import users_and_acl

from .helpers import Pub, append_journal, journal_service, run_stream
from .test_sparkplug_rows import NBIRTH, NDATA, NODE, data, journal

PLANT = "spBv1.0/Plant/#"
QUARANTINE = quarantine_schema().names
USER = {"user": "plant", "password": "plant-pw-1"}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The journal of `test_sparkplug_rows.journal()` (17 rows) behind the journal service."""
    config = users_and_acl({"plant": USER["password"]}, [("plant", "journal", PLANT, True)])
    workdir = tmp_path_factory.mktemp("sparkplug-source")
    with journal_service(workdir, journal(), config_text=config) as (_, service_url):
        yield service_url


def _sorted(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda r: (r["seq"], r["metric_index"] or 0))


def _view(spark: Any, url: str, view: str, **options: object) -> list[Any]:
    register(spark)
    reader = spark.read.format("telemq").option("journal", url).option("sparkplug", view)
    frame = reader.options(**{**USER, "topics": PLANT, **{k: str(v) for k, v in options.items()}})
    return _sorted(frame.load().collect())


def test_birth_filters_follow_the_topics_read() -> None:
    assert birth_filters(()) == BIRTH_FILTERS
    assert birth_filters(["#"]) == BIRTH_FILTERS
    assert birth_filters(["sensors/#", "spBv1.0"]) == ()
    assert birth_filters([PLANT]) == ("spBv1.0/Plant/NBIRTH/+", "spBv1.0/Plant/DBIRTH/+/+")
    assert birth_filters(["spBv1.0/Plant/DDATA/edge1/pump"]) == (
        "spBv1.0/Plant/DBIRTH/edge1/pump",
        "spBv1.0/Plant/NBIRTH/edge1",
    )
    assert birth_filters(["+/+/NDATA/edge1"]) == ("spBv1.0/+/NBIRTH/edge1",)


def test_an_unknown_view_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="option sparkplug: expected metrics or quarantine"):
        SourceOptions.parse({"path": "data", "sparkplug": "rows"})
    assert SourceOptions.parse({"path": "data", "SPARKPLUG": " Metrics"}).sparkplug == "metrics"


@pytest.mark.spark
def test_the_views_agree_with_decode_sparkplug(spark: Any, url: str) -> None:
    """The decoder of `sparkplug_metrics` over the whole frame (its BIRTHs collected by the
    driver) and the views in partitions of 3 rows, most BIRTHs in another partition than the
    data they name: the same rows."""
    decoded = _sorted(
        decode_sparkplug(read_journal(spark, url, topics=[PLANT], options=USER)).collect()
    )
    got_metrics = _view(spark, url, "metrics", rowsPerPartition=3)
    got_quarantine = _view(spark, url, "quarantine", rowsPerPartition=3)
    held = [r for r in decoded if r["reason"] is not None]
    assert [tuple(r) for r in got_metrics] == [
        tuple(r[c] for c in METRIC_COLUMNS) for r in decoded if r["reason"] is None
    ]
    assert [tuple(r) for r in got_quarantine] == [tuple(r[c] for c in QUARANTINE) for r in held]
    assert len(got_metrics) == 12 and len(got_quarantine) == 11  # no STATE: not in PLANT
    assert [r["name"] for r in got_metrics if r["seq"] == 6] == ["Speed", "Running"]
    reasons = {(r["seq"], r["metric_index"]): r["reason"] for r in got_quarantine}
    assert reasons[(1, 0)] == "alias 1: no BIRTH of this edge node before it"
    assert reasons[(7, 0)] == "alias 99 is not in the BIRTH at seq 5"


@pytest.mark.spark
def test_births_before_the_range_resolve_its_aliases(spark: Any, url: str) -> None:
    """Seqs 6..7 only: the DBIRTH (seq 5) and NBIRTH (seq 2) are read by the planner."""
    device = "spBv1.0/Plant/DDATA/edge1/pump"
    metrics = _view(spark, url, "metrics", startingSeq=6, endingSeq=7, topics=device)
    assert [
        (r["seq"], r["name"], r["datatype"], r["int_value"], r["is_null"]) for r in metrics
    ] == [
        (6, "Speed", "Int16", -2, False),
        (6, "Running", "Boolean", None, True),
    ]
    held = _view(spark, url, "quarantine", startingSeq=6, endingSeq=7, topics=device)
    # A filter reads the payload, which metric rows no longer have: read_journal hands it to
    # the reader, which filters journal rows before they are decoded.
    options = {**USER, "sparkplug": "metrics", "startingSeq": 6, "endingSeq": 7}
    flt = "Metric['Speed'] IS NULL"  # sent by alias: NULL for the filter language
    same = read_journal(spark, url, topics=[PLANT], filter=flt, options=options)
    assert _sorted(same.collect()) == metrics
    assert [(r["seq"], r["metric_index"], r["reason"]) for r in held] == [
        (7, 0, "alias 99 is not in the BIRTH at seq 5")
    ]


@pytest.mark.spark
def test_a_stream_resolves_aliases_across_micro_batches_and_a_restart(
    spark: Any, tmp_path: Path
) -> None:
    """One row per micro-batch, then a second query over the same checkpoint: its new offset
    process rebuilds the BIRTHs from the journal. (Seq 4's unknown alias goes to the
    quarantine view, checked in batch above.)"""
    data_dir, checkpoint = tmp_path / "data", tmp_path / "checkpoint"
    unknown = data(9, Metric(alias=7, value=1.0, wire_field="double_value"))
    append_journal(data_dir, [Pub(NODE.format("NBIRTH"), NBIRTH), Pub(NODE.format("NDATA"), NDATA)])
    seen = run_stream(spark, data_dir, checkpoint, sparkplug="metrics", maxRowsPerBatch=1)
    assert {b: [(r.seq, r.name) for r in rows] for b, rows in seen.items()} == {
        0: [(1, "bdSeq"), (1, "Pressure"), (1, "Label")],
        1: [(2, "Pressure")],
    }
    assert seen[1][0].double_value == 3.75
    more = data(2, Metric(alias=1, value=4.5, wire_field="float_value"))
    append_journal(data_dir, [Pub(NODE.format("NDATA"), more), Pub(NODE.format("NDATA"), unknown)])
    # The same checkpoint: the new rows, aliases from the BIRTH at seq 1; seq 4 held.
    seen = run_stream(spark, data_dir, checkpoint, sparkplug="metrics")
    assert {b: [(r.seq, r.name, r.double_value) for r in rows] for b, rows in seen.items()} == {
        2: [(3, "Pressure", 4.5)]
    }


def test_a_long_partition_is_decoded_in_slices(tmp_path: Path) -> None:
    """A partition of more than `DECODE_ROWS` journal rows is decoded a slice at a time
    (no Spark: the reader's executor side): the views hold what one decode of the whole
    range holds, in order, and BIRTHs reach the slices after them."""
    import pyarrow as pa

    pubs = journal() * (2 * DECODE_ROWS // len(journal()) + 2)
    append_journal(tmp_path / "data", pubs)
    views = {}
    for view in ("metrics", "quarantine"):
        options = SourceOptions.parse({"path": str(tmp_path / "data"), "sparkplug": view})
        [partition] = SparkplugBatchReader(options, view).partitions()
        views[view] = pa.Table.from_batches(list(read_view(options, view, partition)))
    assert isinstance(partition, SparkplugRange)
    whole = pa.Table.from_batches(list(options.read(partition))).combine_chunks()
    decoded = decode_batch(whole.to_batches()[0], partition.births).to_pylist()
    metrics = [{k: r[k] for k in METRIC_COLUMNS} for r in decoded if r["reason"] is None]
    held = [{k: r[k] for k in QUARANTINE} for r in decoded if r["reason"] is not None]
    assert views["metrics"].to_pylist() == metrics
    assert views["quarantine"].to_pylist() == held
    late = [r for r in metrics if r["seq"] > DECODE_ROWS and r["message_type"] == "NDATA"]
    assert late and all(r["name"] == "Pressure" for r in late)  # by alias, in a later slice
    assert held
