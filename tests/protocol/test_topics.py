"""Topic names, topic filters and wildcard matching (MQTT 3.1.1 §4.7)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packet_strategies import topic_filters, topic_names

from telemq.protocol import (
    is_wildcard_filter,
    topic_filter_error,
    topic_matches,
    topic_name_error,
)

# ---------------------------------------------------------------------------
# Validation

VALID_NAMES = [
    "a",
    "/",
    "//",
    "a/b",
    "a//b",
    "/a",
    "a/",
    " ",
    "$SYS/broker/uptime",
    "sport/tennis/player1",
    "Accounts payable",
    "caf\u00e9/\u00fc\u00f1\u00ee",
    "\U0001f600",
    "x" * 65535,
    "\u00e9" * 32767,  # 65,534 bytes
    "a\u00a0b\u2028c\u00ad",  # not `str.isprintable`, but not control characters either
]

INVALID_NAMES = [
    ("", "empty topic name"),
    ("a\x00b", "U+0000 in topic name"),
    ("\x00", "U+0000 in topic name"),
    ("a\x01", "U+0001 in topic name"),
    ("tab\there", "U+0009 in topic name"),
    ("a/\x1f", "U+001F in topic name"),
    ("del\x7f", "U+007F in topic name"),
    ("c1\x9f", "U+009F in topic name"),
    ("a/+", "wildcard in topic name"),
    ("+", "wildcard in topic name"),
    ("#", "wildcard in topic name"),
    ("a/#", "wildcard in topic name"),
    ("sport+", "wildcard in topic name"),
    ("a#b", "wildcard in topic name"),
    ("x" * 65536, "longer than 65,535 bytes"),
    ("\u00e9" * 32768, "longer than 65,535 bytes"),  # 32,768 characters, 65,536 bytes
    ("\U0001f600" * 16384, "longer than 65,535 bytes"),  # 16,384 characters, 65,536 bytes
]

VALID_FILTERS = [
    "#",
    "+",
    "/",
    "a",
    "a/b",
    "a//b",
    "/+",
    "+/",
    "+/+",
    "a/#",
    "a/+/b",
    "+/#",
    "/#",
    "+/+/#",
    "sport/tennis/+",
    "sport/tennis/player1/#",
    "$SYS/#",
    "$SYS/+/clients",
    "x" * 65535,
]

INVALID_FILTERS = [
    ("", "empty topic filter"),
    ("a\x00", "U+0000 in topic filter"),
    ("#\x00", "U+0000 in topic filter"),
    ("a/\n/#", "U+000A in topic filter"),
    ("+/\x85", "U+0085 in topic filter"),
    ("a#", "'#' must be a whole last level"),
    ("#a", "'#' must be a whole last level"),
    ("#/a", "'#' must be a whole last level"),
    ("a/#/b", "'#' must be a whole last level"),
    ("sport/tennis#", "'#' must be a whole last level"),
    ("##", "'#' must be a whole last level"),
    ("+#", "'#' must be a whole last level"),
    ("a+", "'+' must fill a whole level"),
    ("+a", "'+' must fill a whole level"),
    ("sport+", "'+' must fill a whole level"),
    ("a/b+/c", "'+' must fill a whole level"),
    ("++", "'+' must fill a whole level"),
    ("x" * 65536, "longer than 65,535 bytes"),
    ("\u00e9" * 32768, "longer than 65,535 bytes"),
]


@pytest.mark.parametrize("name", VALID_NAMES, ids=lambda name: repr(name[:20]))
def test_valid_topic_names(name: str) -> None:
    assert topic_name_error(name) is None


@pytest.mark.parametrize(("name", "message"), INVALID_NAMES, ids=lambda value: repr(value[:20]))
def test_invalid_topic_names(name: str, message: str) -> None:
    error = topic_name_error(name)
    assert error is not None
    assert message in error


@pytest.mark.parametrize("topic_filter", VALID_FILTERS, ids=lambda value: repr(value[:20]))
def test_valid_topic_filters(topic_filter: str) -> None:
    assert topic_filter_error(topic_filter) is None


@pytest.mark.parametrize(
    ("topic_filter", "message"), INVALID_FILTERS, ids=lambda value: repr(value[:20])
)
def test_invalid_topic_filters(topic_filter: str, message: str) -> None:
    error = topic_filter_error(topic_filter)
    assert error is not None
    assert message in error


@pytest.mark.parametrize(
    ("topic_filter", "expected"),
    [("a/b", False), ("#", True), ("+", True), ("a/+/b", True), ("a/#", True), ("$SYS", False)],
)
def test_is_wildcard_filter(topic_filter: str, expected: bool) -> None:
    assert is_wildcard_filter(topic_filter) is expected


@settings(max_examples=200, deadline=None)
@given(topic_names())
def test_generated_names_are_valid_names_and_filters(name: str) -> None:
    assert topic_name_error(name) is None
    # Every topic name is also a filter that matches exactly itself.
    assert topic_filter_error(name) is None
    assert topic_matches(name, name)


@settings(max_examples=200, deadline=None)
@given(topic_filters())
def test_generated_filters_are_valid(topic_filter: str) -> None:
    assert topic_filter_error(topic_filter) is None
    assert is_wildcard_filter(topic_filter) == ("+" in topic_filter or "#" in topic_filter)


# ---------------------------------------------------------------------------
# Matching

MATCHES = [
    # Examples of MQTT 3.1.1 §4.7.1.
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player2", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    # Multi-level wildcard.
    ("#", "a", True),
    ("#", "/", True),
    ("#", "a/b/c", True),
    ("a/#", "a", True),
    ("a/#", "a/", True),
    ("a/#", "ab", False),
    ("a/#", "b/a", False),
    ("/#", "/", True),
    ("/#", "a", False),
    ("+/#", "a", True),
    ("a/+/#", "a/b", True),
    ("+/+/#", "a", False),
    # Single-level wildcard and empty levels.
    ("+", "a", True),
    ("+", "/", False),
    ("+/+", "/", True),
    ("a/+/b", "a//b", True),
    ("a/+", "a/", True),
    ("+/b", "/b", True),
    ("+/+", "a", False),
    ("+/+", "a/b/c", False),
    ("a//b", "a//b", True),
    ("a//b", "a/b", False),
    # Exact filters.
    ("a/b", "a/b", True),
    ("a/b", "a/b/", False),
    ("a/b", "/a/b", False),
    ("a/b", "A/b", False),
    ("a/b", "a/b/c", False),
    # '$' topics are not matched by filters starting with a wildcard [MQTT-4.7.2-1].
    ("#", "$SYS", False),
    ("#", "$SYS/x", False),
    ("+/x", "$SYS/x", False),
    ("+/#", "$SYS/x", False),
    ("+", "$", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/x", True),
    ("$SYS/#", "$SYS", True),
    ("$SYS/#", "$SYS/a/b", True),
    ("$SYS/+", "$SYS/x", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("$SYS/x", "$SYS/x", True),
    # ... only a '$' at the start of the name counts.
    ("a/+", "a/$b", True),
    ("#", "a/$SYS", True),
    ("+/$x", "a/$x", True),
]


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), MATCHES)
def test_topic_matches(topic_filter: str, topic: str, expected: bool) -> None:
    assert topic_filter_error(topic_filter) is None
    assert topic_name_error(topic) is None
    assert topic_matches(topic_filter, topic) is expected


def reference_matches(topic_filter: str, topic: str) -> bool:
    """The matching rules as a regular expression, level by level."""
    if topic.startswith("$") and topic_filter[0] in "+#":
        return False
    pattern = ""
    for index, level in enumerate(topic_filter.split("/")):
        if level == "#":
            # '#' matches its parent level and any number of levels below it.
            pattern += "(/.*)?" if index else ".*"
            break
        pattern += ("/" if index else "") + ("[^/]*" if level == "+" else re.escape(level))
    return re.fullmatch(pattern, topic, flags=re.DOTALL) is not None


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), MATCHES)
def test_reference_agrees_with_the_table(topic_filter: str, topic: str, expected: bool) -> None:
    assert reference_matches(topic_filter, topic) is expected


@settings(max_examples=300, deadline=None)
@given(topic_filter=topic_filters(), topic=topic_names())
def test_topic_matches_agrees_with_the_reference(topic_filter: str, topic: str) -> None:
    assert topic_matches(topic_filter, topic) is reference_matches(topic_filter, topic)


@st.composite
def matching_pairs(draw: st.DrawFn) -> tuple[str, str]:
    """A topic name and a filter derived from it, so that most pairs match."""
    levels = draw(topic_names()).split("/")
    filter_levels = [draw(st.sampled_from([level, level, "+"])) for level in levels]
    cut = draw(st.integers(min_value=0, max_value=len(filter_levels)))
    if draw(st.booleans()):
        filter_levels = [*filter_levels[:cut], "#"]
    return "/".join(filter_levels) or "/", "/".join(levels)


@settings(max_examples=300, deadline=None)
@given(matching_pairs())
def test_topic_matches_agrees_with_the_reference_on_near_matches(pair: tuple[str, str]) -> None:
    topic_filter, topic = pair
    assert topic_filter_error(topic_filter) is None
    assert topic_matches(topic_filter, topic) is reference_matches(topic_filter, topic)
