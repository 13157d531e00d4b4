"""The Spark DDL of a payload schema (typed_columns.py): its fields, and their parser.

`--schema "temp DOUBLE, site STRUCT<room: STRING>"` is read here, without a JVM, so that a
bad schema is one line naming the problem and its position before Spark starts. The types
are those a JSON value can be checked against (`SUPPORTED`); aliases Spark accepts (``LONG``,
``INTEGER``, ``REAL``...) are taken and written back under Spark's own names. A field may
not take a name of the journal's columns or the lake's ``date`` (`RESERVED_NAMES`).
`PayloadField.type_ddl` and `spark_json` write a field back as DDL and as Spark's
StructType JSON, the two forms a table format records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .journal import JOURNAL_DDL
from .table_format import LakeError

__all__ = [
    "INTEGERS",
    "RESERVED_NAMES",
    "SUPPORTED",
    "PayloadField",
    "not_null_ddl",
    "parse_fields",
    "quote",
]

RESERVED_NAMES = frozenset(
    [part.strip().split(" ", 1)[0] for part in JOURNAL_DDL.split(", ") if " " in part.strip()]
    + ["date"]
)
"""Names a payload field may not take: the journal's columns, and the lake's ``date``."""

INTEGERS = {"TINYINT": "tinyint", "SMALLINT": "smallint", "INT": "int", "BIGINT": "bigint"}
_ALIASES = {
    "BYTE": "TINYINT",
    "SHORT": "SMALLINT",
    "INTEGER": "INT",
    "LONG": "BIGINT",
    "REAL": "FLOAT",
    "DEC": "DECIMAL",
    "NUMERIC": "DECIMAL",
}
_SCALARS = frozenset(
    [*INTEGERS, "FLOAT", "DOUBLE", "STRING", "BOOLEAN", "DATE", "TIMESTAMP", "DECIMAL"]
)
SUPPORTED = (
    "BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL(p,s), STRING, DATE,"
    " TIMESTAMP, STRUCT<...>"
)
_SPARK_JSON_NAMES = {  # Spark's StructType JSON names
    **{
        name: name.lower() for name in ("FLOAT", "DOUBLE", "STRING", "BOOLEAN", "DATE", "TIMESTAMP")
    },
    **{"TINYINT": "byte", "SMALLINT": "short", "INT": "integer", "BIGINT": "long"},
}


@dataclass(frozen=True, slots=True)
class PayloadField:
    """One field: a scalar type (``DOUBLE``, ``DECIMAL(10,2)``...) or ``STRUCT`` with fields."""

    name: str
    type: str
    nullable: bool = True
    fields: tuple[PayloadField, ...] = ()

    def type_ddl(self) -> str:
        if self.type != "STRUCT":
            return self.type
        inner = ", ".join(f"{quote(f.name)}: {f.type_ddl()}{not_null_ddl(f)}" for f in self.fields)
        return f"STRUCT<{inner}>"

    def spark_json(self) -> dict[str, Any]:
        kind: Any
        if self.type == "STRUCT":
            kind = {"type": "struct", "fields": [f.spark_json() for f in self.fields]}
        elif self.type.startswith("DECIMAL"):
            kind = self.type.lower().replace(" ", "")
        else:
            kind = _SPARK_JSON_NAMES[self.type]
        return {"name": self.name, "type": kind, "nullable": self.nullable, "metadata": {}}


def not_null_ddl(f: PayloadField) -> str:
    return "" if f.nullable else " NOT NULL"


def quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name.replace('`', '``')}`"


# -- the DDL ---------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_]\w*)|([0-9]+)|([,<>():])|(\S))")
_TOKEN_KINDS = ("", "name", "word", "number", "punct", "other")


class _DdlParser:
    """Recursive descent over the subset of Spark's DDL that payload fields may use."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []  # (kind, value, position)
        for match in _TOKEN.finditer(text):
            kind, start = _TOKEN_KINDS[match.lastindex or 0], match.start(match.lastindex or 0)
            if kind == "other":
                raise self.error(f"unexpected {match[5]!r}", start)
            value = match[1][1:-1].replace("``", "`") if kind == "name" else match[0].strip()
            self.tokens.append((kind, value, start))
        self.index = 0

    def error(self, problem: str, position: int | None = None) -> LakeError:
        if position is None:
            token = self.peek()
            position = token[2] if token is not None else len(self.text)
        return LakeError(f"payload schema: {problem} at position {position + 1} of {self.text!r}")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self) -> tuple[str, str, int]:
        token = self.peek()
        if token is None:
            raise self.error("unexpected end")
        self.index += 1
        return token

    def accept(self, value: str, kind: str = "punct") -> bool:
        token = self.peek()
        if token is not None and token[0] == kind and token[1].upper() == value:
            self.index += 1
            return True
        return False

    def expect(self, punct: str, after: str) -> None:
        if not self.accept(punct):
            raise self.error(f"expected {punct!r} {after}")

    def fields(self, nested: bool) -> tuple[PayloadField, ...]:
        found: list[PayloadField] = []
        seen: set[str] = set()
        while True:
            kind, name, position = self.take()
            if kind not in ("word", "name"):
                raise self.error(f"expected a field name, found {name!r}", position)
            if "'" in name or not name:
                raise self.error(f"field name {name!r}: may not be empty or hold a quote", position)
            if name.lower() in seen:
                raise self.error(f"field {name} given twice", position)
            if not nested and name.lower() in RESERVED_NAMES:
                raise self.error(
                    f"field {name} clashes with the journal's column {name.lower()}", position
                )
            seen.add(name.lower())
            if nested:
                self.accept(":")
            f = self.field_type(name)
            found.append(self.modifiers(f))
            if not self.accept(","):
                return tuple(found)

    def modifiers(self, f: PayloadField) -> PayloadField:
        if not self.accept("NOT", "word"):
            return f
        if not self.accept("NULL", "word"):
            raise self.error("expected NULL after NOT")
        return PayloadField(f.name, f.type, False, f.fields)

    def field_type(self, name: str) -> PayloadField:
        kind, word, position = self.take()
        upper = _ALIASES.get(word.upper(), word.upper()) if kind == "word" else ""
        if upper == "STRUCT":
            self.expect("<", "after STRUCT")
            inner = self.fields(nested=True)
            self.expect(">", f"to close the STRUCT of field {name}")
            return PayloadField(name, "STRUCT", True, inner)
        if upper not in _SCALARS:
            shown = word.upper() if kind == "word" else repr(word)
            raise self.error(
                f"field {name}: type {shown} is not supported (one of {SUPPORTED})", position
            )
        if upper != "DECIMAL":
            return PayloadField(name, upper)
        precision, scale = 10, 0
        if self.accept("("):
            precision = self.number("precision")
            if self.accept(","):
                scale = self.number("scale")
            self.expect(")", "after the DECIMAL's precision and scale")
        if not 1 <= precision <= 38 or scale > precision:
            raise self.error(f"field {name}: DECIMAL({precision},{scale}) out of range", position)
        return PayloadField(name, f"DECIMAL({precision},{scale})")

    def number(self, what: str) -> int:
        kind, value, position = self.take()
        if kind != "number":
            raise self.error(f"expected the DECIMAL's {what}, found {value!r}", position)
        return int(value)


def parse_fields(ddl: str) -> tuple[PayloadField, ...]:
    """The fields of a whole DDL text; `LakeError` naming the problem and its position."""
    parser = _DdlParser(ddl)
    fields = parser.fields(nested=False)
    extra = parser.peek()
    if extra is not None:
        raise parser.error(f"unexpected {extra[1]!r}")
    return fields
