"""The columns of the Sparkplug metrics and quarantine frames, and a builder for them.

`metrics_schema`, `quarantine_schema` and `decoded_schema` (what ``mapInArrow`` emits: both
kinds of row in one frame, told apart by ``reason``) are Spark `StructType`s made in Python,
so that executors derive the matching Arrow schema without a JVM. `Columns` collects one
Arrow batch of output column by column: the columns every row has (`DENSE`) as Python
lists, appended to in bulk by the decoder's fast path; the others (values, nested values,
the quarantine's payload and reason) sparsely, as (row, value) pairs, so a row pays only for
the columns it fills. Timestamps travel as integers (microseconds) and become Arrow
timestamps once per batch.
"""

from __future__ import annotations

from typing import Any

# (name, type) with types as short strings: "long", "double", "boolean", "string", "binary",
# "int", "timestamp", ["array", element], ["struct", fields], ["map", key, value].
_CELL: list[tuple[str, Any]] = [
    ("int_value", "long"),
    ("double_value", "double"),
    ("boolean_value", "boolean"),
    ("string_value", "string"),
]
_DATASET = [
    ("columns", ["array", "string"]),
    ("types", ["array", "string"]),
    ("rows", ["array", ["array", ["struct", _CELL]]]),
]
_TEMPLATE = [
    ("version", "string"),
    ("template_ref", "string"),
    ("is_definition", "boolean"),
    ("parameters", ["array", ["struct", [("name", "string"), ("type", "string"), *_CELL]]]),
    (
        "metrics",
        [
            "array",
            [
                "struct",
                [
                    ("name", "string"),
                    ("alias", "long"),
                    ("datatype", "string"),
                    ("is_null", "boolean"),
                    *_CELL,
                    ("bytes_value", "binary"),
                    ("json_value", "string"),
                ],
            ],
        ],
    ),
]
_METRICS: list[tuple[str, Any]] = [
    ("seq", "long"),
    ("ts", "timestamp"),
    ("topic", "string"),
    ("group", "string"),
    ("edge_node", "string"),
    ("device", "string"),
    ("host_id", "string"),
    ("message_type", "string"),
    ("payload_ts", "timestamp"),
    ("payload_seq", "long"),
    ("metric_index", "int"),
    ("name", "string"),
    ("alias", "long"),
    ("datatype", "string"),
    ("metric_ts", "timestamp"),
    ("is_null", "boolean"),
    ("is_historical", "boolean"),
    ("is_transient", "boolean"),
    *_CELL,
    ("bytes_value", "binary"),
    ("int_array", ["array", "long"]),
    ("double_array", ["array", "double"]),
    ("boolean_array", ["array", "boolean"]),
    ("string_array", ["array", "string"]),
    ("dataset", ["struct", _DATASET]),
    ("template", ["struct", _TEMPLATE]),
    ("properties", ["map", "string", "string"]),
]
_QUARANTINE: list[tuple[str, Any]] = [
    ("seq", "long"),
    ("ts", "timestamp"),
    ("topic", "string"),
    ("payload", "binary"),
    ("metric_index", "int"),
    ("reason", "string"),
]
METRIC_COLUMNS = [name for name, _ in _METRICS]
DECODED_NAMES = [*METRIC_COLUMNS, "payload", "reason"]


def _spark_type(kind: Any) -> Any:
    from pyspark.sql import types as T

    if isinstance(kind, str):
        return {
            "long": T.LongType(),
            "int": T.IntegerType(),
            "double": T.DoubleType(),
            "boolean": T.BooleanType(),
            "string": T.StringType(),
            "binary": T.BinaryType(),
            "timestamp": T.TimestampType(),
        }[kind]
    if kind[0] == "array":
        return T.ArrayType(_spark_type(kind[1]))
    if kind[0] == "map":
        return T.MapType(_spark_type(kind[1]), _spark_type(kind[2]))
    return _spark_schema(kind[1])


def _spark_schema(fields: list[tuple[str, Any]]) -> Any:
    from pyspark.sql import types as T

    return T.StructType([T.StructField(name, _spark_type(kind)) for name, kind in fields])


def metrics_schema() -> Any:
    """The Spark schema of the metrics frame (a `StructType`)."""
    return _spark_schema(_METRICS)


def quarantine_schema() -> Any:
    """The Spark schema of the quarantine frame."""
    return _spark_schema(_QUARANTINE)


def decoded_schema() -> Any:
    """What mapInArrow emits: the metric columns, then the quarantine's payload and reason
    (NULL on metric rows)."""
    return _spark_schema([*_METRICS, ("payload", "binary"), ("reason", "string")])


_ARROW_SCHEMA: Any = None


def arrow_schema() -> Any:
    """The Arrow schema of `decoded_schema` (made once per process; no JVM needed)."""
    global _ARROW_SCHEMA
    if _ARROW_SCHEMA is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        _ARROW_SCHEMA = to_arrow_schema(decoded_schema(), timezone="UTC")
    return _ARROW_SCHEMA


# Columns every decoded row fills (NULL or not), kept as plain lists.
DENSE = [
    "seq",
    "ts",
    "topic",
    "group",
    "edge_node",
    "device",
    "message_type",
    "payload_ts",
    "payload_seq",
    "metric_index",
    "name",
    "alias",
    "datatype",
    "metric_ts",
    "is_null",
    "is_historical",
    "is_transient",
]
TIMESTAMPS = frozenset({"ts", "payload_ts", "metric_ts"})


class Columns:
    """One output batch being built: `dense` lists of equal length `rows`, and `sparse`
    (row index, value) pairs for the other columns."""

    def __init__(self) -> None:
        self.dense: dict[str, list[Any]] = {name: [] for name in DENSE}
        self.sparse: dict[str, tuple[list[int], list[Any]]] = {
            name: ([], []) for name in DECODED_NAMES if name not in self.dense
        }
        self.rows = 0

    def add(self, **values: Any) -> None:
        """One row from keyword values (timestamps in microseconds); the slow path."""
        for name, column in self.dense.items():
            column.append(values.get(name))
        for name, (rows, items) in self.sparse.items():
            value = values.get(name)
            if value is not None:
                rows.append(self.rows)
                items.append(value)
        self.rows += 1

    def to_arrow(self) -> Any:
        import pyarrow as pa  # type: ignore[import-untyped]

        schema = arrow_schema()
        arrays = []
        for field in schema:
            if field.name in self.dense:
                values: list[Any] = self.dense[field.name]
            else:
                rows, items = self.sparse[field.name]
                values = [None] * self.rows
                for row, item in zip(rows, items, strict=True):
                    values[row] = item
            if field.name in TIMESTAMPS:
                arrays.append(pa.array(values, type=pa.int64()).cast(field.type))
            else:
                arrays.append(pa.array(values, type=field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
