"""Checker: the rules the grammar alone does not express.

- Identifier forms: ``Properties.<name>`` must name one of the fixed properties and
  go no further, or be ``Properties.User.<name>`` (exactly one name: an MQTT 5.0 User
  Property); ``Body`` prefixes a payload path; an array index fits in 31 bits.
- ESQL's ``Root``: ``Root.MQMD.UserIdentifier`` is ``Properties.UserId`` and
  ``Root.Properties.<name>`` is ``Properties.<name>``. They resolve here to the same
  `Property` nodes, so every backend, index and the canonical text treat an alias exactly
  as the telemq name. Any other ``Root`` path is an error naming what there is.
- Literal types: number literals are finite doubles; ``LIKE`` patterns and ``ESCAPE``
  characters are valid (see `like.parse_like`).
- Conditions: the whole filter and each operand of ``AND``/``OR``/``NOT`` must be able to
  be a condition. Numbers, strings, arithmetic and non-boolean properties cannot; a payload
  field can (TRUE when it holds JSON ``true``, FALSE for ``false``, else UNKNOWN).

Everything else is dynamic: a comparison between values of different types is UNKNOWN at
evaluation time, never an error here, because payload fields have no static type.
"""

from __future__ import annotations

import math

from . import ast
from .errors import FilterError
from .like import LikeError, parse_like

__all__ = ["MAX_INDEX", "check", "resolve_identifier"]

MAX_INDEX = 2**31 - 1
"""Largest array index accepted in a path."""

_PROPERTY_TYPES = {
    "Topic": "a string",
    "QoS": "a number",
    "Retain": "a boolean",
    "ClientId": "a string",
    "UserId": "a string",
    "SubPoint": "a string",
    "Broker": "a string",
    "ContentType": "a string",
}
_USER = "User"  # Properties.User.<name>
_ALL_PROPERTIES = ", ".join(f"Properties.{n}" for n in ast.PROPERTY_NAMES)
_ALL_PROPERTIES += f" or Properties.{_USER}.<name>"
_MQMD = {"UserIdentifier": "UserId"}  # Root.MQMD.<field> -> the property it is
_ROOT_HAS = (
    "telemq's Root has MQMD.UserIdentifier and Properties.<name>; the payload is Body.<path>"
)


def resolve_identifier(
    steps: tuple[str | int, ...], positions: tuple[int, ...], text: str
) -> ast.Field | ast.Property:
    """Turn a written identifier into a payload `Field` or a message `Property`."""
    head = steps[0]
    if head == "Properties":
        return _property(steps, positions, text)
    if head == "Root":
        return _root(steps, positions, text)
    path = steps[1:] if head == "Body" else steps
    offsets = positions[1:] if head == "Body" else positions
    for step, offset in zip(path, offsets, strict=True):
        if isinstance(step, int) and step > MAX_INDEX:
            raise FilterError(
                f"array index {step} is too large (at most {MAX_INDEX})", text, offset
            )
    return ast.Field(path, pos=positions[0])


def _root(steps: tuple[str | int, ...], positions: tuple[int, ...], text: str) -> ast.Property:
    """ESQL's ``Root``: the parts of the message tree telemq has, as the properties they are.

    ``Root.Body`` is refused rather than aliased: in ESQL the last child of Root is named
    after its parser (``Root.XMLNSC``, ``Root.JSON``), never ``Body``, so the portable
    spelling of the payload is the correlation name ``Body.<path>``.
    """
    if len(steps) == 1:
        raise FilterError(
            f"Root must be followed by a name; {_ROOT_HAS}",
            text,
            positions[0],
        )
    child = steps[1]
    if not isinstance(child, str):
        raise FilterError(f"Root cannot be indexed; {_ROOT_HAS}", text, positions[1])
    if child == "Properties":
        found = _property(steps[1:], positions[1:], text, "Root.Properties")
        return ast.Property(found.name, pos=positions[0])
    if child == "MQMD":
        return _mqmd(steps, positions, text)
    if child == "Body":
        raise FilterError(
            "Root.Body is not a name (ESQL names the last child of Root after its parser); "
            "write the payload as Body.<path>",
            text,
            positions[1],
        )
    raise FilterError(f"Root.{child} is not available: {_ROOT_HAS}", text, positions[1])


def _mqmd(steps: tuple[str | int, ...], positions: tuple[int, ...], text: str) -> ast.Property:
    """``Root.MQMD.<field>``: the MQMD fields an MQTT publication has (the publisher's user)."""
    has = "telemq's Root.MQMD has " + ", ".join(_MQMD)
    if len(steps) == 2 or not isinstance(steps[2], str):
        raise FilterError(
            f"Root.MQMD must be followed by a field name; {has}",
            text,
            positions[2] if len(steps) > 2 else positions[1],
        )
    name = steps[2]
    if name not in _MQMD:
        close = [n for n in _MQMD if n.lower() == name.lower()]
        hint = f"did you mean '{close[0]}'? (names are case-sensitive)" if close else has
        raise FilterError(f"Root.MQMD.{name} is not available: {hint}", text, positions[2])
    if len(steps) > 3:
        raise FilterError(
            f"Root.MQMD.{name} has no fields or elements (it is a string)", text, positions[3]
        )
    return ast.Property(_MQMD[name], pos=positions[0])


def _property(
    steps: tuple[str | int, ...],
    positions: tuple[int, ...],
    text: str,
    written: str = "Properties",
) -> ast.Property:
    """``Properties.<name>`` or ``Properties.User.<name>``, nothing shorter or longer.

    `written` is how the filter spelled ``Properties`` (``Root.Properties`` too), for errors.
    """
    if len(steps) == 1:
        raise FilterError(
            f"{written} must be followed by a property name: {_ALL_PROPERTIES}",
            text,
            positions[0],
        )
    name = steps[1]
    if not isinstance(name, str):
        raise FilterError(f"{written} cannot be indexed; name a property", text, positions[1])
    if name == _USER:
        return _user_property(steps, positions, text, written)
    if name not in ast.PROPERTY_NAMES:
        known = (*ast.PROPERTY_NAMES, _USER)
        close = [n for n in known if n.lower() == name.lower()]
        hint = (
            f"did you mean '{close[0]}'? (names are case-sensitive)"
            if close
            else "the properties are " + ", ".join(ast.PROPERTY_NAMES) + f" and {_USER}.<name>"
        )
        raise FilterError(f"unknown property '{name}'; {hint}", text, positions[1])
    if len(steps) > 2:
        raise FilterError(f"{written}.{name} has no fields or elements", text, positions[2])
    return ast.Property(name, pos=positions[0])


def _user_property(
    steps: tuple[str | int, ...], positions: tuple[int, ...], text: str, written: str
) -> ast.Property:
    """``Properties.User.<name>``: one name (an identifier, as a payload field's), no more.

    A User Property has one string value (the first, when the message repeats the name),
    so there is nothing below it to name or index.
    """
    if len(steps) == 2:
        raise FilterError(
            f"{written}.{_USER} must be followed by the name of a user property: "
            f"{written}.{_USER}.<name>",
            text,
            positions[1],
        )
    name = steps[2]
    if not isinstance(name, str):
        raise FilterError(
            f"{written}.{_USER} cannot be indexed; name a user property: {written}.{_USER}.<name>",
            text,
            positions[2],
        )
    if len(steps) > 3:
        raise FilterError(
            f"{written}.{_USER}.{name} has no fields or elements (a user property is a string)",
            text,
            positions[3],
        )
    return ast.Property(ast.USER_PROPERTY_PREFIX + name, pos=positions[0])


def check(tree: ast.Node, text: str) -> None:
    """Raise `FilterError` if `tree` (parsed from `text`) breaks a rule above."""
    _require_condition(tree, text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Number):
            _check_number(node, text)
        elif isinstance(node, ast.And | ast.Or):
            for operand in node.operands:
                _require_condition(operand, text)
        elif isinstance(node, ast.Not):
            _require_condition(node.operand, text)
        elif isinstance(node, ast.In):
            for item in node.items:
                if isinstance(item, ast.Number):
                    _check_number(item, text)
        elif isinstance(node, ast.Like):
            _check_like(node, text)


def _check_number(node: ast.Number, text: str) -> None:
    try:
        finite = math.isfinite(float(node.value))
    except OverflowError:
        finite = False
    if not finite:
        raise FilterError("number is out of range (beyond a double's range)", text, node.pos)


def _require_condition(node: ast.Node, text: str) -> None:
    if isinstance(node, ast.Number):
        found = "a number"
    elif isinstance(node, ast.String):
        found = "a string"
    elif isinstance(node, ast.Arith | ast.Unary):
        found = "an arithmetic expression"
    elif isinstance(node, ast.Property) and node.name != "Retain":
        found = f"Properties.{node.name}, {_PROPERTY_TYPES.get(node.name, 'a string')}"
    else:
        return
    raise FilterError(f"expected a condition, found {found}", text, node.pos)


def _check_like(node: ast.Like, text: str) -> None:
    if node.escape is not None and (len(node.escape) != 1 or node.escape in "%_"):
        raise FilterError(
            f"ESCAPE must be exactly one character other than % and _, found {node.escape!r}",
            text,
            node.escape_pos,
        )
    try:
        parse_like(node.pattern, node.escape)
    except LikeError as exc:
        raise FilterError(
            f"invalid LIKE pattern: {exc}", text, _string_offset(text, node.pattern_pos, exc.index)
        ) from None


def _string_offset(text: str, quote_pos: int, index: int) -> int:
    """Offset in `text` of character `index` of the string literal opening at `quote_pos`."""
    pos = quote_pos + 1
    for _ in range(index):
        pos += 2 if text[pos] == "'" else 1
    return pos
