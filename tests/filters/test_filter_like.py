"""LIKE: pattern parsing, escapes, matcher correctness against a reference, no ReDoS."""

from __future__ import annotations

import re
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemq.filters import compile_filter
from telemq.filters.like import LikeError, parse_like


def reference_like(pattern: str, text: str, escape: str | None = None) -> bool:
    """Textbook dynamic programming over (pattern position, text position)."""
    items: list[str | None] = []  # a literal char, None for `_`, "" for `%`
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape:
            items.append(pattern[i + 1])
            i += 2
            continue
        items.append("" if c == "%" else None if c == "_" else c)
        i += 1

    @cache
    def match(p: int, t: int) -> bool:
        if p == len(items):
            return t == len(text)
        item = items[p]
        if item == "":
            return match(p + 1, t) or (t < len(text) and match(p, t + 1))
        if t == len(text):
            return False
        return (item is None or item == text[t]) and match(p + 1, t + 1)

    return match(0, 0)


@pytest.mark.parametrize(
    ("pattern", "escape", "segments"),
    [
        ("abc", None, (("a", "b", "c"),)),
        ("a%b", None, (("a",), ("b",))),
        ("%", None, ((), ())),
        ("%%a%%", None, ((), (), ("a",), (), ())),
        ("a_c", None, (("a", None, "c"),)),
        ("10!%", "!", (("1", "0", "%"),)),
        ("a!_!!b", "!", (("a", "_", "!", "b"),)),
        ("", None, ((),)),
    ],
)
def test_segments(pattern: str, escape: str | None, segments: object) -> None:
    assert parse_like(pattern, escape).segments == segments


@pytest.mark.parametrize(
    ("pattern", "escape", "index"),
    [("a!b", "!", 1), ("ab!", "!", 2), ("!!!", "!", 2), ("x\\y", "\\", 1)],
)
def test_bad_escapes(pattern: str, escape: str, index: int) -> None:
    with pytest.raises(LikeError) as info:
        parse_like(pattern, escape)
    assert info.value.index == index


def test_escape_must_be_one_ordinary_character() -> None:
    for escape in ("", "ab", "%", "_"):
        with pytest.raises(LikeError):
            parse_like("x", escape)


def test_regex_forms_use_atomic_groups() -> None:
    pattern = parse_like("%a%a%b_")
    assert pattern.java_regex() == "(?s)\\A(?>.*?a)(?>.*?a).*b.\\z"
    assert parse_like("a.c").java_regex() == "(?s)\\Aa\\x2ec\\z"
    assert parse_like("é_😀").java_regex() == "(?s)\\Aé.😀\\z"


@pytest.mark.parametrize(
    "pattern",
    [
        "",
        "abc",
        "a%",
        "%a",
        "%a%",
        "a%b",
        "%a%b%",
        "a_c",
        "%_%",
        "_%_",
        "%%",
        "%ab%ab%",
        "a.c",
        "(x)*+?",
        "[a-z]%",
        "\\%",
        "%$^|{}",
        "a\nb%",
    ],
)
@pytest.mark.parametrize(
    "text",
    [
        "",
        "a",
        "abc",
        "aXc",
        "ab",
        "ba",
        "abab",
        "xaby",
        "a.c",
        "(x)*+?",
        "[a-z]q",
        "\\x",
        "z$^|{}",
        "a\nbc",
        "a\nb",
        "ac",
    ],
)
def test_python_matcher_agrees_with_reference(pattern: str, text: str) -> None:
    assert parse_like(pattern).python_matcher()(text) is reference_like(pattern, text)


alphabet = st.sampled_from(["a", "b", "%", "_", ".", "*", "\n", "é", "😀", "!"])


@settings(max_examples=400, deadline=None)
@given(
    pattern=st.lists(alphabet, max_size=8).map("".join),
    text=st.lists(
        st.sampled_from(["a", "b", ".", "*", "\n", "é", "😀", "!", "%"]), max_size=10
    ).map("".join),
)
def test_matcher_property(pattern: str, text: str) -> None:
    try:
        like = parse_like(pattern, "!")
    except LikeError:
        return
    assert like.python_matcher()(text) is reference_like(pattern, text, "!")
    # the regex flavour the Spark backend uses has the same meaning under Python's engine
    body = like.java_regex().removeprefix("(?s)\\A").removesuffix("\\z")
    assert (re.fullmatch(body, text, re.DOTALL) is not None) is reference_like(pattern, text, "!")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "pattern",
    [
        "%a%a%a%a%a%a%a%b",
        "%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%b",
        "%_%_%_%_%_%_%_%b",
        "%aa%aa%aa%aa%aa%ab",
        "a%a%a%a%a%a%a%a%",
        "%a_a_a_a_a_a_b%",
        "_%_%_%_%_%_%_%_%_%c",
    ],
)
def test_adversarial_patterns_are_linear(pattern: str) -> None:
    """A backtracking translation (``.*a.*a...``) needs ~n^k steps on these inputs.

    With n = 200,000 such a matcher would not finish in days; ours finishes in
    milliseconds (the pytest timeout is the backstop, not a measurement).
    """
    f = compile_filter(f"s LIKE '{pattern}'")
    text = "a" * 200_000
    payload = ('{"s": "' + text + '"}').encode()
    expected = reference_like(pattern, "a" * 40)  # same answer as any long run of a's
    assert f.evaluate(payload) is expected
    with_c = reference_like(pattern, "a" * 40 + "c")
    assert f.evaluate(('{"s": "' + text + 'c"}').encode()) is with_c
