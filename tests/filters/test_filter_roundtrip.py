"""Property tests (Hypothesis): the printer round-trips; no input breaks the front end."""

from __future__ import annotations

from filter_strategies import conditions, filter_texts, messages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemq.filters import FilterError, compile_filter, parse
from telemq.filters import ast as A
from telemq.filters.evaluate import compile_condition
from telemq.filters.message_view import Message
from telemq.filters.render import render


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=filter_texts())
def test_printer_round_trip(text: str) -> None:
    """``str(parse(text))`` re-parses to an equal AST, and printing is idempotent."""
    tree = parse(text)
    printed = str(tree)
    again = parse(printed)
    assert again == tree
    assert str(again) == printed
    assert compile_filter(printed) == compile_filter(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=conditions(3), message=st.lists(messages, min_size=1, max_size=4))
def test_printed_text_means_the_tree(
    tree: A.Node, message: list[tuple[bytes, dict[str, object]]]
) -> None:
    """Generated trees need not be canonical; their text must still mean the same thing."""
    direct = compile_condition(tree)
    compiled = compile_filter(render(tree))
    for payload, props in message:
        assert compiled.evaluate(payload, props) is direct(Message(payload, props))


ALIASES = st.sampled_from(
    [
        ("Root.MQMD.UserIdentifier", "Properties.UserId"),
        ("Root.Properties.ClientId", "Properties.ClientId"),
        ("Root.Properties.User.a", "Properties.User.a"),
        ("Root.Properties.Retain", "Properties.Retain"),
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=filter_texts(), alias=ALIASES)
def test_alias_prints_as_the_telemq_name(text: str, alias: tuple[str, str]) -> None:
    """A filter written with ESQL's names is the filter written with telemq's: the same
    AST, the same canonical text (which spells the telemq name), and it round-trips."""
    written, name = alias
    esql = compile_filter(f"({text}) OR {written} IS NOT NULL")
    telemq = compile_filter(f"({text}) OR {name} IS NOT NULL")
    assert esql == telemq and esql.text == telemq.text
    assert esql.text.endswith(f" OR {name} IS NOT NULL")
    assert compile_filter(esql.text) == esql


TOKENS = [
    "a",
    "b.c",
    "x[0]",
    "Body",
    "Properties.Topic",
    "Properties.Nope",
    "Root",
    "Root.MQMD.UserIdentifier",
    "Root.Properties.UserId",
    "Root.Body",
    "MQMD",
    "1",
    "-",
    "+",
    "2.5",
    "1e3",
    "'s'",
    "'it''s'",
    "'",
    "(",
    ")",
    "[",
    "]",
    ",",
    ".",
    "=",
    "<>",
    "<",
    ">=",
    "*",
    "/",
    "%",
    "AND",
    "OR",
    "NOT",
    "BETWEEN",
    "IN",
    "LIKE",
    "ESCAPE",
    "IS",
    "NULL",
    "TRUE",
    "FALSE",
    "&",
    '"',
    "\n",
    " ",
]


@settings(max_examples=800, deadline=None)
@given(parts=st.lists(st.sampled_from(TOKENS), max_size=14), glue=st.sampled_from([" ", ""]))
def test_any_text_compiles_or_raises_filter_error(parts: list[str], glue: str) -> None:
    text = glue.join(parts)
    try:
        f = compile_filter(text)
    except FilterError as err:
        assert err.reason == 3150
        assert 0 <= err.position <= len(text)
        assert str(err)
        return
    assert compile_filter(f.text) == f
    assert f.evaluate(b'{"a": 1}') in (True, False, None)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40))
def test_arbitrary_unicode_text(text: str) -> None:
    try:
        f = compile_filter(text)
    except FilterError as err:
        assert 0 <= err.position <= len(text)
        return
    assert compile_filter(f.text) == f
