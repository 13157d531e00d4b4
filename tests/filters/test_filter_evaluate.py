"""Python evaluator: the semantic table, the payload model, the API, linear cost."""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Callable

import pytest
from filter_table import CASES, Case

from telemq.filters import Filter, FilterError, Message, compile_filter, parse_payload


@pytest.mark.parametrize("case", CASES, ids=Case.id)
def test_semantic_table(case: Case) -> None:
    f = compile_filter(case.filter)
    assert f.evaluate(case.payload, case.properties) is case.expected
    assert f.matches(case.payload, case.properties) is (case.expected is True)
    # the canonical text means the same
    assert compile_filter(f.text).evaluate(case.payload, case.properties) is case.expected


def test_table_covers_every_operator() -> None:
    text = " ".join(c.filter for c in CASES)
    for word in [
        "=",
        "<>",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        "+",
        "-",
        "*",
        "/",
        "%",
        "BETWEEN",
        "NOT BETWEEN",
        "IN",
        "NOT IN",
        "LIKE",
        "NOT LIKE",
        "ESCAPE",
        "IS NULL",
        "IS NOT NULL",
        "AND",
        "OR",
        "NOT",
        "Properties.",
        "Body",
        "[",
    ]:
        assert word in text, word
    answers = {c.expected for c in CASES}
    assert answers == {True, False, None}


# -- the payload model ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "document"),
    [
        (b'{"a": 1, "b": [true, null, "x"]}', {"a": 1.0, "b": [True, None, "x"]}),
        (b"  [1, 2.5]\n", [1.0, 2.5]),
        (b'"text"', "text"),
        (b"null", None),
        (b"-0", -0.0),
        (b'{"s": "\\ud83d\\ude00"}', {"s": "\U0001f600"}),
        (b"", None),
        (b"\xff", None),
        (b'{"a": 1} {"b": 2}', None),
        (b'{"a": 1, "a": 2}', None),
        (b'{"a": NaN}', None),
        (b"[-Infinity]", None),
        (b'{"a": "\\udc00"}', None),
        (b'{"\\ud800": 1}', None),
        (b'{"a": "\\\\ud800"}', {"a": "\\ud800"}),  # an escaped backslash, not an escape
        (b"[" * 5000 + b"]" * 5000, None),  # too deep for Python: not JSON
    ],
)
def test_parse_payload(payload: bytes, document: object) -> None:
    assert parse_payload(payload) == document


def test_numbers_are_floats_and_booleans_are_not() -> None:
    doc = parse_payload(b'{"i": 1, "f": 1.5, "t": true, "big": 123456789012345678901234567890}')
    assert isinstance(doc, dict)
    assert [type(doc[k]) for k in ("i", "f", "t", "big")] == [float, float, bool, float]


def test_payload_is_parsed_lazily_and_once() -> None:
    only_properties = compile_filter("Properties.QoS = 1")
    message = Message(b"{not json", {"QoS": 1})
    assert only_properties.evaluate_message(message) is True
    assert "document" not in vars(message)  # never parsed
    reads_payload = compile_filter("a = 1")
    assert reads_payload.evaluate_message(Message(b'{"a": 1}')) is True
    message = Message(b'{"a": 1}')
    for f in (reads_payload, compile_filter("a > 0"), compile_filter("a < 2")):
        assert f.evaluate_message(message) is True
    assert vars(message)["document"] == {"a": 1.0}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1.0),
        (1.5, 1.5),
        (True, True),
        ("x", "x"),
        (b"dev", "dev"),
        (bytearray(b"d"), "d"),
        (b"\xff", None),
        (None, None),
        (object(), None),
    ],
)
def test_property_values_are_normalised(value: object, expected: object) -> None:
    assert Message(b"", {"ClientId": value, "Unknown": 1}).properties == {"ClientId": expected}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("application/json", "application/json"),
        ("", ""),
        (b"text/plain", "text/plain"),
        (bytearray(b"x"), "x"),
        (b"\xff", None),
        (None, None),
        (1, None),  # strings in MQTT: a number is no value, not a string
        (True, None),
        (["a"], None),
    ],
)
def test_mqtt5_property_values_are_strings(value: object, expected: object) -> None:
    message = Message(b"", {"ContentType": value, "User.site": value, "User.x": "y"})
    assert message.properties == {"ContentType": expected, "User.site": expected, "User.x": "y"}


def test_mqtt5_properties_are_read_by_flat_keys() -> None:
    f = compile_filter(
        "Properties.ContentType = 'application/json' AND Properties.User.site = 'lab-1'"
    )
    assert f.properties == {"ContentType", "User.site"}
    assert not f.reads_payload
    props = {"Topic": "a", "ContentType": "application/json", "User.site": "lab-1"}
    assert f.evaluate(b"", props) is True
    assert f.matches(b"", props)
    assert f.evaluate(b"", {**props, "User.site": "lab-2"}) is False
    assert f.evaluate(b"", {"Topic": "a"}) is None  # a 3.1.1 publication: both NULL
    assert f.evaluate(b"", {**props, "User": {"site": "lab-1"}}) is True  # "User" is ignored
    assert f.evaluate(b"", {"ContentType": "application/json", "site": "lab-1"}) is None
    # the broker's prepared view (no normalising copy) reads the same keys
    assert f.evaluate_message(Message.prepared(b"", props)) is True
    assert compile_filter("Properties.User.site IS NULL").evaluate(b"", props) is False
    assert compile_filter("Properties.User.Site IS NULL").evaluate(b"", props) is True


def test_payload_types_accepted() -> None:
    f = compile_filter("a = 1")
    for payload in (b'{"a": 1}', bytearray(b'{"a": 1}'), memoryview(b'{"a": 1}')):
        assert f.evaluate(payload) is True
    assert f.evaluate(b'{"a": 1}', None) is True
    assert f.evaluate(b'{"a": 1}', {}) is True


# -- the Filter object ----------------------------------------------------------------


def test_filter_attributes() -> None:
    f = compile_filter(
        "temp > 30 AND site.name LIKE 'Lab%' OR Body[0] = 1 OR Properties.QoS = 1"
        " OR Body.in IS NULL OR Body = 2"
    )
    assert f.fields == {"temp", "site.name", "Body[0]", "Body.in", "Body"}
    assert f.properties == {"QoS"}
    h = compile_filter("Properties.User.site = 'x' OR Properties.ContentType IS NULL")
    assert h.properties == {"User.site", "ContentType"} and h.fields == frozenset()
    assert f.reads_payload
    g = compile_filter("Properties.Topic LIKE 'a/%'")
    assert g.fields == frozenset() and not g.reads_payload
    # ESQL's aliases read properties, never the payload (it need not be parsed)
    u = compile_filter("Root.MQMD.UserIdentifier = 'a' AND Root.Properties.User.site = 'b'")
    assert u.properties == {"UserId", "User.site"} and u.fields == frozenset()
    assert not u.reads_payload
    assert u == compile_filter("Properties.UserId = 'a' AND Properties.User.site = 'b'")
    r = compile_filter("Body.Root.MQMD.UserIdentifier = 'a'")
    assert r.fields == {"Body.Root.MQMD.UserIdentifier"} and r.properties == frozenset()
    assert isinstance(f, Filter)


def test_filter_equality_hash_repr_pickle() -> None:
    f = compile_filter("a=1 and (b=2)")
    g = compile_filter("a = 1 AND b = 2")
    assert f == g and hash(f) == hash(g) and len({f, g}) == 1
    assert f != compile_filter("a = 1 OR b = 2")
    assert repr(f) == "compile_filter('a = 1 AND b = 2')"
    assert str(f) == f.text == "a = 1 AND b = 2"
    alias = compile_filter("Root.MQMD.UserIdentifier = 'alice'")
    same = compile_filter("Properties.UserId = 'alice'")
    assert alias == same and hash(alias) == hash(same) and alias.text == same.text
    assert alias.source == "Root.MQMD.UserIdentifier = 'alice'"
    copy = pickle.loads(pickle.dumps(f))
    assert copy == f and copy.evaluate(b'{"a": 1, "b": 2}') is True


def test_invalid_text_raises_filter_error_3150() -> None:
    with pytest.raises(FilterError) as info:
        compile_filter("temp >")
    assert info.value.reason == 3150
    assert info.value.position == 6
    assert isinstance(info.value, Exception)


def test_matches_only_on_true() -> None:
    f = compile_filter("a > 1")
    assert f.matches(b'{"a": 2}')
    assert not f.matches(b'{"a": 0}')
    assert not f.matches(b'{"a": "2"}')  # UNKNOWN rejects too


# -- linear cost ------------------------------------------------------------------------


def count_calls(fn: Callable[[], object]) -> int:
    """Python function calls made by `fn` (a machine-independent cost measure)."""
    calls = 0

    def profiler(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(profiler)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def alternating(depth: int, nested: bool) -> str:
    """`depth` comparisons joined by alternating OR/AND, nested or flat."""
    if nested:
        text = f"f{depth} = {depth}"
        for i in range(depth - 1, -1, -1):
            word = "OR" if i % 2 else "AND"
            text = f"(f{i} = {i} {word} {text})"
        return text
    return " OR ".join(f"f{i} = {i} AND f{i + 1} = {i + 1}" for i in range(0, depth, 2))


def test_deep_filter_costs_like_its_flat_equivalent() -> None:
    payload = json.dumps({f"f{i}": i for i in range(100)}).encode()
    deep_text = alternating(63, nested=True)
    flat_text = alternating(63, nested=False)
    assert deep_text.count("(") == 63
    compile_deep = count_calls(lambda: compile_filter(deep_text))
    compile_flat = count_calls(lambda: compile_filter(flat_text))
    assert compile_deep < 2 * compile_flat
    deep = compile_filter(deep_text)
    flat = compile_filter(flat_text)
    # with every comparison UNKNOWN nothing short-circuits: both visit all 64 comparisons
    eval_deep = count_calls(lambda: deep.evaluate(b"{}"))
    eval_flat = count_calls(lambda: flat.evaluate(b"{}"))
    assert eval_flat > 64
    assert eval_deep < 2 * eval_flat
    assert deep.evaluate(b"{}") is None and flat.evaluate(b"{}") is None
    assert deep.evaluate(payload) is True and flat.evaluate(payload) is True


def test_parentheses_cost_nothing() -> None:
    flat = compile_filter("a = 1 AND b = 2")
    deep = compile_filter("(" * 30 + "a = 1 AND (" * 1 + "(" * 32 + "b = 2" + ")" * 63)
    assert deep == flat
    payload = b'{"a": 1, "b": 2}'
    assert count_calls(lambda: deep.evaluate(payload)) == count_calls(
        lambda: flat.evaluate(payload)
    )


def test_not_chains_cost_at_most_one_not() -> None:
    payload = b'{"a": true}'
    f64 = compile_filter("NOT " * 64 + "a")
    f63 = compile_filter("NOT " * 63 + "a")
    f1 = compile_filter("NOT a")
    assert f64.evaluate(payload) is True and f63.evaluate(payload) is False
    assert count_calls(lambda: f63.evaluate(payload)) == count_calls(lambda: f1.evaluate(payload))


def test_compile_cost_grows_linearly() -> None:
    def cost(n: int) -> int:
        text = " OR ".join(f"(f{i} = {i} AND s{i} LIKE 'x%' AND v{i} + 1 > 2)" for i in range(n))
        return count_calls(lambda: compile_filter(text))

    small, large = cost(50), cost(400)
    assert large < 10 * small  # 8x the size: linear is 8x, quadratic would be 64x
