"""Parser and checker: AST shapes, precedence, canonical form, errors with positions, limits."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from telemq.filters import MAX_DEPTH, FilterError, compile_filter, parse
from telemq.filters import ast as A
from telemq.filters.parser import parse_syntax

FIXTURES = Path(__file__).parent / "fixtures"


def sexpr(node: A.Node) -> str:
    """A fully parenthesized prefix form: shows the tree's structure unambiguously."""
    if isinstance(node, A.Number | A.String | A.Boolean | A.Null | A.Field | A.Property):
        return str(node)
    if isinstance(node, A.And | A.Or):
        word = "AND" if isinstance(node, A.And) else "OR"
        return f"({word} {' '.join(sexpr(e) for e in node.operands)})"
    if isinstance(node, A.Not):
        return f"(NOT {sexpr(node.operand)})"
    if isinstance(node, A.Unary):
        return f"({node.op}u {sexpr(node.operand)})"
    if isinstance(node, A.Arith):
        parts = [sexpr(node.first)]
        for op, e in node.rest:
            parts.append(f"{op} {sexpr(e)}")
        return f"(ARITH {' '.join(parts)})"
    if isinstance(node, A.Comparison):
        return f"({node.op} {sexpr(node.left)} {sexpr(node.right)})"
    if isinstance(node, A.Between):
        word = "NOT-BETWEEN" if node.negated else "BETWEEN"
        return f"({word} {sexpr(node.operand)} {sexpr(node.low)} {sexpr(node.high)})"
    if isinstance(node, A.In):
        word = "NOT-IN" if node.negated else "IN"
        return f"({word} {sexpr(node.operand)} {' '.join(str(i) for i in node.items)})"
    if isinstance(node, A.Like):
        word = "NOT-LIKE" if node.negated else "LIKE"
        esc = f" ESCAPE {node.escape!r}" if node.escape is not None else ""
        return f"({word} {sexpr(node.operand)} {node.pattern!r}{esc})"
    if isinstance(node, A.IsNull):
        return f"({'IS-NOT-NULL' if node.negated else 'IS-NULL'} {sexpr(node.operand)})"
    raise AssertionError(node)


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        ("a = 1 OR b = 2 AND NOT c", "(OR (= a 1) (AND (= b 2) (NOT c)))"),
        ("NOT a = 1 AND b", "(AND (NOT (= a 1)) b)"),
        ("NOT a BETWEEN 1 AND 2", "(NOT (BETWEEN a 1 2))"),
        ("a BETWEEN 1 AND 2 AND b", "(AND (BETWEEN a 1 2) b)"),
        ("a BETWEEN b - 1 AND b + 1 OR c", "(OR (BETWEEN a (ARITH b - 1) (ARITH b + 1)) c)"),
        ("a + b * c - d = 1", "(= (ARITH a + (ARITH b * c) - d) 1)"),
        ("a - b - c = 1", "(= (ARITH a - b - c) 1)"),
        ("a - (b - c) = 1", "(= (ARITH a - (ARITH b - c)) 1)"),
        ("(a - b) - c = 1", "(= (ARITH a - b - c) 1)"),
        ("a / b / c = 1", "(= (ARITH a / b / c) 1)"),
        ("a * b % c / d = 1", "(= (ARITH a * b % c / d) 1)"),
        ("-a * b = 1", "(= (ARITH (-u a) * b) 1)"),
        ("-(a * b) = 1", "(= (-u (ARITH a * b)) 1)"),
        ("- -a = 1", "(= (-u (-u a)) 1)"),
        ("+a = 1", "(= (+u a) 1)"),
        ("a = -5", "(= a -5)"),
        ("a = -(5)", "(= a -5)"),
        ("a = - -5", "(= a 5)"),
        ("a = +5", "(= a 5)"),
        ("a * -5 = 1", "(= (ARITH a * -5) 1)"),
        ("a IS NOT NULL OR b IS NULL", "(OR (IS-NOT-NULL a) (IS-NULL b))"),
        ("a + 1 IS NULL", "(IS-NULL (ARITH a + 1))"),
        ("a NOT IN (1, -2) AND b NOT LIKE 'x'", "(AND (NOT-IN a 1 -2) (NOT-LIKE b 'x'))"),
        ("a LIKE 'x!%' ESCAPE '!'", "(LIKE a 'x!%' ESCAPE '!')"),
        ("(a = 1) = (b = 2)", "(= (= a 1) (= b 2))"),
        ("a AND (b AND c) AND d", "(AND a b c d)"),
        ("(a OR b) OR (c OR d)", "(OR a b c d)"),
        ("(a OR b) AND (c OR d)", "(AND (OR a b) (OR c d))"),
        ("((((a))))", "a"),
        ("NOT NOT NOT a", "(NOT (NOT (NOT a)))"),
        ("a != 1", "(<> a 1)"),
        ("a<>1", "(<> a 1)"),
        ("a.b[0].c = 1", "(= a.b[0].c 1)"),
        ("Body.a = 1", "(= a 1)"),
        ("Body = 1", "(= Body 1)"),
        ("Body[3] = 1", "(= Body[3] 1)"),
        ("TRUE AND FALSE OR NULL", "(OR (AND TRUE FALSE) NULL)"),
        ("a = 1 AND b = 2 OR c = 3 AND d = 4", "(OR (AND (= a 1) (= b 2)) (AND (= c 3) (= d 4)))"),
    ],
)
def test_precedence_and_shape(text: str, tree: str) -> None:
    assert sexpr(parse(text)) == tree


def test_ast_nodes_and_positions() -> None:
    tree = parse("temp > 30 AND  site.name LIKE 'Lab%'")
    assert tree == A.And(
        (
            A.Comparison(">", A.Field(("temp",)), A.Number(30)),
            A.Like(A.Field(("site", "name")), "Lab%"),
        )
    )
    assert isinstance(tree, A.And)
    like = tree.operands[1]
    assert isinstance(like, A.Like)
    assert (tree.pos, like.pos, like.pattern_pos) == (0, 15, 30)


def test_identifiers_resolve_to_fields_and_properties() -> None:
    assert parse("Properties.Topic = 'x'") == A.Comparison("=", A.Property("Topic"), A.String("x"))
    assert parse("Body.a[1] = 1") == parse("a[1] = 1")
    assert parse("Body.Properties.Topic = 1") == A.Comparison(
        "=", A.Field(("Properties", "Topic")), A.Number(1)
    )
    assert parse("properties.Topic = 1") == A.Comparison(
        "=", A.Field(("properties", "Topic")), A.Number(1)
    )
    assert parse("Body.NOT = 1") == A.Comparison("=", A.Field(("NOT",)), A.Number(1))


def test_esql_root_aliases_resolve_to_properties() -> None:
    """``Root.MQMD.UserIdentifier`` is ``Properties.UserId`` and ``Root.Properties.<name>``
    is ``Properties.<name>``: the same nodes, so the same filter everywhere."""
    user = parse("Root.MQMD.UserIdentifier = 'alice'")
    assert user == A.Comparison("=", A.Property("UserId"), A.String("alice"))
    assert user == parse("Properties.UserId = 'alice'")
    assert parse("Root.Properties.Topic LIKE 'a/%'") == parse("Properties.Topic LIKE 'a/%'")
    assert parse("Root.Properties.User.in = 'x'") == parse("Properties.User.in = 'x'")
    assert parse("Root.Properties.Retain") == A.Property("Retain")
    # a payload key named like a correlation name is written after Body.
    assert parse("Body.Root.MQMD.UserIdentifier = 'a'") == A.Comparison(
        "=", A.Field(("Root", "MQMD", "UserIdentifier")), A.String("a")
    )
    assert parse("root.MQMD.UserIdentifier = 1") == A.Comparison(  # case-sensitive
        "=", A.Field(("root", "MQMD", "UserIdentifier")), A.Number(1)
    )
    positions = parse("a = 1 OR Root.MQMD.UserIdentifier = 'x'")
    assert isinstance(positions, A.Or)
    assert isinstance(positions.operands[1], A.Comparison)
    assert positions.operands[1].left.pos == 9


def test_mqtt5_properties_resolve_to_flat_property_names() -> None:
    ctype = parse("Properties.ContentType = 'a'")
    assert ctype == A.Comparison("=", A.Property("ContentType"), A.String("a"))
    site = parse("Properties.User.site = 'a'")
    assert site == A.Comparison("=", A.Property("User.site"), A.String("a"))
    assert isinstance(site, A.Comparison) and isinstance(site.left, A.Property)
    assert site.left.user_property == "site" and A.Property("ContentType").user_property is None
    # names as a payload field's: case-sensitive, Unicode letters, keywords after the dot
    assert parse("Properties.User.Site = 'a'") != site
    assert str(parse("Properties.User.in = 'a'")) == "Properties.User.in = 'a'"
    assert str(parse("properties.user.IN = 'a'")) == "properties.user.IN = 'a'"  # a field
    assert str(parse("Properties.User._é1 IS NULL")) == "Properties.User._é1 IS NULL"
    assert parse("Body.Properties.User.x = 1") == A.Comparison(
        "=", A.Field(("Properties", "User", "x")), A.Number(1)
    )
    assert "ContentType" in A.PROPERTY_NAMES and "User" not in A.PROPERTY_NAMES


def test_ast_is_immutable_and_equality_ignores_positions() -> None:
    a = parse("a = 1")
    b = parse("   a    =    1   ")
    assert isinstance(a, A.Comparison)
    assert a == b and hash(a) == hash(b)
    assert a != parse("a = 2")
    assert parse("a = TRUE") != parse("a = 1")  # booleans are not numbers
    assert parse("a = 1") == parse("a = 1.0")  # int and float literals are the same number
    with pytest.raises(AttributeError):
        setattr(a, "op", "<")  # noqa: B010 (frozen: must raise)


def identity_lines() -> list[str]:
    lines = (FIXTURES / "identity.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize("line", identity_lines())
def test_identity_fixtures_print_back_exactly(line: str) -> None:
    tree = parse(line)
    assert str(tree) == line
    assert parse(str(tree)) == tree
    assert compile_filter(line).text == line


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("a!=1", "a <> 1"),
        ("not   A = 1 and b like 'x'", "NOT A = 1 AND b LIKE 'x'"),
        ("((a = 1))", "a = 1"),
        ("(a = 1 AND b = 2) AND c = 3", "a = 1 AND b = 2 AND c = 3"),
        ("a = (1)", "a = 1"),
        ("(a) + (b) = (c)", "a + b = c"),
        ("Body.temp > 3E1", "temp > 30.0"),
        ("Root.MQMD.UserIdentifier = 'alice'", "Properties.UserId = 'alice'"),
        ("Root.Properties.QoS >= 1", "Properties.QoS >= 1"),
        ("Root.Properties.User.site = 'x'", "Properties.User.site = 'x'"),
        ("Body.Root = 1", "Body.Root = 1"),
        ("Body.Root.MQMD.UserIdentifier IS NULL", "Body.Root.MQMD.UserIdentifier IS NULL"),
        ("x = 7.", "x = 7.0"),
        ("x in (1,2)", "x IN (1, 2)"),
        ("x BETWEEN (1) AND (2)", "x BETWEEN 1 AND 2"),
        ("x is not null", "x IS NOT NULL"),
        ("-(-(a)) = 1", "- -a = 1"),
        ("-(5) = a", "-5 = a"),
        ("a = true", "a = TRUE"),
        ("s like 'a' escape '!'", "s LIKE 'a' ESCAPE '!'"),
        ("(a = 1) OR ((b = 2) OR (c = 3))", "a = 1 OR b = 2 OR c = 3"),
    ],
)
def test_canonical_text(text: str, canonical: str) -> None:
    f = compile_filter(text)
    assert f.text == canonical
    assert f.source == text
    assert compile_filter(f.text) == f


# -- errors ---------------------------------------------------------------------------

SYNTAX_ERRORS = [
    # (text, position, fragment of the message)
    ("", 0, "empty"),
    ("   ", 3, "empty"),
    ("a =", 3, "expected a value after '='"),
    ("a = = 1", 4, "expected a value, found '='"),
    ("= 1", 0, "expected a value"),
    ("a = 1 b", 6, "found name 'b'"),
    ("a = 1 2", 6, "found number 2"),
    ("a b = 1", 2, "after name 'a', found name 'b'"),
    ("a = 1 = 2", 6, "cannot follow another comparison"),
    ("a < b < c", 6, "cannot follow another comparison"),
    ("a IS NULL = TRUE", 10, "cannot follow another comparison"),
    ("a = b IS NULL", 6, "cannot follow another comparison"),
    ("a BETWEEN 1 AND 2 = TRUE", 18, "cannot follow another comparison"),
    ("a LIKE 'x' LIKE 'y'", 11, "cannot follow another comparison"),
    ("(a = 1", 6, "missing ')'"),
    ("((a = 1)", 8, "missing ')'"),
    ("a = 1)", 5, "unmatched ')'"),
    ("()", 1, "expected a value, found ')'"),
    ("a = (1 +)", 8, "expected a value, found ')'"),
    ("a BETWEEN 1 OR 2", 12, "expected AND to complete BETWEEN, found OR"),
    ("a BETWEEN 1", 11, "expected AND to complete BETWEEN, found end of filter"),
    ("a BETWEEN 1 = 2 AND 3", 12, "expected AND to complete BETWEEN"),
    ("(a BETWEEN 1) AND 2", 12, "expected AND to complete BETWEEN, found ')'"),
    ("a BETWEEN 1 AND", 15, "expected a value after AND"),
    ("a = NOT b", 4, "NOT cannot follow '='"),
    ("a + NOT b = 1", 4, "NOT cannot follow '+'"),
    ("- NOT a", 2, "NOT cannot follow '-'"),
    ("a BETWEEN NOT 1 AND 2", 10, "NOT cannot follow BETWEEN"),
    ("a NOT = 1", 6, "expected BETWEEN, IN or LIKE after NOT"),
    ("a NOT", 5, "expected BETWEEN, IN or LIKE after NOT"),
    ("NOT", 3, "expected a value after NOT"),
    ("a AND", 5, "expected a value after AND"),
    ("OR a", 0, "expected a value, found OR"),
    ("a IS 5", 5, "expected NULL or NOT NULL after IS"),
    ("a IS NOT 5", 9, "expected NULL after IS NOT"),
    ("a IN 1", 5, "expected '(' to start the IN list"),
    ("a IN ()", 6, "IN list items must be literals"),
    ("a IN (b)", 6, "IN list items must be literals"),
    ("a IN (1 + 1)", 8, "expected ',' or ')' in the IN list"),
    ("a IN (1, )", 9, "IN list items must be literals"),
    ("a IN (1", 7, "expected ',' or ')' in the IN list, found end of filter"),
    ("a IN (-'x')", 7, "expected a number after '-'"),
    ("a LIKE b", 7, "LIKE needs a string literal pattern"),
    ("a LIKE 5", 7, "LIKE needs a string literal pattern"),
    ("a LIKE 'x' ESCAPE 5", 18, "ESCAPE needs a string literal"),
    ("a.", 2, "expected a field name after '.'"),
    ("a. = 1", 3, "expected a field name after '.'"),
    ("Properties. = 1", 12, "expected a property name after '.'"),
    ("Properties.User.", 16, "expected a user property name after '.'"),
    ("Properties.User. = 'x'", 17, "expected a user property name after '.', found '='"),
    ("Body.Properties.User.", 21, "expected a field name after '.'"),
    ("Root. = 1", 6, "expected MQMD or Properties after '.', found '='"),
    ("Root.MQMD. = 'x'", 11, "expected an MQMD field name (UserIdentifier) after '.'"),
    ("Root.Properties. = 1", 17, "expected a property name after '.'"),
    ("Root.Properties.User.", 21, "expected a user property name after '.'"),
    ("a.5 = 1", 1, "found number .5"),
    ("a[] = 1", 2, "array index must be a non-negative integer"),
    ("a[-1] = 1", 2, "array index must be a non-negative integer"),
    ("a[1.0] = 1", 2, "array index must be a non-negative integer"),
    ("a[x] = 1", 2, "array index must be a non-negative integer"),
    ("a[1 = 1", 4, "expected ']' after the array index"),
    ("[0].a = 1", 0, "expected a value, found '['"),
    ("AND = 1", 0, "expected a value, found AND"),
    ("a = 'x' ESCAPE '!'", 8, "found ESCAPE"),
]


@pytest.mark.parametrize(("text", "position", "fragment"), SYNTAX_ERRORS)
def test_syntax_errors_report_the_position(text: str, position: int, fragment: str) -> None:
    with pytest.raises(FilterError) as info:
        compile_filter(text)
    err = info.value
    assert err.reason == 3150
    assert err.position == position, str(err)
    assert fragment in err.problem, str(err)
    assert f"(position {position})" in str(err)


CHECK_ERRORS = [
    ("5", 0, "expected a condition, found a number"),
    ("'x'", 0, "expected a condition, found a string"),
    ("a + 1", 0, "expected a condition, found an arithmetic expression"),
    ("-a", 0, "expected a condition, found an arithmetic expression"),
    ("a = 1 AND 5", 10, "expected a condition, found a number"),
    ("b OR 'x'", 5, "found a string"),
    ("NOT (a * 2)", 5, "found an arithmetic expression"),
    ("NOT 1", 4, "found a number"),
    ("Properties.Topic", 0, "found Properties.Topic, a string"),
    ("a AND Properties.QoS", 6, "found Properties.QoS, a number"),
    ("Properties.topic = 'x'", 11, "unknown property 'topic'; did you mean 'Topic'?"),
    ("Properties.Color = 'x'", 11, "unknown property 'Color'; the properties are Topic"),
    ("Properties = 1", 0, "Properties must be followed by a property name"),
    ("Properties[0] = 1", 11, "Properties cannot be indexed"),
    ("Properties.Topic.x = 1", 17, "has no fields"),
    ("Properties.QoS[0] = 1", 15, "has no fields"),
    ("Properties.ContentType", 0, "found Properties.ContentType, a string"),
    ("Properties.ContentType.x = 'a'", 23, "Properties.ContentType has no fields"),
    ("Properties.contentType = 'x'", 11, "did you mean 'ContentType'?"),
    ("Properties.Color = 'x'", 11, "ContentType, Broker and User.<name>"),
    ("NOT Properties.User.site", 4, "found Properties.User.site, a string"),
    ("Properties.User", 11, "Properties.User must be followed by the name of a user property"),
    ("Properties.User = 'x'", 11, "Properties.User.<name>"),
    ("Properties.User IS NULL", 11, "Properties.User must be followed by"),
    ("Properties.User[0] = 'x'", 16, "Properties.User cannot be indexed"),
    ("Properties.User.a.b = 'x'", 18, "Properties.User.a has no fields or elements"),
    ("Properties.User.a[0] = 'x'", 18, "Properties.User.a has no fields or elements"),
    ("Properties.User.1 = 'x'", 11, "Properties.User must be followed by"),  # '.1': a number
    ("Properties.user.a = 'x'", 11, "did you mean 'User'?"),
    # ESQL's Root: MQMD.UserIdentifier and Properties.<name>; anything else names them
    ("Root = 'x'", 0, "Root must be followed by a name; telemq's Root has MQMD.UserIdentifier"),
    ("Root IS NULL", 0, "the payload is Body.<path>"),
    ("Root[0] = 1", 5, "Root cannot be indexed"),
    ("Root.MQMD = 'x'", 5, "Root.MQMD must be followed by a field name"),
    ("Root.MQMD[0] = 'x'", 10, "telemq's Root.MQMD has UserIdentifier"),
    (
        "Root.MQMD.PutApplName = 'x'",
        10,
        "Root.MQMD.PutApplName is not available: telemq's Root.MQMD has UserIdentifier",
    ),
    ("Root.MQMD.userIdentifier = 'x'", 10, "did you mean 'UserIdentifier'?"),
    ("Root.MQMD.UserIdentifier.a = 'x'", 25, "Root.MQMD.UserIdentifier has no fields"),
    ("Root.MQMD.UserIdentifier[0] = 'x'", 25, "Root.MQMD.UserIdentifier has no fields"),
    ("Root.MQMD.UserIdentifier", 0, "found Properties.UserId, a string"),
    ("Root.Body.a = 1", 5, "Root.Body is not a name"),
    ("Root.Body = 1", 5, "write the payload as Body.<path>"),
    ("Root.JSON.Data.a = 1", 5, "Root.JSON is not available: telemq's Root has MQMD"),
    ("Root.mqmd.UserIdentifier = 'x'", 5, "Root.mqmd is not available"),
    ("Root.Properties = 1", 5, "Root.Properties must be followed by a property name"),
    ("Root.Properties[0] = 1", 16, "Root.Properties cannot be indexed"),
    ("Root.Properties.topic = 'x'", 16, "did you mean 'Topic'?"),
    ("Root.Properties.Topic.x = 'x'", 22, "Root.Properties.Topic has no fields"),
    ("Root.Properties.User = 'x'", 16, "Root.Properties.User.<name>"),
    ("Root.Properties.User.a.b = 'x'", 23, "Root.Properties.User.a has no fields"),
    ("Root.Properties.Topic", 0, "found Properties.Topic, a string"),
    ("a[2147483648] = 1", 2, "array index 2147483648 is too large"),
    ("a = 1e309", 4, "number is out of range"),
    ("a = -1e309", 4, "number is out of range"),
    ("a IN (1, 1e999)", 9, "number is out of range"),
    ("a = " + "9" * 400, 4, "number is out of range"),
    ("a = " + "9" * 5000, 4, "number is out of range"),
    ("s LIKE 'x!y' ESCAPE '!'", 9, "escape character '!' must be followed by %, _ or itself"),
    ("s LIKE 'x!' ESCAPE '!'", 9, "the pattern ends with the escape character"),
    ("s LIKE 'it''s!' ESCAPE '!'", 13, "ends with the escape character"),
    ("s LIKE 'x' ESCAPE ''", 18, "ESCAPE must be exactly one character"),
    ("s LIKE 'x' ESCAPE 'ab'", 18, "ESCAPE must be exactly one character"),
    ("s LIKE 'x' ESCAPE '%'", 18, "other than % and _"),
    ("s LIKE 'x' ESCAPE '_'", 18, "other than % and _"),
]


@pytest.mark.parametrize(("text", "position", "fragment"), CHECK_ERRORS)
def test_checker_errors_report_the_position(text: str, position: int, fragment: str) -> None:
    with pytest.raises(FilterError) as info:
        compile_filter(text)
    assert info.value.reason == 3150
    assert info.value.position == position, str(info.value)
    assert fragment in info.value.problem, str(info.value)


def test_error_message_quotes_the_text_around_the_position() -> None:
    text = "temperature > 30 AND humidity < 80 AND site.name LIKE 'Lab%' AND & pressure > 1"
    with pytest.raises(FilterError) as info:
        compile_filter(text)
    err = info.value
    assert err.position == text.index("&")
    message = str(err)
    assert message.startswith("unexpected character '&'; use AND at line 1, column 66")
    assert message.endswith("(position 65): \"...te.name LIKE 'Lab%' AND >>>& pressure > 1\"")
    assert err.text == text and err.problem.startswith("unexpected character")


def test_error_message_escapes_control_characters() -> None:
    with pytest.raises(FilterError) as info:
        compile_filter("a = 1 AND\n\tb = @")
    assert "\\n\\tb = >>>@" in str(info.value)
    assert (info.value.line, info.value.column) == (2, 6)


def test_filter_error_pickles() -> None:
    import pickle

    with pytest.raises(FilterError) as info:
        compile_filter("a = ")
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.position, copy.reason, str(copy)) == (4, 3150, str(info.value))


def test_parse_syntax_skips_the_checker() -> None:
    assert isinstance(parse_syntax("5"), A.Number)
    with pytest.raises(FilterError):
        parse("5")


# -- limits ---------------------------------------------------------------------------


def nested(kind: str, depth: int) -> str:
    if kind == "paren":
        return "(" * depth + "a = 1" + ")" * depth
    if kind == "not":
        return "NOT " * depth + "a"
    if kind == "sign":
        return "a = " + "-" * depth + "b" if depth else "a = b"
    if kind == "mixed":  # each level: '(' and NOT alternately, with real operators around
        text = "x = 0"
        for level in range(depth):
            text = f"(y{level} = 1 OR {text})" if level % 2 else f"NOT {text}"
        return text
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["paren", "not", "sign", "mixed"])
def test_depth_64_is_accepted_and_65_rejected(kind: str) -> None:
    compile_filter(nested(kind, MAX_DEPTH))
    with pytest.raises(FilterError) as info:
        compile_filter(nested(kind, MAX_DEPTH + 1))
    assert "deeper than 64 levels" in info.value.problem


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("(" * 65 + "a" + ")" * 65, 64),
        ("NOT " * 65 + "a", 256),
        ("a = " + "-" * 65 + "b", 68),
        ("a = 1 AND " + "(" * 64 + "NOT b" + ")" * 64, 74),
        ("(" * 10 + "NOT " * 54 + "- a = 1" + ")" * 10, 226),
    ],
)
def test_depth_error_is_where_level_65_opens(text: str, position: int) -> None:
    with pytest.raises(FilterError) as info:
        compile_filter(text)
    assert info.value.position == position


def test_depth_counts_nesting_not_sequence() -> None:
    """Siblings do not add up: 200 parenthesized groups side by side are depth 1."""
    text = " AND ".join(f"(NOT a{i} = -{i})" for i in range(200))
    tree = compile_filter(text).expr
    assert isinstance(tree, A.And) and len(tree.operands) == 200


def test_in_list_parentheses_do_not_count() -> None:
    compile_filter("(" * 64 + "a IN (1, 2)" + ")" * 64)


def run_with_little_stack(fn: Callable[[], object], headroom: int) -> object:
    """Call `fn` with only `headroom` Python frames left before the recursion limit."""

    def depth() -> int:
        f = sys._getframe()
        n = 0
        while f is not None:
            n += 1
            f = f.f_back  # type: ignore[assignment]
        return n

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth() + headroom)
    try:
        return fn()
    finally:
        sys.setrecursionlimit(old)


def deepest_filter() -> tuple[str, bytes]:
    """64 levels, each climbing every precedence level: the deepest AST the limits allow.

    The payload makes evaluation walk all the way down.
    """
    text = "a = 1"
    doc: dict[str, object] = {"a": 1}
    for i in range(MAX_DEPTH):
        text = f"u{i} OR t{i} AND v{i} + w{i} * ({text}) > 0"
        doc.update({f"u{i}": False, f"t{i}": True, f"v{i}": 1, f"w{i}": 1})
    return text, json.dumps(doc).encode()


def test_no_stage_needs_recursion() -> None:
    """Tokenize, parse, check, print, compile, compare and hash without deep stacks."""
    text, _ = deepest_filter()
    for other in (nested("paren", 64), nested("not", 64), nested("sign", 64), text):
        tree = parse(other)
        run_with_little_stack(partial(parse, other), 40)
        run_with_little_stack(partial(str, tree), 40)
        run_with_little_stack(partial(hash, tree), 40)
        run_with_little_stack(partial(tree.__eq__, parse(other)), 40)
        run_with_little_stack(partial(compile_filter, other), 40)


def test_evaluation_stack_is_bounded() -> None:
    """Evaluation calls one closure per AST level: under 550 frames even at the limit."""
    text, payload = deepest_filter()
    f = compile_filter(text)
    assert run_with_little_stack(lambda: f.evaluate(payload), 550) is None
    assert run_with_little_stack(lambda: f.evaluate(b'{"u63": true}'), 40) is True


def test_longest_flat_filters() -> None:
    """65,536 characters of one flat chain: fine for every stage (n-ary nodes)."""
    terms = [f"f{i} = {i}" for i in range(7000)]
    text = " OR ".join(terms)
    text = text[: text.rfind(" OR ", 0, 65_536)]
    f = compile_filter(text)
    assert isinstance(f.expr, A.Or)
    n = len(f.expr.operands)
    assert n > 4000
    assert f.evaluate(f'{{"f{n - 1}": {n - 1}}}'.encode()) is True
    assert f.evaluate(b"{}") is None
    assert compile_filter(f.text) == f

    chain = "a" + " + a" * 16_000 + " > 0"
    assert len(chain) < 65_536
    g = compile_filter(chain)
    assert g.evaluate(b'{"a": 1}') is True
    assert compile_filter(g.text) == g
