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
from telemq.filters import spark as spark_backend
from telemq.filters.spark import document_column, to_column, to_columns

pytestmark = pytest.mark.spark

PropertyMap = dict[str, object]


def _key(props: PropertyMap | None) -> tuple[tuple[str, object], ...]:
    return tuple(sorted((props or {}).items()))


@pytest.fixture(params=["flat", "bound", "flat-non-ansi"])
def compile_mode(
    request: pytest.FixtureRequest, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> str:
    """Each way a filter compiles: one flat expression (few field references, the fast
    path), fields bound with ``transform`` (many references; forced here by a limit of 0),
    and the flat expression with ANSI mode off (Spark 4 runs with it on by default)."""
    mode: str = request.param
    if mode == "bound":
        monkeypatch.setattr(spark_backend, "_DIRECT_FIELD_REFERENCES", 0)
    if mode == "flat-non-ansi":
        before = spark.conf.get("spark.sql.ansi.enabled")
        spark.conf.set("spark.sql.ansi.enabled", "false")
        request.addfinalizer(lambda: spark.conf.set("spark.sql.ansi.enabled", before))
    return mode


def test_semantic_table_in_spark(spark: Any, compile_mode: str) -> None:
    """Every row of the table that the Python tests check, Spark answers the same."""
    filters = list(dict.fromkeys(c.filter for c in CASES))
    keys = list(dict.fromkeys((c.payload, _key(c.properties)) for c in CASES))
    result = spark_matrix(spark, filters, [(p, dict(k)) for p, k in keys])
    column = {f: i for i, f in enumerate(filters)}
    row = {k: i for i, k in enumerate(keys)}
    wrong = [
        (c.id(), c.expected, got)
        for c in CASES
        if (got := result[row[(c.payload, _key(c.properties))]][column[c.filter]]) is not c.expected
    ]
    assert not wrong, wrong[:20]


@settings(
    max_examples=6,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking would rerun Spark
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
@given(
    filters=st.lists(filter_texts(3), min_size=30, max_size=30, unique=True),
    batch=st.lists(messages, min_size=40, max_size=40),
)
def test_python_and_spark_agree(
    spark: Any, filters: list[str], batch: list[tuple[bytes, PropertyMap]]
) -> None:
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


EDGE_FILTERS = [
    "s = 'Infinity'",
    "s = '-Infinity'",
    "s > 1e308",
    "s < -1e308",
    "s IS NULL",
    "s LIKE 'Inf%'",
    "s = '-5'",
    "s = -5",
    "s = '5'",
    "s = 5",
    "s = TRUE",
    "s = 'true'",
    "s = 'null'",
    "s IS NOT NULL",
    "s = 12345678901234567.8",
    "s = 100",
    "s + 1 > 0",
    "Body[0] = 1",
    "Body[0].a = 1",
    "Body IS NULL",
    "s = 'a]b'",
    "r[0] = 1",
]
EDGE_PAYLOADS = [
    b'{"s": "Infinity"}',
    b'{"s": "-Infinity"}',
    b'{"s": 1e400}',
    b'{"s": -1e400}',
    b'{"s": "-5"}',
    b'{"s": -5}',
    b'{"s": "5"}',
    b'{"s": 5}',
    b'{"s": true}',
    b'{"s": "true"}',
    b'{"s": "null"}',
    b'{"s": null}',
    b'{"s": 12345678901234567.8}',
    b'{"s": 1E+2}',
    b'{"s": 1e2}',
    b'{"s": -0.0}',
    b'{"s": [1]}',
    b'{"s": {"x": 1}}',
    b'{"s": "a]b"}',
    # a ']' that closes the wrapping array early, trailing text, several values
    b"[1]]",
    b"[1] ]",
    b'{"a": 1}]',
    b'{"r": [1]}]',
    b'{"r": [1]} x',
    b'{"r": [1]}, 2',
    b"1, 2",
    b'"x", "y"',
    b'[{"a": 1}, 2]',
    b"[1]",
    b'{"r": [1]}',
    b'{"r": [1, 2]}',
    b"[]",
    b"[[1]]",
    b'{"a": 1}]]',
    b"]",
    b"[",
    b"1]",
    b'"]"',
    b'{"s": "]"}]',
]


def test_spark_technique_edges(spark: Any, compile_mode: str) -> None:
    """The Spark backend's own techniques at their edges (a number too large for a double
    against the string "Infinity", JSON text typing, the one-parse validity check on
    payloads holding ']'), each compared with the Python evaluator."""
    batch: list[tuple[bytes, PropertyMap | None]] = [(p, None) for p in EDGE_PAYLOADS]
    got = spark_matrix(spark, EDGE_FILTERS, batch)
    wrong = [
        (f, p, expected, got[i][j])
        for i, p in enumerate(EDGE_PAYLOADS)
        for j, f in enumerate(EDGE_FILTERS)
        if got[i][j] is not (expected := compile_filter(f).evaluate(p))
    ]
    assert not wrong, wrong[:20]


MQTT5_FILTERS = [
    "Properties.ContentType = 'application/json'",
    "Properties.ContentType IS NULL",
    "Properties.ContentType LIKE '%json'",
    "Properties.User.site = 'lab-1'",
    "Properties.User.site IS NULL",
    "Properties.User.site IS NOT NULL",
    "Properties.User.site IN ('lab-1', 'x', NULL)",
    "Properties.User.site <> 'lab-1'",
    "Properties.User.site = 1",
    "Properties.User.in = 'x'",
    "Properties.User.é LIKE 'a%'",
    "Properties.User.site = site",
    "Properties.User.site = Properties.ContentType",
    "NOT (Properties.User.site = 'lab-1' AND Properties.ContentType IS NOT NULL)",
]
# (content_type, user_properties as the journal stores them): a NULL map for a message
# without user properties, also an empty map and a NULL value, which must read the same
MQTT5_ROWS: list[tuple[str | None, dict[str, str | None] | None]] = [
    (None, None),
    ("application/json", None),
    ("", {}),
    ("text/json", {"site": "lab-1"}),
    (None, {"site": "lab-2", "in": "x", "é": "aé"}),
    ("application/json", {"site": None, "Site": "lab-1"}),
    ("lab-1", {"site": "lab-1", "other": "y"}),
]


def test_mqtt5_properties_in_spark(spark: Any, compile_mode: str) -> None:
    """``content_type`` and the ``user_properties`` map read as the Python evaluator reads
    ``ContentType`` and ``User.<name>`` keys: a missing key, an empty or NULL map, a NULL
    value are all NULL, with ANSI mode on and off (`compile_mode`)."""
    schema = "id int, payload binary, content_type string, user_properties map<string,string>"
    payload = b'{"site": "lab-1"}'
    rows = [(i, bytearray(payload), ct, users) for i, (ct, users) in enumerate(MQTT5_ROWS)]
    frame = spark.createDataFrame(rows, schema)
    columns = [c.alias(f"f{j}") for j, c in enumerate(to_columns(MQTT5_FILTERS))]
    got = {r["id"]: tuple(r)[1:] for r in frame.select("id", *columns).collect()}
    wrong = []
    for i, (ct, users) in enumerate(MQTT5_ROWS):
        props: PropertyMap = {f"User.{k}": v for k, v in (users or {}).items()}
        if ct is not None:
            props["ContentType"] = ct
        for j, f in enumerate(MQTT5_FILTERS):
            if got[i][j] is not (expected := compile_filter(f).evaluate(payload, props)):
                wrong.append((f, ct, users, expected, got[i][j]))
    assert not wrong, wrong
    assert spark_backend.PROPERTY_COLUMNS["ContentType"] == "content_type"
    assert spark_backend.USER_PROPERTIES_COLUMN == "user_properties"


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
    assert [
        r.id for r in df.filter(to_column(compile_filter("Properties.QoS >= 1"))).collect()
    ] == [0, 2]
    assert [
        r.id
        for r in df.filter(to_column(parse("Properties.Topic = 't/1'"))).orderBy("id").collect()
    ] == [0, 2]
    # MQTT 5.0 properties: the content_type column and the user_properties map
    df5 = journal_frame(
        spark,
        [
            (b"{}", {"ContentType": "application/json", "User.site": "lab-1"}),
            (b"{}", {"ContentType": "text/plain"}),
            (b"{}", {"User.site": "lab-2", "User.zone": "z"}),
        ],
    )
    by_site = to_column("Properties.User.site LIKE 'lab%' AND Properties.ContentType IS NULL")
    assert [r.id for r in df5.filter(by_site).collect()] == [2]
    no_zone = df5.filter(to_column("Properties.User.zone IS NULL")).orderBy("id")
    assert [r.id for r in no_zone.collect()] == [0, 1]
    user_plan = df5.filter(by_site)._jdf.queryExecution().executedPlan().toString()
    assert "PythonUDF" not in user_plan and "BatchEvalPython" not in user_plan
    # the same with the payload parsed once into a column
    parsed = df.withColumn("doc", document_column())
    assert [r.id for r in parsed.filter(to_column("temp <= 20", document="doc")).collect()] == [1]
    # native expressions only: no Python UDF anywhere in the plan
    plan = df.filter(column)._jdf.queryExecution().executedPlan().toString()
    assert "PythonUDF" not in plan and "BatchEvalPython" not in plan and "ArrowEval" not in plan
    # a small filter is one flat expression (compiled to Java), not an interpreted lambda
    assert "lambdafunction" not in plan and plan.startswith("*(")  # "*": whole-stage codegen
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
