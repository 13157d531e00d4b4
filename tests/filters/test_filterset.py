"""FilterSet: many filters against one message (registration, sharing, the index)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemq.filters import FilterError, FilterSet, compile_filter
from telemq.filters import message_view as message_module
from telemq.filters.message_view import Message


def test_registration() -> None:
    fs: FilterSet[str] = FilterSet()
    f = fs.add("s1", "temp > 30")
    assert f == compile_filter("temp > 30")
    fs.add("s2", compile_filter("temp>30"))
    fs.add("s3", "device = 'd1'")
    assert len(fs) == 3 and "s1" in fs and "nope" not in fs
    assert set(fs) == {"s1", "s2", "s3"}
    assert fs.distinct == 2 and fs.indexed == 2
    assert fs.get("s3") == compile_filter("device = 'd1'") and fs.get("x") is None
    fs.remove("s1")
    assert fs.distinct == 2
    fs.remove("s2")
    assert fs.distinct == 1
    with pytest.raises(KeyError):
        fs.remove("s2")
    fs.discard("s2")
    fs.discard("s3")
    assert len(fs) == 0 and fs.distinct == 0 and fs.indexed == 0
    assert fs.matching(b'{"device": "d1"}') == set()


def test_add_replaces_and_rejects_invalid_filters() -> None:
    fs: FilterSet[int] = FilterSet()
    fs.add(1, "a = 1")
    fs.add(1, "a = 2")
    assert fs.matching(b'{"a": 2}') == {1}
    assert fs.matching(b'{"a": 1}') == set()
    with pytest.raises(FilterError) as info:
        fs.add(2, "a = ")
    assert info.value.reason == 3150
    assert 2 not in fs and len(fs) == 1


def test_matching_returns_keys_whose_filter_is_true() -> None:
    fs: FilterSet[str] = FilterSet()
    fs.add("hot", "temp > 30")
    fs.add("hot-too", "temp > 30")
    fs.add("lab", "site.name LIKE 'Lab%'")
    fs.add("d1", "device = 'd1' AND temp > 0")
    fs.add("d-any", "device IN ('d1', 'd2')")
    fs.add("qos", "Properties.QoS >= 1")
    fs.add("unknown", "temp = 'x'")
    payload = b'{"temp": 31, "site": {"name": "Lab 2"}, "device": "d1"}'
    assert fs.matching(payload, {"QoS": 1}) == {"hot", "hot-too", "lab", "d1", "d-any", "qos"}
    assert fs.matching(b'{"device": "d2", "temp": 5}') == {"d-any"}
    answers = fs.evaluate(b'{"device": "d2", "temp": 5}')
    assert answers == {
        "hot": False,
        "hot-too": False,
        "lab": None,
        "d1": False,
        "d-any": True,
        "qos": None,
        "unknown": None,
    }


def test_payload_is_parsed_once_per_message(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    real = message_module.parse_payload

    def counting(payload: bytes) -> object:
        nonlocal calls
        calls += 1
        return real(payload)

    monkeypatch.setattr(message_module, "parse_payload", counting)
    fs: FilterSet[int] = FilterSet()
    for i in range(50):
        fs.add(i, f"a > {i} OR b.c = {i}")
        fs.add(100 + i, f"device = 'd{i}'")
    assert fs.matching(b'{"a": 10, "device": "d3"}') == {*range(10), 103}
    assert calls == 1
    only_properties: FilterSet[int] = FilterSet()
    only_properties.add(1, "Properties.Topic = 'x'")
    assert only_properties.matching(b"{}", {"Topic": "x"}) == {1}
    assert calls == 1  # no filter reads the payload: it is never parsed


def test_matching_charged_spends_each_owners_budget_apart() -> None:
    """Time is charged to the owners of the keys: one past its budget loses its other keys,
    a filter shared with an owner within budget is still evaluated, for that owner only."""
    fs: FilterSet[str] = FilterSet()
    owners = {"a1": "alice", "a2": "alice", "a3": "alice", "shared-a": "alice"}
    fs.add("a1", "n = 1 OR m = 1")  # unindexed: evaluated before the indexed `n = 1`
    fs.add("a2", "n = 1 OR m = 2")
    fs.add("a3", "n = 1 OR m = 3")
    fs.add("shared-a", "n = 1")
    fs.add("shared-b", "n = 1")
    owners["shared-b"] = "bob"
    message = Message(b'{"n": 1}', None)
    matched, skipped = fs.matching_charged(message, 1e-9, owners)
    assert matched == {"a1", "shared-b"}
    assert skipped == {"alice": 3}
    matched, skipped = fs.matching_charged(message, 60.0, owners)
    assert matched == set(owners) and skipped == {}
    assert fs.matching_charged(message, 0.0, owners) == (set(owners), {})  # no bound


def test_matching_within_evaluates_one_filter_whatever_the_deadline() -> None:
    fs: FilterSet[int] = FilterSet()
    for n in range(3):
        fs.add(n, f"n = 1 OR m = {n}")
    assert fs.matching_within(Message(b'{"n": 1}', None), 1e-9) == ({0}, 2)


def test_index_respects_types() -> None:
    fs: FilterSet[str] = FilterSet()
    fs.add("one", "a = 1")
    fs.add("true", "a = TRUE")
    fs.add("str", "a = '1'")
    fs.add("in", "a IN (1, 'x', NULL)")
    fs.add("prop", "Properties.Retain = TRUE AND a IS NULL")
    assert fs.indexed == 5
    assert fs.matching(b'{"a": 1.0}') == {"one", "in"}
    assert fs.matching(b'{"a": true}') == {"true"}
    assert fs.matching(b'{"a": "1"}') == {"str"}
    assert fs.matching(b'{"a": "x"}') == {"in"}
    assert fs.matching(b'{"a": {"b": 1}}') == set()
    assert fs.matching(b"{}", {"Retain": True}) == {"prop"}
    assert fs.matching(b"{}", {"Retain": 1}) == set()


def test_literal_on_the_left_is_indexed_too() -> None:
    fs: FilterSet[str] = FilterSet()
    fs.add("x", "'d1' = device AND n > 1")
    assert fs.indexed == 1
    assert fs.matching(b'{"device": "d1", "n": 2}') == {"x"}


def test_range_index_bounds() -> None:
    fs: FilterSet[str] = FilterSet()
    fs.add("gt", "temp > 30")
    fs.add("ge", "temp >= 30")
    fs.add("lt", "30 > temp")
    fs.add("le", "temp <= 30")
    fs.add("between", "temp BETWEEN 20 AND 30 AND ok")
    fs.add("qos", "Properties.QoS >= 1")
    fs.add("eq-wins", "temp > 0 AND device = 'd1'")
    assert fs.indexed == 7
    assert fs.matching(b'{"temp": 30, "ok": true}') == {"ge", "le", "between"}
    assert fs.matching(b'{"temp": 30.5}') == {"gt", "ge"}
    assert fs.matching(b'{"temp": 20, "ok": true}') == {"lt", "le", "between"}
    assert fs.matching(b'{"temp": 1e400, "device": "d1"}') == {"gt", "ge", "eq-wins"}
    assert fs.matching(b'{"temp": "31"}') == set()
    assert fs.matching(b'{"temp": true}') == set()
    assert fs.matching(b"{}", {"QoS": 2}) == {"qos"}
    for key in ("gt", "ge", "lt", "le", "between", "qos", "eq-wins"):
        fs.remove(key)
    assert fs.indexed == 0 and fs.matching(b'{"temp": 30}') == set()


def test_mqtt5_properties_are_indexed() -> None:
    fs: FilterSet[str] = FilterSet()
    fs.add("site", "Properties.User.site = 'lab-1'")
    fs.add("sites", "Properties.User.site IN ('lab-1', 'lab-2') AND temp > 30")
    fs.add("json", "Properties.ContentType = 'application/json'")
    fs.add("both", "Properties.ContentType = 'text/plain' AND Properties.User.zone = 'z1'")
    fs.add("absent", "Properties.User.site IS NULL")
    fs.add("order", "Properties.User.site > 'a'")  # strings: no index, evaluated each time
    assert fs.indexed == 4 and fs.distinct == 6
    props = {"ContentType": "application/json", "User.site": "lab-1", "User.zone": "z1"}
    assert fs.matching(b'{"temp": 31}', props) == {"site", "sites", "json", "order"}
    lab2 = {**props, "User.site": "lab-2"}
    assert fs.matching(b'{"temp": 31}', lab2) == {"sites", "json", "order"}
    text = {**props, "ContentType": "text/plain"}
    assert fs.matching(b'{"temp": 1}', text) == {"site", "both", "order"}
    assert fs.matching(b"{}", {"Topic": "a"}) == {"absent"}
    assert fs.matching(b"{}", {"User.site": 1}) == {"absent"}  # not a string: NULL
    assert fs.evaluate(b"{}", {"User.site": "lab-1"}) == {
        "site": True,
        "sites": None,
        "json": None,
        "both": None,
        "absent": False,
        "order": True,
    }


def test_esql_aliases_share_and_are_indexed() -> None:
    """An alias is the filter it stands for: one distinct filter, filed in the same index."""
    fs: FilterSet[str] = FilterSet()
    fs.add("esql", "Root.MQMD.UserIdentifier = 'alice'")
    fs.add("mqtt", "Properties.UserId = 'alice'")
    fs.add("both", "Root.MQMD.UserIdentifier IN ('alice', 'bob') AND Root.Properties.QoS >= 1")
    fs.add("payload", "Body.Root.MQMD.UserIdentifier = 'alice'")
    assert fs.distinct == 3 and fs.indexed == 3
    alice = {"UserId": "alice", "QoS": 1}
    assert fs.matching(b"not json", alice) == {"esql", "mqtt", "both"}
    assert fs.matching(b"{}", {"UserId": "bob", "QoS": 1}) == {"both"}
    doc = b'{"Root": {"MQMD": {"UserIdentifier": "alice"}}}'
    assert fs.matching(doc, {"UserId": "carol"}) == {"payload"}


devices = [f"d{i}" for i in range(6)]
filter_texts = st.one_of(
    st.builds(
        lambda d, t: f"device = '{d}' AND temp > {t}", st.sampled_from(devices), st.integers(-2, 40)
    ),
    st.builds(
        lambda ds: f"device IN ({', '.join(repr(d) for d in ds)})",
        st.lists(st.sampled_from(devices), min_size=1, max_size=3),
    ),
    st.builds(lambda t: f"temp BETWEEN {t} AND {t + 10}", st.integers(-5, 40)),
    st.builds(
        lambda op, t: f"temp {op} {t}",
        st.sampled_from(["<", "<=", ">", ">="]),
        st.sampled_from([-1, 0, 1, 1.5, 10, 40]),
    ),
    st.builds(
        lambda op, t: f"{t} {op} temp AND ok", st.sampled_from(["<", ">="]), st.integers(0, 10)
    ),
    st.builds(lambda q: f"Properties.QoS > {q}", st.integers(-1, 2)),
    st.builds(lambda q: f"Properties.QoS = {q}", st.integers(0, 2)),
    st.builds(
        lambda q, d: f"Properties.QoS = {q} OR device = '{d}'",
        st.integers(0, 2),
        st.sampled_from(devices),
    ),
    st.builds(
        lambda v: f"temp = {v} AND NOT (device = 'd0')",
        st.sampled_from(["1", "TRUE", "'1'", "1.5"]),
    ),
    # Ranges of many widths (the stabbing scan bounds itself by the widest), mixed with
    # one-sided ones, and filters with two equality conjuncts (the index picks one; the
    # other is the residual evaluated for candidates).
    st.builds(
        lambda t, w: f"temp BETWEEN {t} AND {t + w}",
        st.integers(-5, 40),
        st.sampled_from([0, 0.5, 3, 100]),
    ),
    st.builds(
        lambda t, w: f"temp BETWEEN {t} AND {t + w} AND device <> 'd1'",
        st.integers(-5, 40),
        st.sampled_from([0, 2]),
    ),
    st.builds(
        lambda t, d: f"temp = {t} AND device = '{d}'", st.integers(-5, 50), st.sampled_from(devices)
    ),
    st.builds(
        lambda d, t: f"device IN ('{d}', 'd9') AND temp IN ({t}, {t + 1}) AND ok",
        st.sampled_from(devices),
        st.integers(-5, 50),
    ),
    st.just("device IS NULL"),
    st.just("ok AND device IN ('d1', NULL)"),
    # MQTT 5.0 properties: indexed like the others, NULL when the publication lacks them
    st.builds(lambda d: f"Properties.User.device = '{d}'", st.sampled_from(devices)),
    st.builds(
        lambda d, t: f"Properties.User.device IN ('{d}', 'd9') AND temp > {t}",
        st.sampled_from(devices),
        st.integers(-2, 40),
    ),
    st.builds(
        lambda c: f"Properties.ContentType = '{c}' OR Properties.User.device IS NULL",
        st.sampled_from(["a", "b"]),
    ),
    st.builds(lambda c: f"Properties.ContentType = '{c}' AND ok", st.sampled_from(["a", "b"])),
)
payloads = st.builds(
    lambda device, temp, ok: json.dumps(
        {k: v for k, v in (("device", device), ("temp", temp), ("ok", ok)) if v != "absent"}
    ).encode(),
    st.sampled_from([*devices, 1, None, "absent"]),
    st.one_of(st.integers(-5, 50), st.sampled_from([1.5, True, "1", None, "absent"])),
    st.sampled_from([True, False, None, "absent"]),
)


@settings(max_examples=300, deadline=None)
@given(
    registrations=st.lists(st.tuples(st.integers(0, 30), filter_texts), min_size=1, max_size=40),
    removals=st.lists(st.integers(0, 30), max_size=20),
    messages=st.lists(
        st.tuples(
            payloads,
            st.fixed_dictionaries(
                {"QoS": st.integers(0, 2)},
                optional={
                    "ContentType": st.sampled_from(["a", "b"]),
                    "User.device": st.sampled_from(devices),
                },
            ),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_matching_equals_evaluating_every_filter(
    registrations: list[tuple[int, str]],
    removals: list[int],
    messages: list[tuple[bytes, dict[str, object]]],
) -> None:
    fs: FilterSet[int] = FilterSet()
    for key, text in registrations:
        fs.add(key, text)
    for key in removals:
        fs.discard(key)
    for payload, props in messages:
        expected = {k for k, v in fs.evaluate(payload, props).items() if v is True}
        assert fs.matching(payload, props) == expected
        brute = {k for k in fs if compile_filter(str(fs.get(k))).matches(payload, props)}
        assert expected == brute
