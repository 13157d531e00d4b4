"""The columns of the Sparkplug metrics and quarantine frames, and a builder for them.

`metrics_schema`, `quarantine_schema` and `decoded_schema` (what ``mapInArrow`` emits: both
kinds of row in one frame, told apart by ``reason``) are Spark `StructType`s made in Python,
so that executors derive the matching Arrow schema without a JVM. `Columns` collects one
Arrow batch of output column by column: the columns of the message (seq, topic, ...) once per
message, repeated for its metrics by Arrow (run-end decoding); the columns every row has as
Python lists, appended to in bulk by the decoder's fast path; the others (values, nested
values, the quarantine's payload and reason) sparsely, as (row, value) pairs put in place by
a mask, so a row pays only for the columns it fills. Timestamps travel as integers
(microseconds) and become Arrow timestamps once per batch.
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


# Columns every decoded row fills (NULL or not): those of the message a row comes from,
# kept once per run of rows (a message's metrics), then those of each row.
PER_MESSAGE = [
    "seq",
    "ts",
    "topic",
    "group",
    "edge_node",
    "device",
    "message_type",
    "payload_ts",
    "payload_seq",
]
PER_ROW = [
    "metric_index",
    "name",
    "alias",
    "datatype",
    "metric_ts",
    "is_null",
    "is_historical",
    "is_transient",
]
DENSE = [*PER_MESSAGE, *PER_ROW]
TIMESTAMPS = frozenset({"ts", "payload_ts", "metric_ts"})
CELL_COLUMNS = ("int_value", "double_value", "boolean_value", "string_value", "bytes_value")
CELL_INDEX = {name: index for index, name in enumerate(CELL_COLUMNS)}


class Columns:
    """One output batch being built (`rows` rows so far):

    - `messages`: the `PER_MESSAGE` columns, one value per run of rows that share it, the
      runs ending at `run_ends` (a message's metrics are one run; Arrow repeats the values);
    - `dense`: the `PER_ROW` columns, one value per row (`per_row`: the same lists, in
      `PER_ROW` order, for appending in bulk);
    - `cells` and `cell_targets`: one value per row and the index in `CELL_COLUMNS` of the
      column it goes to (-1: none), for rows of one scalar value (the fast path's);
    - `sparse`: (row, value) pairs for the other columns, so a row pays only for the
      columns it fills."""

    def __init__(self) -> None:
        self.messages: dict[str, list[Any]] = {name: [] for name in PER_MESSAGE}
        self.run_ends: list[int] = []
        self.dense: dict[str, list[Any]] = {name: [] for name in PER_ROW}
        self.per_row = [self.dense[name] for name in PER_ROW]
        self.cells: list[Any] = []
        self.cell_targets: list[int] = []
        self.sparse: dict[str, tuple[list[int], list[Any]]] = {
            name: ([], []) for name in DECODED_NAMES if name not in DENSE
        }
        self.rows = 0
        self._per_message = [self.messages[name] for name in PER_MESSAGE]

    def add(self, **values: Any) -> None:
        """One row from keyword values (timestamps in microseconds); the slow path."""
        for name, column in self.dense.items():
            column.append(values.get(name))
        self.cells.append(None)
        self.cell_targets.append(-1)
        for name, (rows, items) in self.sparse.items():
            value = values.get(name)
            if value is not None:
                rows.append(self.rows)
                items.append(value)
        self.add_run(tuple(values.get(name) for name in PER_MESSAGE), 1)

    def add_run(self, message: tuple[Any, ...], count: int) -> None:
        """End a run of `count` rows (already in `dense` and `sparse`) whose `PER_MESSAGE`
        values are `message`, in that order."""
        for column, value in zip(self._per_message, message, strict=True):
            column.append(value)
        self.rows += count
        self.run_ends.append(self.rows)

    def to_arrow(self) -> Any:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        schema = arrow_schema()
        run_ends = pa.array(self.run_ends, pa.int32())
        arrays = []
        targets = pa.array(self.cell_targets, pa.int8())
        filled = set(pc.unique(targets).to_pylist())
        for field in schema:
            name, kind = field.name, field.type
            if name in self.messages:
                values = self.messages[name]
                if name in TIMESTAMPS:
                    runs = pa.array(values, pa.int64()).cast(kind)
                else:
                    runs = pa.array(values, kind)
                encoded = pa.RunEndEncodedArray.from_arrays(run_ends, runs)
                arrays.append(pc.run_end_decode(encoded))
            elif name in self.dense:
                if name in TIMESTAMPS:
                    arrays.append(pa.array(self.dense[name], pa.int64()).cast(kind))
                else:
                    arrays.append(pa.array(self.dense[name], kind))
            else:
                array = pa.nulls(self.rows, kind)
                target = CELL_INDEX.get(name, -1)
                if target in filled and target >= 0:
                    array = self._cells(array, pc.equal(targets, target))
                arrays.append(self._sparse(array, *self.sparse[name]))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _cells(self, array: Any, chosen: Any) -> Any:
        """`array` with the `cells` of the rows `chosen` (a boolean array) put in place."""
        import itertools

        import pyarrow as pa
        import pyarrow.compute as pc

        selected = chosen.cast(pa.uint8()).buffers()[1].to_pybytes()[: self.rows]
        items = pa.array(list(itertools.compress(self.cells, selected)), array.type)
        return pc.replace_with_mask(array, chosen, items)

    def _sparse(self, array: Any, rows: list[int], items: list[Any]) -> Any:
        """`array` with the (row, value) pairs of a sparse column put in place."""
        import pyarrow as pa

        kind = array.type
        if not rows:
            return array
        if len(rows) == self.rows:  # rows ascend: every row has a value
            return pa.array(items, kind)
        if not _maskable(kind):
            values = array.to_pylist()
            for row, item in zip(rows, items, strict=True):
                values[row] = item
            return pa.array(values, kind)
        mask = bytearray(self.rows)
        for row in rows:
            mask[row] = 1
        return _put(array, mask, pa.array(items, kind))


def _put(array: Any, mask: bytes | bytearray, items: Any) -> Any:
    """`array` with `items` in the rows where `mask` (a byte per row) is 1, in order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    flags = pa.Array.from_buffers(pa.uint8(), len(array), [None, pa.py_buffer(mask)])
    return pc.replace_with_mask(array, flags.cast(pa.bool_()), items)


def _maskable(kind: Any) -> bool:
    """Whether `pyarrow.compute.replace_with_mask` takes arrays of `kind` (flat types)."""
    import pyarrow as pa

    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_string(kind)
        or pa.types.is_binary(kind)
    )
