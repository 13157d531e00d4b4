"""Hypothesis strategies: random filter ASTs (as canonical text) and random publications.

Filters and documents share a small vocabulary of paths and values, so comparisons hit
often and every type pairing (number/string/boolean/null/object/array/missing) occurs.

Numbers stay where Python and Spark are both exact and agree: integers within +-2**53 and
short decimals, plus a few huge values to exercise overflow (infinity -> NULL).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from telemq.filters import ast as A
from telemq.filters.render import render

# -- filters --------------------------------------------------------------------------

FIELD_PATHS: list[tuple[str | int, ...]] = [
    ("a",),
    ("b",),
    ("s",),
    ("t",),
    ("o", "x"),
    ("o", "y"),
    ("arr", 0),
    ("arr", 1),
    ("arr", 0, "x"),
    (),
    (0,),
    (0, "a"),
    ("é",),
    ("in",),
    ("Root",),  # a correlation name: printed Body.Root
    ("Root", "MQMD", "UserIdentifier"),
]
PROPERTIES = [
    *A.PROPERTY_NAMES,
    "User.a",
    "User.b",
    "User.in",  # a keyword after the dot
    "User.é",
    "User.zz",  # in no message
]
NUMBERS: list[int | float] = [
    0,
    1,
    2,
    3,
    -1,
    -2,
    0.5,
    -1.5,
    2.25,
    10,
    1e300,
    1e-3,
    1e308,
    9007199254740993,
    -9007199254740992,
]
STRINGS = ["", "a", "b", "ab", "ba", "A", "é", "😀", "%", "_", "'", "a\nb", "5", "x/y", "aé"]

numbers = st.one_of(st.integers(-4, 4), st.sampled_from(NUMBERS)).map(lambda v: A.Number(v))
strings = st.sampled_from(STRINGS).map(lambda v: A.String(v))
booleans = st.booleans().map(lambda v: A.Boolean(v))
literals = st.one_of(numbers, strings, booleans, st.just(A.Null()))
fields = st.sampled_from(FIELD_PATHS).map(lambda p: A.Field(p))
properties = st.sampled_from(PROPERTIES).map(lambda n: A.Property(n))  # User.<name> too
leaves = st.one_of(literals, fields, fields, properties)
METRIC_NAMES = ["Pressure", "On", "Mode", "a b", "it's", "Inputs/Flow", "é", "pressure"]
metrics = st.sampled_from(METRIC_NAMES).map(lambda n: A.Metric(n))
"""Sparkplug B metrics (``Metric['<name>']``). Not among `leaves`: the JSON differential
tests stay free of Spark's decoding UDF; test_filter_sparkplug.py draws them."""

COMPARISONS = list(A.COMPARISONS)


def like_patterns() -> st.SearchStrategy[tuple[str, str | None]]:
    """(pattern, escape): valid patterns with wildcards, regex metacharacters, escapes."""
    plain = st.lists(
        st.sampled_from(["a", "b", "%", "_", ".", "*", "é", "😀", "\n", "'"]), max_size=6
    ).map("".join)
    escaped = st.lists(
        st.sampled_from(["a", "b", "%", "_", "!%", "!_", "!!", "é", "."]), max_size=6
    ).map("".join)
    return st.one_of(plain.map(lambda p: (p, None)), escaped.map(lambda p: (p, "!")))


@st.composite
def values(draw: st.DrawFn, depth: int) -> A.Node:
    """A value expression: a leaf, arithmetic, a sign, or (rarely) a condition."""
    if depth <= 0:
        return draw(leaves)
    kind = draw(st.sampled_from(["leaf", "leaf", "leaf", "arith", "arith", "unary", "cond"]))
    if kind == "leaf":
        return draw(leaves)
    if kind == "arith":
        ops = (
            st.sampled_from(["+", "-"]) if draw(st.booleans()) else st.sampled_from(["*", "/", "%"])
        )
        rest = draw(st.lists(st.tuples(ops, values(depth - 1)), min_size=1, max_size=2))
        return A.Arith(draw(values(depth - 1)), tuple(rest))
    if kind == "unary":
        operand = draw(values(depth - 1))
        if isinstance(operand, A.Number):
            return operand
        return A.Unary(draw(st.sampled_from(["-", "+"])), operand)
    return draw(conditions(depth - 1))


@st.composite
def conditions(draw: st.DrawFn, depth: int) -> A.Node:
    """A condition: predicates, AND/OR/NOT, boolean fields and literals."""
    kinds = [
        "field-cmp",
        "field-cmp",
        "field-cmp",
        "cmp",
        "between",
        "in",
        "like",
        "isnull",
        "field",
        "literal",
    ]
    if depth > 0:
        kinds += ["and", "and", "or", "or", "not", "cmp"]
    kind = draw(st.sampled_from(kinds))
    sub = depth - 1
    if kind == "field-cmp":  # the common shape: a field or property against a value
        subject = draw(st.one_of(fields, fields, properties))
        other = draw(st.one_of(literals, values(sub)))
        pair = (subject, other) if draw(st.booleans()) else (other, subject)
        return A.Comparison(draw(st.sampled_from(COMPARISONS)), *pair)
    if kind == "cmp":
        return A.Comparison(
            draw(st.sampled_from(COMPARISONS)), draw(values(sub)), draw(values(sub))
        )
    if kind == "between":
        return A.Between(
            draw(st.one_of(fields, values(sub))),
            draw(values(sub)),
            draw(values(sub)),
            draw(st.booleans()),
        )
    if kind == "in":
        items = draw(st.lists(literals, min_size=1, max_size=4))
        return A.In(draw(st.one_of(fields, values(sub))), tuple(items), draw(st.booleans()))
    if kind == "like":
        pattern, escape = draw(like_patterns())
        return A.Like(
            draw(st.one_of(fields, properties, values(sub))), pattern, escape, draw(st.booleans())
        )
    if kind == "isnull":
        return A.IsNull(draw(values(sub)), draw(st.booleans()))
    if kind == "field":
        return draw(st.one_of(fields, st.just(A.Property("Retain"))))
    if kind == "literal":
        return draw(st.one_of(booleans, st.just(A.Null())))
    if kind == "not":
        return A.Not(draw(conditions(sub)))
    operands = tuple(draw(st.lists(conditions(sub), min_size=2, max_size=3)))
    return A.And(operands) if kind == "and" else A.Or(operands)


def filter_texts(depth: int = 3) -> st.SearchStrategy[str]:
    """Random valid filters, as canonical text."""
    return conditions(depth).map(render)


# -- publications ---------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-4, 4),
    st.integers(-(2**53), 2**53),
    st.sampled_from([0.5, -1.5, 2.25, 1e300, 1e-3, 1e308, -0.0, 0.1, 3.0, 1e20]),
    st.sampled_from(STRINGS),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["x", "y", "a"]), inner, max_size=3),
    ),
    max_leaves=5,
)
mostly_scalars = st.one_of(json_scalars, json_scalars, json_scalars, json_values)
documents = st.fixed_dictionaries(
    {},
    optional={
        "a": mostly_scalars,
        "b": mostly_scalars,
        "s": mostly_scalars,
        "t": mostly_scalars,
        "o": json_values,
        "arr": json_values,
        "é": mostly_scalars,
        "in": mostly_scalars,
        "Root": json_values,
    },
)
INVALID_PAYLOADS = [
    b"",
    b"{",
    b"\xff\xfe",
    b'{"a": 1} x',
    b'{"a": 1, "a": 2}',
    b'{"a": 1}]',
    b'{"a": NaN}',
    b'{"s": "\\ud800"}',
    b"not json",
    b'{"a": 1}, {"b": 2}',
    b"\xef\xbb\xbf{}",
]


@st.composite
def payloads(draw: st.DrawFn) -> bytes:
    """JSON objects mostly; sometimes a top-level array or scalar, sometimes not JSON."""
    kind = draw(st.sampled_from(["object"] * 6 + ["array", "scalar", "invalid"]))
    if kind == "invalid":
        return draw(st.sampled_from(INVALID_PAYLOADS))
    doc: Any
    if kind == "object":
        doc = draw(documents)
    elif kind == "array":
        doc = draw(st.lists(st.one_of(documents, json_values), max_size=2))
    else:
        doc = draw(json_values)
    ascii_only = draw(st.booleans())
    text = json.dumps(doc, ensure_ascii=ascii_only, indent=draw(st.sampled_from([None, 1])))
    return text.encode("utf-8")


base_properties = st.fixed_dictionaries(
    {},
    optional={
        "Topic": st.sampled_from(["a/b", "x/y", "", "a"]),
        "QoS": st.integers(0, 2),
        "Retain": st.booleans(),
        "ClientId": st.sampled_from(["a", "b", "dev-1"]),
        "UserId": st.sampled_from(["a", "alice", ""]),
        "SubPoint": st.sampled_from(["", "a", "5"]),
        # MQTT 5.0; absent for every 3.1.1 publication
        "ContentType": st.sampled_from(["a", "ab", "", "application/json", "é"]),
        # The origin broker (docs/network.md §6); absent in journal rows before schema 6
        "Broker": st.sampled_from(["telemq", "edge-1", "a"]),
    },
)
user_properties = st.one_of(
    st.just({}),  # none (the journal's map is NULL)
    st.fixed_dictionaries(  # some of those filters read, maybe only others
        {},
        optional={
            "User.a": st.sampled_from(["a", "b", "", "5", "%"]),
            "User.b": st.sampled_from(["ab", "ba", "a\nb", "😀"]),
            "User.in": st.sampled_from(["a", "5"]),
            "User.é": st.sampled_from(["é", "aé"]),
            "User.other": st.sampled_from(["a", "x"]),  # read by no filter
        },
    ),
)
message_properties = st.builds(lambda p, u: {**p, **u}, base_properties, user_properties)
"""The properties mapping of `Filter.evaluate`: fixed names, ``User.<name>`` keys."""

messages = st.tuples(payloads(), message_properties)
