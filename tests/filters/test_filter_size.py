"""`Filter.size` and `compile_filter(text, max_size)`: the measure the broker's filter
budgets count, and a refusal that costs less than parsing (docs/filters.md, "Limits")."""

from __future__ import annotations

import pytest

from telemq.filters import FilterError, compile_filter
from telemq.filters.tokens import tokenize


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("a = 1", 3),
        ("s LIKE '%x%'", 2),
        ("a IN (1, 2, 3)", 5),
        ("a = 1 AND b = 2", 7),
        ("NOT (a BETWEEN 1 AND 2)", 5),
        ("Properties.Topic = 't' OR x IS NULL", 6),
    ],
)
def test_the_size_counts_nodes_and_in_values(text: str, size: int) -> None:
    assert compile_filter(text).size == size


def test_a_filter_larger_than_max_size_is_refused_naming_the_limit() -> None:
    text = " OR ".join(f"n = {i}" for i in range(6))  # size 19
    assert compile_filter(text, 19).size == 19
    with pytest.raises(FilterError) as refused:
        compile_filter(text, 18, "limits.max_filter_size")
    assert refused.value.reason == 3150
    assert "size is 19, more than the limit of 18 (limits.max_filter_size)" in str(refused.value)


def test_a_text_far_beyond_max_size_stops_while_tokenizing() -> None:
    huge = " OR ".join(f"s LIKE '%{n:05d}%'" for n in range(3004))  # 63 KB, size 6,009
    with pytest.raises(FilterError) as refused:
        compile_filter(huge, 256, "limits.max_filter_size")
    assert "larger than the limit of 256 (limits.max_filter_size)" in str(refused.value)
    # It stopped where the token bound was passed, far before the end of the text.
    assert refused.value.position < len(huge) // 4


def test_within_the_size_no_filter_reaches_the_token_bound() -> None:
    """The densest text per unit of size: NOT LIKE with ESCAPE, each in parentheses."""
    text = " OR ".join(f"((NOT (s NOT LIKE 'a{i}%' ESCAPE '!')))" for i in range(20))
    size = compile_filter(text).size
    assert compile_filter(text, size).size == size
    assert len(tokenize(text)) <= 8 * size + 16
