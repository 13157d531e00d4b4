"""Typed columns: JSON payloads turned into columns beside the journal's, or quarantined.

`telemq pipeline ingest --schema "temp DOUBLE, sensor STRING"` (or ``--infer``) gives the
payload a schema, a `PayloadSchema`. For every micro-batch, `PayloadSchema.split` makes two
DataFrames out of the journal rows, without a Python UDF:

- ``rows``: the journal's columns (``payload`` kept) and one column per field of the schema;
- ``quarantine``: ``seq, ts, topic, client_id, payload, reason`` for each row whose payload
  does not fit, so that nothing is dropped silently: every input seq is in exactly one.

How a payload is checked, in Spark: it is parsed once into a VARIANT
(`telemq.filters.spark.document_column`, the parse the SQL filters use: NULL unless the
payload is UTF-8 holding exactly one JSON value); each field is read out of it as a VARIANT
and its JSON text (``to_json``, cheap for a scalar), and the JSON type is taken from that
text's first character, never from a cast: the string ``"31"`` is not a DOUBLE and the
number ``31`` is not a STRING, the rule of the filter language and of ``aggregate``. The
value itself is the text cast to the field's type (``try_cast``). The reasons are built in
CASE branches that only failing rows evaluate; a row with several problems lists them all,
separated by ``; ``.

The rules (docs/pipeline.md, "Typed columns"):

- a field missing from the payload, or JSON ``null``, is NULL and fits, unless the DDL says
  ``NOT NULL`` (then the reason is ``field temp: missing or null``);
- fields of the payload the schema does not name are ignored (they stay in ``payload``);
- integer types take JSON numbers written without a fraction or exponent, in range; DOUBLE
  and FLOAT any JSON number; DECIMAL(p,s) any number within its precision (rounded to its
  scale); STRING a JSON string; BOOLEAN ``true``/``false``; DATE and TIMESTAMP a JSON string
  Spark casts (ISO 8601);
- STRUCT<...> takes a JSON object whose fields are checked the same way (a reason names the
  path: ``field site.temp: ...``). ARRAY, MAP and the other Spark types are refused by
  `PayloadSchema.parse` (keep such fields in ``payload``).

`PayloadSchema.infer` derives a schema from a sample of payloads (on the driver, in seq
order, so always the same for the same rows). `to_ddl` / `to_json` give the text a table
format records (`SCHEMA_PROPERTY`), `parse` reads it back, and `merge` is
``--merge-schema``: new fields are added, a type change of an existing field is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..filters.spark import document_column
from .payload_ddl import INTEGERS, RESERVED_NAMES, PayloadField, not_null_ddl, parse_fields, quote
from .table_format import LakeError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "QUARANTINE_COLUMNS",
    "QUARANTINE_DDL",
    "RESERVED_NAMES",
    "SCHEMA_PROPERTY",
    "PayloadField",
    "PayloadSchema",
    "TypedBatch",
    "resolve_schema",
]

SCHEMA_PROPERTY = "telemq.payload.schema"
"""The table property (Delta configuration, Iceberg property) that holds `to_ddl()`."""

QUARANTINE_COLUMNS = ("seq", "ts", "topic", "client_id", "payload", "reason")
QUARANTINE_DDL = (
    "seq bigint, ts timestamp, topic string, client_id string, payload binary, reason string"
)
"""The schema of the quarantine table (``<lake>/quarantine`` beside ``<lake>/journal``)."""

_INFINITIES = ('"Infinity"', '"-Infinity"')  # how ``to_json`` writes an overflowed number
_MAX_SHOWN = 60  # characters of a value shown in a reason
_DOCUMENT = "$[0]"  # where `document_column` puts the payload's value


# -- the schema ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PayloadSchema:
    """The typed fields of JSON payloads; see the module docstring."""

    fields: tuple[PayloadField, ...]
    skipped: tuple[str, ...] = field(default=(), compare=False)  # infer: fields left out

    @classmethod
    def parse(cls, ddl: str) -> PayloadSchema:
        """Spark DDL (``"temp DOUBLE, site STRUCT<room: STRING>"``); `LakeError` if bad."""
        if not ddl.strip():
            raise LakeError("payload schema: empty; give fields as 'name TYPE, ...'")
        return cls(parse_fields(ddl))

    def to_ddl(self) -> str:
        return ", ".join(f"{quote(f.name)} {f.type_ddl()}{not_null_ddl(f)}" for f in self.fields)

    def to_json(self) -> str:
        """Spark's StructType JSON (``StructType.fromJson`` reads it; Delta's schemaString).

        Tables record `to_ddl()` (`SCHEMA_PROPERTY`), which `parse` reads back."""
        return json.dumps(
            {"type": "struct", "fields": [f.spark_json() for f in self.fields]},
            separators=(",", ":"),
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def merge(self, other: PayloadSchema, *, keep_types: bool = False) -> PayloadSchema:
        """``--merge-schema``: this schema's fields, then `other`'s new ones (nested too).

        A field both have with different types raises `LakeError`, unless `keep_types`
        (for a schema inferred from a later batch: the table's type stays, and values that
        do not fit it are quarantined)."""
        return PayloadSchema(_merge_fields(self.fields, other.fields, "", keep_types))

    @classmethod
    def infer(cls, frame: DataFrame, sample_rows: int = 1000) -> PayloadSchema:
        """A schema for the JSON objects among the first `sample_rows` payloads (by seq).

        Per top-level field, in order of first appearance: BOOLEAN, DOUBLE (any numbers,
        integers too), STRING, STRUCT (objects, merged). A field that holds
        arrays, only nulls, or values of different kinds is left out (`skipped`), as is a
        name the journal's columns use. `LakeError` when the sample has no JSON object."""
        if sample_rows < 1:
            raise LakeError(f"infer: sample rows: expected 1 or more, got {sample_rows}")
        sample = frame.select("seq", "payload").orderBy("seq").limit(sample_rows).collect()
        return cls.infer_payloads([row["payload"] for row in sample])

    @classmethod
    def infer_payloads(cls, payloads: Iterable[bytes | bytearray | None]) -> PayloadSchema:
        """`infer` over payloads at hand (the same rules, no Spark)."""
        merged: dict[str, Any] = {}
        objects = 0
        for payload in payloads:
            document = _json_object(payload)
            if document is None:
                continue
            objects += 1
            _merge_kinds(merged, document)
        if not objects:
            raise LakeError("infer: no payload of the sample is a JSON object")
        fields, skipped = _fields_of_kinds(merged, "")
        kept = [f for f in fields if f.name.lower() not in RESERVED_NAMES]
        skipped += [f.name for f in fields if f.name.lower() in RESERVED_NAMES]
        if not kept:
            raise LakeError(f"infer: no field of the sample has one type ({', '.join(skipped)})")
        return cls(tuple(kept), tuple(skipped))

    def split(self, frame: DataFrame, payload: str = "payload") -> TypedBatch:
        """The batch's rows that fit (with typed columns) and the quarantined ones.

        Built as stacked projections, each expensive value in a column of its own: the
        document, each field's VARIANT, its JSON text. Spark does not merge a projection
        into the next when that would compute such a value twice, so each payload is parsed
        once and each field read once, however often the checks refer to them."""
        from pyspark.sql import functions as F

        columns = [F.col(c) for c in frame.columns]
        taken = {c.lower() for c in frame.columns}
        clash = [n for n in self.names if n.lower() in taken]
        if clash:
            raise LakeError(f"payload schema: field {clash[0]} is already a column of the batch")
        raw = F.col(payload)
        text = F.try_validate_utf8(raw.cast("string"))
        doc = document_column(payload)
        not_a_document = (
            F.when(raw.isNull() | (F.length(raw) == 0), F.lit("not JSON"))
            .when(text.isNull(), F.lit("not UTF-8"))
            .when(doc.isNull(), F.lit("not JSON"))
            .when(~F.ltrim(text, F.lit(" \t\r\n")).startswith("{"), F.lit("not a JSON object"))
        )
        staged = frame.select(*columns, doc.alias(_DOC), not_a_document.alias(REASON))
        paths = list(_paths(self.fields, _DOCUMENT))
        subs = [F.col(f"{_SUB}{i}") for i in range(len(paths))]
        staged = staged.select(
            *columns,
            F.col(REASON),
            *[
                F.try_variant_get(_DOC, p, "variant").alias(f"{_SUB}{i}")
                for i, p in enumerate(paths)
            ],
        )
        staged = staged.select(
            *columns,
            F.col(REASON),
            *subs,
            *[F.to_json(sub).alias(f"{_JSON}{i}") for i, sub in enumerate(subs)],
        )
        counter = iter(range(len(paths)))
        checks = [_Check(f, f.name, counter) for f in self.fields]
        problems = [p for check in checks for p in check.problems]
        listed = F.concat_ws("; ", *problems)
        reason = F.coalesce(F.col(REASON), F.when(listed != "", listed))
        tagged = staged.select(
            *columns,
            *[c.value.alias(f.name) for c, f in zip(checks, self.fields, strict=True)],
            reason.alias(REASON),
        )
        return TypedBatch(tagged, tuple(frame.columns), self.names)


REASON = "_reason"
_DOC, _SUB, _JSON = "_doc", "_sub", "_json"  # the staged columns of `split`


def resolve_schema(
    recorded: PayloadSchema | None, given: PayloadSchema, *, merge: bool
) -> PayloadSchema:
    """The schema a run writes with, from the one the table records (None: a new table)
    and the one given now (``--schema``, or ``--infer``'s): the recorded one when `given`
    adds nothing to it, the two merged with `merge` (``--merge-schema``), else `LakeError`.
    """
    if recorded is None:
        return given
    merged = recorded.merge(given)  # a type change is refused, merging or not
    if merged == recorded:
        return recorded
    if not merge:
        new = ", ".join(n for n in merged.names if n not in recorded.names) or "nested fields"
        raise LakeError(
            f"payload schema: the table's is {recorded.to_ddl()!r}; the new one adds {new}:"
            " give --merge-schema to add them"
        )
    return merged


@dataclass(frozen=True, slots=True)
class TypedBatch:
    """One micro-batch checked against a schema: `rows` and `quarantine` together hold
    every input row once. Both are filters of `tagged`: use them inside ``with batch:``,
    which persists `tagged` (and releases it on leaving), so the batch is read from the
    journal and checked once for both. Outside the block each is computed on its own,
    and Spark's optimizer then copies the checks into its filter: correct, but much slower.
    """

    tagged: DataFrame
    journal_columns: tuple[str, ...]
    typed_columns: tuple[str, ...]

    @property
    def rows(self) -> DataFrame:
        """The journal's columns and the typed columns, for the rows that fit."""
        return self.tagged.filter(self.tagged[REASON].isNull()).select(
            *self.journal_columns, *self.typed_columns
        )

    @property
    def quarantine(self) -> DataFrame:
        """``QUARANTINE_COLUMNS`` for the rows that do not fit."""
        reason = self.tagged[REASON]
        quarantined = self.tagged.filter(reason.isNotNull()).withColumnRenamed(REASON, "reason")
        return quarantined.select(*QUARANTINE_COLUMNS)

    def quarantined(self) -> int:
        """How many rows went to quarantine (a Spark job: count once per batch)."""
        return int(self.tagged.filter(self.tagged[REASON].isNotNull()).count())

    def __enter__(self) -> TypedBatch:
        self.tagged.persist()
        return self

    def __exit__(self, *exc: object) -> None:
        self.tagged.unpersist()


# -- checking one field in Spark -------------------------------------------------------------


def _paths(fields: Sequence[PayloadField], parent: str) -> Iterator[str]:
    """The VARIANT path of every field, a STRUCT before its fields (`_Check`'s order)."""
    for f in fields:
        path = f"{parent}['{f.name}']"
        yield path
        if f.type == "STRUCT":
            yield from _paths(f.fields, path)


class _Check:
    """A field's value and its problems as Columns over the staged VARIANT (``_sub<i>``)
    and JSON text (``_json<i>``) of `split`, `counter` giving ``i`` in `_paths`' order."""

    def __init__(self, f: PayloadField, label: str, counter: Iterator[int]) -> None:
        from pyspark.sql import functions as F

        self.value: Column
        index = next(counter)
        sub, js = F.col(f"{_SUB}{index}"), F.col(f"{_JSON}{index}")
        absent = sub.isNull() | (js == "null")
        self.problems: list[Column] = []
        if not f.nullable:
            self.problems.append(F.when(absent, F.lit(f"field {label}: missing or null")))
        is_number = (js >= F.lit("-")) & (js < F.lit(":"))
        is_string = js.startswith('"')
        wrong = F.concat(
            F.lit(f"field {label}: expected {f.type}, got "), _kind(js), F.lit(" "), _shown(js)
        )
        if f.type == "STRUCT":
            is_object = js.startswith("{")
            children = [_Check(c, f"{label}.{c.name}", counter) for c in f.fields]
            self.value = F.when(
                is_object,
                F.struct(*[c.value.alias(n.name) for c, n in zip(children, f.fields, strict=True)]),
            )
            self.problems.append(F.when(~absent & ~is_object, wrong))
            for child in children:
                self.problems.extend(child.problems)
            return
        # A number too large for a double reads back as the string "Infinity": only
        # ``schema_of_variant`` (costly, so only on failing rows) tells them apart.
        overflowed = js.isin(*_INFINITIES) & (F.schema_of_variant(sub) == "DOUBLE")
        out_of_range = F.concat(
            F.lit(f"field {label}: "),
            F.when(overflowed, F.lit("number")).otherwise(_shown(js)),
            F.lit(f" out of range for {f.type}"),
        )
        if f.type in INTEGERS:
            integral = is_number & js.rlike(r"^-?[0-9]+$")
            self.value = F.when(integral, js.try_cast(INTEGERS[f.type]))
            problem = F.when(integral | overflowed, out_of_range).otherwise(wrong)
        elif f.type in ("DOUBLE", "FLOAT") or f.type.startswith("DECIMAL"):
            self.value = F.when(is_number, js.try_cast(f.type.lower()))
            problem = F.when(is_number | overflowed, out_of_range).otherwise(wrong)
        elif f.type == "BOOLEAN":
            self.value = F.when(js == "true", F.lit(True)).when(js == "false", F.lit(False))
            problem = wrong
        else:  # STRING, DATE, TIMESTAMP: a JSON string
            text = F.when(is_string, F.try_variant_get(sub, "$", "string"))
            self.value = text if f.type == "STRING" else text.try_cast(f.type.lower())
            problem = wrong
        self.problems.append(F.when(~absent & self.value.isNull(), problem))


def _kind(js: Column) -> Column:
    """The JSON type of a value from its JSON text."""
    from pyspark.sql import functions as F

    first = F.substring(js, 1, 1)
    return (
        F.when(first == '"', F.lit("string"))
        .when(first == "{", F.lit("object"))
        .when(first == "[", F.lit("array"))
        .when(js.isin("true", "false"), F.lit("boolean"))
        .otherwise(F.lit("number"))
    )


def _shown(js: Column) -> Column:
    from pyspark.sql import functions as F

    return F.when(
        F.length(js) > _MAX_SHOWN, F.concat(F.substring(js, 1, _MAX_SHOWN - 3), F.lit("..."))
    ).otherwise(js)


# -- inference and merging (plain Python) ----------------------------------------------------


def _json_object(payload: bytes | bytearray | None) -> dict[str, Any] | None:
    if not payload:
        return None
    try:
        value = json.loads(bytes(payload).decode("utf-8"), parse_constant=_no_constant)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _no_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


_CONFLICT = "?"  # a field whose values have different kinds


def _kind_of(value: Any) -> Any:
    """The kind a value infers to: a type name, a dict of kinds (objects), None (null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int | float):  # DOUBLE: a sample's 40 and a later 40.5 both fit
        return "DOUBLE" if not isinstance(value, float) or math.isfinite(value) else _CONFLICT
    if isinstance(value, str):
        return "STRING"
    if isinstance(value, dict):
        kinds: dict[str, Any] = {}
        _merge_kinds(kinds, value)
        return kinds
    return _CONFLICT  # arrays: not supported as typed columns


def _merge_kinds(kinds: dict[str, Any], document: dict[str, Any]) -> None:
    for name, value in document.items():
        kinds[name] = _combine(kinds.get(name), _kind_of(value))


def _combine(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None or a == b:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        merged = dict(a)
        for name, kind in b.items():
            merged[name] = _combine(merged.get(name), kind)
        return merged
    return _CONFLICT


def _fields_of_kinds(kinds: dict[str, Any], prefix: str) -> tuple[list[PayloadField], list[str]]:
    fields: list[PayloadField] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for name, kind in kinds.items():
        if kind is None or kind == _CONFLICT or "'" in name or not name or name.lower() in seen:
            skipped.append(prefix + name)
            continue
        seen.add(name.lower())
        if isinstance(kind, dict):
            inner, more = _fields_of_kinds(kind, f"{prefix}{name}.")
            skipped += more
            if not inner:
                skipped.append(prefix + name)
                continue
            fields.append(PayloadField(name, "STRUCT", True, tuple(inner)))
        else:
            fields.append(PayloadField(name, kind))
    return fields, skipped


def _merge_fields(
    ours: Sequence[PayloadField], theirs: Sequence[PayloadField], prefix: str, keep_types: bool
) -> tuple[PayloadField, ...]:
    by_name = {f.name.lower(): f for f in theirs}
    merged: list[PayloadField] = []
    for f in ours:
        other = by_name.pop(f.name.lower(), None)
        if other is None:
            merged.append(f)
        elif f.type == "STRUCT" and other.type == "STRUCT":
            inner = _merge_fields(f.fields, other.fields, f"{prefix}{f.name}.", keep_types)
            merged.append(PayloadField(f.name, "STRUCT", f.nullable, inner))
        elif f.type != other.type and not keep_types:
            raise LakeError(
                f"merge schema: field {prefix}{f.name} is {f.type_ddl()} in the table and"
                f" {other.type_ddl()} in the new schema; a field's type cannot change"
            )
        else:
            merged.append(f)
    merged.extend(f for f in theirs if f.name.lower() in by_name)
    return tuple(merged)
