"""What the Iceberg table's commits and its compaction share (iceberg_table.py).

The journal's columns as an Iceberg schema; one spelling per local file URI (pyiceberg and
Hadoop spell ``file:`` URIs differently, and a file must be recognised either way when
deciding what a snapshot references); the back-off between commits that conflicted with a
concurrent one; and Spark's Parquet timestamp type, which must be microseconds while Spark
writes files for Iceberg (Spark 4 writes INT96 by default) and the session's own value
again afterwards, counted per session because several writes may be under way at once.
"""

from __future__ import annotations

import random
import time
import urllib.parse
from typing import TYPE_CHECKING

from .table_format import LakeError

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = [
    "JOURNAL_COLUMNS",
    "back_off",
    "evolve",
    "file_key",
    "first_line",
    "journal_schema",
    "quarantine_schema",
    "read_schema",
    "require_pyiceberg",
    "schema_of",
    "widen",
]

JOURNAL_COLUMNS = (
    "seq", "ts", "topic", "sub_point", "qos", "retain", "payload", "client_id", "user_id",
    "content_type", "user_properties", "broker",
)  # fmt: skip
_INSTALL = "the iceberg format needs pyiceberg: pip install 'pyiceberg[pyarrow,sql-sqlite]'"


def journal_schema() -> Schema:
    """The journal's columns as an Iceberg schema: all optional, as Spark writes them."""
    from pyiceberg import types as t
    from pyiceberg.schema import Schema

    text, properties = t.StringType(), t.MapType(13, t.StringType(), 14, t.StringType(), False)
    kinds: list[t.IcebergType] = [t.LongType(), t.TimestamptzType(), text, text, t.IntegerType()]
    kinds.append(t.BooleanType())
    kinds += [t.BinaryType(), text, text, text, properties, text]
    fields = zip(JOURNAL_COLUMNS, kinds, strict=True)
    return Schema(*(t.NestedField(i, n, k, required=False) for i, (n, k) in enumerate(fields, 1)))


def quarantine_schema() -> Schema:
    """The quarantine table's columns (`typed_columns.QUARANTINE_COLUMNS`), all optional;
    ``ts`` is field 2, as in the journal, for the same partition spec."""
    from pyiceberg import types as t
    from pyiceberg.schema import Schema

    text = t.StringType()
    kinds: list[t.IcebergType] = [t.LongType(), t.TimestamptzType(), text, text, t.BinaryType()]
    kinds.append(text)
    names = ("seq", "ts", "topic", "client_id", "payload", "reason")
    fields = zip(names, kinds, strict=True)
    return Schema(*(t.NestedField(i, n, k, required=False) for i, (n, k) in enumerate(fields, 1)))


def file_key(uri: str) -> str:
    """One spelling per local file: ``file:///x`` and ``file:/x`` are the same file."""
    return "file:/" + uri[len("file:///") :] if uri.startswith("file:///") else uri


def widen(
    first: int | None, last: int | None, low: int | None, high: int | None
) -> tuple[int | None, int | None]:
    """The seq range ``first..last`` grown to hold ``low..high`` (None: not known)."""
    lows = [v for v in (first, low) if v is not None]
    highs = [v for v in (last, high) if v is not None]
    return (min(lows) if lows else None, max(highs) if highs else None)


def require_pyiceberg() -> None:
    try:
        import pyiceberg.catalog.sql  # noqa: F401  (pyiceberg[sql-sqlite]: SQLAlchemy)
    except ImportError as error:
        raise LakeError(f"{_INSTALL} ({error})") from None


def back_off(attempt_no: int) -> None:
    """Wait a little before committing again after a conflict (none before the first)."""
    if attempt_no:
        time.sleep(random.uniform(0.5, 1.0) * min(2.0, 0.05 * 2**attempt_no))


def without_password(text: str, uri: str) -> str:
    """`text` (a catalog's URL, or an error that quotes it) with the password of `uri`'s user
    part shown as ``***``: a URL such as ``postgresql+psycopg://user:secret@host/db`` goes
    into error lines and logs."""
    try:
        password = urllib.parse.urlsplit(uri).password
    except ValueError:  # not a URL with a valid port: no user part to read
        return text
    return text.replace(f":{password}@", ":***@") if password else text


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def schema_of(columns: StructType) -> Schema:
    """An Iceberg schema with fresh field ids for a Spark schema (top-level fields first,
    so ``ts`` has an id the partition spec can name)."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids
    from pyspark.sql.pandas.types import to_arrow_schema

    converted = Catalog._convert_schema_if_needed(to_arrow_schema(columns, timezone="UTC"))
    return assign_fresh_schema_ids(converted)


def read_schema(
    base: str | StructType, columns: tuple[str, ...], recorded: str | None
) -> tuple[str | StructType, list[str]]:
    """The Spark schema and columns to read a table's files with: its own columns (`base`),
    then the typed columns of the payload schema it records (NULL in files before them)."""
    if not recorded or not isinstance(base, str):
        return base, list(columns)
    from .typed_columns import PayloadSchema

    typed = PayloadSchema.parse(recorded)
    return f"{base}, {typed.to_ddl()}", [*columns, *typed.names]


def evolve(table: Table, ddl: str, columns: DataFrame) -> None:
    """Record the payload schema `ddl` as a table property, and add the typed `columns` the
    table lacks by name (Iceberg's schema evolution), in one commit."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from .typed_columns import SCHEMA_PROPERTY

    if table.properties.get(SCHEMA_PROPERTY) == ddl:
        return
    arrow = to_arrow_schema(columns.schema, timezone="UTC")
    with table.transaction() as transaction:
        with transaction.update_schema() as update:
            update.union_by_name(arrow)
        transaction.set_properties({SCHEMA_PROPERTY: ddl})
