"""Spark backend: the semantic table in Spark, and Python vs Spark on random filters.

All tests here share the session-scoped ``spark`` fixture (tests/conftest.py) and batch
their work: many filters become the columns of one select over a DataFrame of many
messages, so thousands of (filter, message) cases cost a few Spark jobs.
"""

from __future__ import annotations

from typing import Any

import pytest
from filter_spark_matrix import journal_frame, spark_matrix
from filter_strategies import filter_texts, messages
from filter_table import CASES
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from telemq.filters import FilterError, compile_filter, parse
from telemq.filters.spark import document_column, to_column, to_columns

pytestmark = pytest.mark.spark

PropertyMap = dict[str, object]


def _key(props: PropertyMap | None) -> tuple[tuple[str, object], ...]:
    return tuple(sorted((props or {}).items()))


def test_semantic_table_in_spark(spark: Any) -> None:
    """Every row of the table that the Python tests check, Spark answers the same."""
    filters = list(dict.fromkeys(c.filter for c in CASES))
    keys = list(dict.fromkeys((c.payload, _key(c.properties)) for c in CASES))
    result = spark_matrix(spark, filters, [(p, dict(k)) for p, k in keys])
    column = {f: i for i, f in enumerate(filters)}
    row = {k: i for i, k in enumerate(keys)}
    wrong = [
        (c.id(), c.expected, got)
        for c in CASES
        if (got := result[row[(c.payload, _key(c.properties))]][column[c.filter]])
        is not c.expected
    ]
    assert not wrong, wrong[:20]


@settings(
    max_examples=6,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking would rerun Spark
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.large_base_example],
)
@given(
    filters=st.lists(filter_texts(3), min_size=30, max_size=30, unique=True),
    batch=st.lists(messages, min_size=40, max_size=40),
)
def test_python_and_spark_agree(spark: Any, filters: list[str],
                                batch: list[tuple[bytes, PropertyMap]]) -> None:
    """Random filters x random publications: TRUE/FALSE/UNKNOWN identical in both."""
    expected = [[compile_filter(f).evaluate(p, props) for f in filters] for p, props in batch]
    got = spark_matrix(spark, filters, batch)
    wrong = [
        (filters[j], batch[i][0], batch[i][1], expected[i][j], got[i][j])
        for i in range(len(batch))
        for j in range(len(filters))
        if got[i][j] is not expected[i][j]
    ]
    assert not wrong, f"{len(wrong)} disagreements, e.g. {wrong[:5]}"


def test_column_api(spark: Any) -> None:
    from pyspark.sql.types import BooleanType

    rows = [
        (b'{"temp": 31, "site": {"name": "Lab 1"}}', {"Topic": "t/1", "QoS": 1}),
        (b'{"temp": 20, "site": {"name": "Lab 2"}}', {"Topic": "t/2", "QoS": 0}),
        (b"not json", {"Topic": "t/1", "QoS": 2}),
    ]
    df = journal_frame(spark, rows)
    column = to_column("temp > 30 AND site.name LIKE 'Lab%'")
    assert df.select(column.alias("m")).schema["m"].dataType == BooleanType()
    assert [r.id for r in df.filter(column).collect()] == [0]
    assert [r.id for r in df.filter(to_column(compile_filter("Properties.QoS >= 1"))).collect()
            ] == [0, 2]
    assert [r.id for r in df.filter(to_column(parse("Properties.Topic = 't/1'"))).orderBy("id")
            .collect()] == [0, 2]
    # the same with the payload parsed once into a column
    parsed = df.withColumn("doc", document_column())
    assert [r.id for r in parsed.filter(to_column("temp <= 20", document="doc")).collect()] == [1]
    # native expressions only: no Python UDF anywhere in the plan
    plan = df.filter(column)._jdf.queryExecution().executedPlan().toString()
    assert "PythonUDF" not in plan and "BatchEvalPython" not in plan and "ArrowEval" not in plan
    with pytest.raises(FilterError) as info:
        to_column("temp >")
    assert info.value.reason == 3150


def test_deep_and_long_filters_in_spark(spark: Any) -> None:
    """Depth 64, a 500-term OR and a 100-term sum compile to Spark Columns that run."""
    deep = "(" * 32 + "NOT " * 32 + "a = 1" + ")" * 32
    long_or = " OR ".join(f"a = {i}" for i in range(500))
    arith = "a" + " + a" * 99 + " = 100"
    df = journal_frame(spark, [(b'{"a": 1}', None), (b'{"a": 2}', None)])
    columns = to_columns([deep, long_or, arith])
    rows = df.select("id", *[c.alias(f"c{i}") for i, c in enumerate(columns)]).orderBy("id")
    assert [tuple(r)[1:] for r in rows.collect()] == [(True, True, True), (False, True, False)]
