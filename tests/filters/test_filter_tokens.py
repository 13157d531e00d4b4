"""Tokenizer: token kinds, values, positions (offset, line, column), lexical errors."""

from __future__ import annotations

import pytest

from telemq.filters import MAX_LENGTH, FilterError
from telemq.filters.tokens import Token, TokenType, tokenize


def kinds(text: str) -> list[TokenType]:
    return [t.type for t in tokenize(text)]


def test_tokens_of_a_typical_filter() -> None:
    tokens = tokenize("temp > 30 AND site.name LIKE 'Lab%'")
    assert [(t.type, t.text, t.start) for t in tokens] == [
        (TokenType.NAME, "temp", 0),
        (TokenType.GT, ">", 5),
        (TokenType.NUMBER, "30", 7),
        (TokenType.AND, "AND", 10),
        (TokenType.NAME, "site", 14),
        (TokenType.DOT, ".", 18),
        (TokenType.NAME, "name", 19),
        (TokenType.LIKE, "LIKE", 24),
        (TokenType.STRING, "'Lab%'", 29),
        (TokenType.EOF, "", 35),
    ]


def test_line_and_column_follow_newlines() -> None:
    tokens = tokenize("a = 1\n  AND\r\n\tb <> 'x\ny' OR c")
    where = {(t.text, t.line, t.column) for t in tokens}
    assert ("a", 1, 1) in where
    assert ("AND", 2, 3) in where
    assert ("b", 3, 2) in where
    assert ("'x\ny'", 3, 7) in where
    assert ("OR", 4, 4) in where  # the string literal spans a line break
    assert tokens[-1].type is TokenType.EOF and tokens[-1].line == 4


@pytest.mark.parametrize("word", ["and", "AND", "And", "aNd"])
def test_keywords_are_case_insensitive(word: str) -> None:
    assert kinds(f"a {word} b")[1] is TokenType.AND


def test_every_keyword_and_symbol() -> None:
    text = (
        "AND OR NOT BETWEEN LIKE IN IS NULL TRUE FALSE ESCAPE"
        " = <> != < <= > >= + - * / % ( ) [ ] . ,"
    )
    assert kinds(text)[:-1] == [
        TokenType.AND,
        TokenType.OR,
        TokenType.NOT,
        TokenType.BETWEEN,
        TokenType.LIKE,
        TokenType.IN,
        TokenType.IS,
        TokenType.NULL,
        TokenType.TRUE,
        TokenType.FALSE,
        TokenType.ESCAPE,
        TokenType.EQ,
        TokenType.NE,
        TokenType.NE,
        TokenType.LT,
        TokenType.LE,
        TokenType.GT,
        TokenType.GE,
        TokenType.PLUS,
        TokenType.MINUS,
        TokenType.STAR,
        TokenType.SLASH,
        TokenType.PERCENT,
        TokenType.LPAREN,
        TokenType.RPAREN,
        TokenType.LBRACKET,
        TokenType.RBRACKET,
        TokenType.DOT,
        TokenType.COMMA,
    ]


def test_operators_need_no_spaces() -> None:
    assert kinds("a<>1 AND(b>=-2)")[:-1] == [
        TokenType.NAME,
        TokenType.NE,
        TokenType.NUMBER,
        TokenType.AND,
        TokenType.LPAREN,
        TokenType.NAME,
        TokenType.GE,
        TokenType.MINUS,
        TokenType.NUMBER,
        TokenType.RPAREN,
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("57", 57),
        ("0", 0),
        ("7.", 7.0),
        ("95.7", 95.7),
        (".5", 0.5),
        ("7E3", 7000.0),
        ("7e3", 7000.0),
        ("57.9E2", 5790.0),
        ("1e-3", 0.001),
        ("2E+2", 200.0),
        ("0.25", 0.25),
        ("123456789012345678901234567890", 123456789012345678901234567890),
    ],
)
def test_number_values(text: str, value: float) -> None:
    token = tokenize(text)[0]
    assert token.type is TokenType.NUMBER
    assert token.value == value
    assert type(token.value) is type(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("'abc'", "abc"),
        ("''", ""),
        ("'it''s'", "it's"),
        ("''''", "'"),
        ("'a\nb'", "a\nb"),
        ("'日本 😀'", "日本 😀"),
        ("'%_\\'", "%_\\"),
    ],
)
def test_string_values(text: str, value: str) -> None:
    token = tokenize(text)[0]
    assert token.type is TokenType.STRING
    assert token.value == value


def test_unicode_names_and_keyword_lookalikes() -> None:
    assert [t.text for t in tokenize("température _x x1 été")[:-1]] == [
        "température",
        "_x",
        "x1",
        "été",
    ]
    # a non-ASCII name whose upper case is a keyword stays a name
    dotless_i = "\u0131"  # upper-cases to "I"
    assert tokenize(dotless_i + "s")[0].type is TokenType.NAME


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("a = 'abc", 4, "unterminated string"),
        ("a = 'it''s", 4, "unterminated string"),
        ('a = "x"', 4, "double quotes"),
        ("a & b", 2, "use AND"),
        ("a | b", 2, "use OR"),
        ("a ! b", 2, "use NOT"),
        ("a = 1; b = 2", 5, "single condition"),
        ("a = #", 4, "unexpected character '#'"),
        ("a = 1 ?", 6, "unexpected character '?'"),
        ("a\u00a0= 1", 1, "U+00A0"),
        ("a = 007", 4, "leading zeros"),
        ("a = 0x1F", 4, "malformed number '0x1F'"),
        ("a = 1e", 4, "malformed number '1e'"),
        ("a = 1.2.3", 4, "malformed number"),
        ("a = 12abc", 4, "malformed number '12abc'"),
        ("x = 1AND y", 4, "malformed number '1AND'"),
        ("a = '\ud800'", 5, "lone surrogate"),
        ("\n\n  a = $", 8, "unexpected character '$'"),
    ],
)
def test_lexical_errors_point_at_the_character(text: str, position: int, fragment: str) -> None:
    with pytest.raises(FilterError) as info:
        tokenize(text)
    err = info.value
    assert err.reason == 3150
    assert err.position == position
    assert fragment in str(err)


def test_error_line_and_column() -> None:
    with pytest.raises(FilterError) as info:
        tokenize("a = 1\nAND b = 'open")
    assert (info.value.position, info.value.line, info.value.column) == (14, 2, 9)
    assert "line 2, column 9" in str(info.value)


def test_length_limit() -> None:
    ok = "a = 1" + " " * (MAX_LENGTH - 5)
    assert len(tokenize(ok)) == 4
    with pytest.raises(FilterError) as info:
        tokenize(ok + " ")
    assert info.value.position == MAX_LENGTH == 65_536
    assert "longer than 65536" in str(info.value)


def test_tokenizing_is_linear() -> None:
    text = " OR ".join(f"f{i} = {i}" for i in range(6000))[:MAX_LENGTH]
    tokens = tokenize(text.rsplit(" OR ", 1)[0])
    assert len(tokens) > 15_000
    assert all(isinstance(t, Token) for t in tokens)
