"""``Metric['<name>']``: Sparkplug B metrics in filters, one meaning in the broker and Spark.

The syntax (parse, print, errors, round trip with Hypothesis), the Python evaluator on the
publications of sparkplug_cases.py, `FilterSet` (indexes on a metric), the zero cost for
filters without a metric, and Spark against Python on every (filter, publication) pair.
"""

from __future__ import annotations

from typing import Any

import pytest
from filter_spark_matrix import spark_matrix
from filter_strategies import conditions, leaves, literals, metrics
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sparkplug_cases import CASES, FILTERS, PUBLICATIONS

from telemq.filters import FilterError, FilterSet, Message, compile_filter, parse
from telemq.filters import ast as A
from telemq.filters.evaluate import compile_condition
from telemq.filters.render import render

# -- syntax ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("Metric['Pressure'] > 3.5", "Metric['Pressure'] > 3.5"),
        ("Metric [ 'a b' ]>=1", "Metric['a b'] >= 1"),
        ("Metric['it''s'] = 'x'", "Metric['it''s'] = 'x'"),
        ("Metric['Inputs/Flow'] IS NULL", "Metric['Inputs/Flow'] IS NULL"),
        ("(Metric['On'])", "Metric['On']"),
        ("Metric = 1", "Metric = 1"),  # a payload field named Metric
        ("Metric[0] = 1", "Metric[0] = 1"),
        ("Metric.x = 1", "Metric.x = 1"),
        ("Body.Metric = 1", "Metric = 1"),
    ],
)
def test_metric_parses_and_prints(text: str, canonical: str) -> None:
    f = compile_filter(text)
    assert f.text == canonical
    assert compile_filter(f.text) == f


def test_metric_node_and_filter_attributes() -> None:
    f = compile_filter("Metric['Pressure'] > 3.5 AND Metric['On'] AND temp = 1")
    assert A.Metric("Pressure") in list(A.walk(f.expr))
    assert f.metrics == {"Pressure", "On"}
    assert f.properties == {"Topic"}  # Sparkplug B is told by the topic
    assert f.fields == {"temp"} and f.reads_payload
    plain = compile_filter("Metric = 1")
    assert plain.metrics == frozenset() and plain.fields == {"Metric"}


@pytest.mark.parametrize(
    ("text", "position", "problem"),
    [
        ("Metric['a'].b = 1", 11, "Metric['a'] has no fields or elements"),
        ("Metric['a'][0] = 1", 11, "has no fields or elements"),
        ("metric['a'] = 1", 7, "(names are case-sensitive)"),
        ("x['a'] = 1", 2, "names a Sparkplug metric only after Metric"),
        ("Body.Metric['a'] = 1", 12, "names a Sparkplug metric only after Metric"),
        ("Metric[''] = 1", 7, "a metric name cannot be empty"),
        ("Metric['a' = 1", 11, "expected ']' after the metric name"),
        ("Metric['a'] + 1", 0, "expected a condition, found an arithmetic expression"),
    ],
)
def test_metric_errors(text: str, position: int, problem: str) -> None:
    with pytest.raises(FilterError) as caught:
        compile_filter(text)
    assert caught.value.reason == 3150
    assert caught.value.position == position
    assert problem in caught.value.problem


@st.composite
def metric_conditions(draw: st.DrawFn) -> A.Node:
    """Conditions of the usual strategies joined with comparisons on metrics."""
    subject = draw(metrics)
    other = draw(st.one_of(literals, leaves, metrics))
    pair = (subject, other) if draw(st.booleans()) else (other, subject)
    compared = A.Comparison(draw(st.sampled_from(list(A.COMPARISONS))), *pair)
    shape = draw(st.sampled_from(["alone", "and", "or", "not", "isnull", "bare"]))
    if shape == "alone":
        return compared
    if shape == "isnull":
        return A.IsNull(subject, draw(st.booleans()))
    if shape == "bare":
        return subject
    if shape == "not":
        return A.Not(compared)
    rest = draw(conditions(2))
    return A.And((compared, rest)) if shape == "and" else A.Or((rest, compared))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=metric_conditions())
def test_metric_round_trip(tree: A.Node) -> None:
    """Printed text re-parses to an equal tree, printing is idempotent, and the text means
    what the tree means on every publication."""
    text = render(tree)
    parsed = parse(text)
    printed = render(parsed)
    assert parse(printed) == parsed and render(parse(printed)) == printed
    compiled = compile_filter(text)
    direct = compile_condition(tree)
    for topic, payload in PUBLICATIONS.values():
        props = {"Topic": topic}
        assert compiled.evaluate(payload, props) is direct(Message(payload, props))


# -- the Python evaluator -------------------------------------------------------------


@pytest.mark.parametrize(("text", "name", "expected"), CASES)
def test_metric_evaluation(text: str, name: str, expected: bool | None) -> None:
    topic, payload = PUBLICATIONS[name]
    assert compile_filter(text).evaluate(payload, {"Topic": topic}) is expected


def test_payload_is_decoded_once_and_only_for_metric_filters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from telemq.filters import message_view

    calls: list[str] = []
    real = message_view.metric_values

    def counting(topic: object, payload: bytes) -> dict[str, object] | None:
        calls.append(str(topic))
        return real(topic, payload)

    monkeypatch.setattr(message_view, "metric_values", counting)
    topic, payload = PUBLICATIONS["rich"]
    message = Message(payload, {"Topic": topic})
    for text in ("Properties.Topic LIKE 'spBv1.0/%'", "temp > 1", "Properties.QoS IS NULL"):
        compile_filter(text).evaluate_message(message)
    assert calls == []  # no filter read a metric
    for text in ("Metric['Pressure'] > 3.5", "Metric['On']", "Metric['Temp'] < 0"):
        assert compile_filter(text).evaluate_message(message) is True
    assert calls == [topic]  # once for all three


def test_filterset_indexes_metrics() -> None:
    """Equality and range conjuncts on a metric are indexed; the answer is `evaluate`'s."""
    subs: FilterSet[str] = FilterSet()
    texts = {
        "high": "Metric['Pressure'] > 3.5",
        "low": "Metric['Pressure'] <= 3.5",
        "exact": "Metric['Pressure'] = 3",
        "auto": "Metric['Mode'] = 'auto' AND Metric['On']",
        "modes": "Metric['Mode'] IN ('auto', 'manual')",
        "field": "Pressure > 3.5",
        "topic": "Properties.Topic LIKE 'spBv1.0/%'",
    }
    for key, text in texts.items():
        subs.add(key, text)
    for topic, payload in PUBLICATIONS.values():
        props = {"Topic": topic}
        expected = {k for k, t in texts.items() if compile_filter(t).evaluate(payload, props)}
        assert subs.matching(payload, props) == expected, topic
    topic, payload = PUBLICATIONS["rich"]
    assert subs.matching(payload, {"Topic": topic}) == {"high", "auto", "modes", "topic"}


def test_journal_reader_filter_reads_metrics() -> None:
    """The ``filter`` option given straight to the data source (the Python evaluator over
    Arrow batches of journal rows) reads the topic column for a metric filter."""
    import pyarrow as pa

    from telemq.pipeline.journal import filter_mask

    names = list(PUBLICATIONS)
    batch = pa.record_batch(
        {
            "payload": pa.array([PUBLICATIONS[n][1] for n in names], pa.binary()),
            "topic": pa.array([PUBLICATIONS[n][0] for n in names], pa.string()),
        }
    )
    mask = filter_mask(batch, compile_filter("Metric['Pressure'] > 3.5")).to_pylist()
    assert [n for n, keep in zip(names, mask, strict=True) if keep] == [
        "rich",
        "birth",
        "certificate",
    ]


# -- Spark ----------------------------------------------------------------------------


@pytest.mark.spark
def test_spark_agrees_with_python_on_sparkplug(spark: Any) -> None:
    """Every filter of the cases on every publication: Spark's TRUE/FALSE/UNKNOWN is the
    Python evaluator's (and so the broker's), and the expected answers hold in Spark."""
    names = list(PUBLICATIONS)
    batch = [(PUBLICATIONS[n][1], {"Topic": PUBLICATIONS[n][0]}) for n in names]
    filters = [*FILTERS, "Metric['Pressure'] > 3.5 AND temp > 1 OR Metric['Nope'] IS NULL"]
    got = spark_matrix(spark, filters, batch, chunk=len(filters))
    expected = [[compile_filter(f).evaluate(p, props) for f in filters] for p, props in batch]
    wrong = [
        (filters[j], names[i], expected[i][j], got[i][j])
        for i in range(len(batch))
        for j in range(len(filters))
        if got[i][j] is not expected[i][j]
    ]
    assert not wrong, wrong[:10]
    row = {n: i for i, n in enumerate(names)}
    column = {f: j for j, f in enumerate(filters)}
    assert all(got[row[n]][column[f]] is e for f, n, e in CASES)


@pytest.mark.spark
@settings(
    max_examples=2,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking would rerun Spark
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(filters=st.lists(metric_conditions().map(render), min_size=25, max_size=25, unique=True))
def test_spark_agrees_with_python_on_random_metric_filters(spark: Any, filters: list[str]) -> None:
    """Random filters mixing metrics, payload fields and properties, on the Sparkplug
    publications with a few property sets: the same TRUE/FALSE/UNKNOWN in both."""
    batch = [
        (payload, {"Topic": topic, **extra})
        for topic, payload in PUBLICATIONS.values()
        for extra in ({}, {"QoS": 1, "Retain": True, "User.a": "a"})
    ]
    got = spark_matrix(spark, filters, batch, chunk=len(filters))
    expected = [[compile_filter(f).evaluate(p, props) for f in filters] for p, props in batch]
    wrong = [
        (filters[j], batch[i][1], expected[i][j], got[i][j])
        for i in range(len(batch))
        for j in range(len(filters))
        if got[i][j] is not expected[i][j]
    ]
    assert not wrong, f"{len(wrong)} disagreements, e.g. {wrong[:5]}"
