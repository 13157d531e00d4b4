"""The columns of the Sparkplug metrics and quarantine frames, and a builder for them.

`metrics_schema`, `quarantine_schema` and `decoded_schema` (what ``mapInArrow`` emits: both
kinds of row in one frame, told apart by ``reason``) are Spark `StructType`s made in Python,
so that executors derive the matching Arrow schema without a JVM. `Columns` collects one
Arrow batch of output: a tuple per message (seq, topic, ...: Arrow repeats it for the
message's metrics, by run-end decoding) and a tuple per row (its metric's name, datatype,
flags, and its one scalar value with the index of the column it goes to), which become
columns once per batch, so the decoder's fast path appends a message with a few list calls;
the other columns (arrays, nested values, the quarantine's payload and reason, any value of
the slow path) sparsely, as (row, value) pairs, so a row pays only for the columns it fills.
Values are put in their rows by masks (`pyarrow.compute.replace_with_mask`), not by Python
lists of NULLs. Timestamps travel as integers (microseconds) and become Arrow timestamps
once per batch.
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
    """One output batch being built, `rows` rows so far, kept as tuples that Arrow turns into
    columns once per batch (one ``zip``), so appending a message costs two list calls:

    - `messages`: a `PER_MESSAGE` tuple per run of rows that share it, the runs ending at
      `run_ends` (a message's metrics are one run; Arrow repeats the values);
    - `metric_rows`: a tuple per row: its `PER_ROW` values, then the index in `CELL_COLUMNS`
      of the column its one scalar value goes to (-1: none) and that value (the fast
      path's rows);
    - `sparse`: (row, value) pairs for the other columns (the slow path's values), so a row
      pays only for the columns it fills."""

    def __init__(self) -> None:
        self.messages: list[tuple[Any, ...]] = []
        self.run_ends: list[int] = []
        self.metric_rows: list[tuple[Any, ...]] = []
        self.sparse: dict[str, tuple[list[int], list[Any]]] = {
            name: ([], []) for name in DECODED_NAMES if name not in DENSE
        }
        self.rows = 0

    def add(self, **values: Any) -> None:
        """One row from keyword values (timestamps in microseconds); the slow path."""
        self.metric_rows.append((*(values.get(name) for name in PER_ROW), -1, None))
        for name, (rows, items) in self.sparse.items():
            value = values.get(name)
            if value is not None:
                rows.append(self.rows)
                items.append(value)
        self.messages.append(tuple(values.get(name) for name in PER_MESSAGE))
        self.rows += 1
        self.run_ends.append(self.rows)

    def to_arrow(self) -> Any:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        schema = arrow_schema()
        run_ends = pa.array(self.run_ends, pa.int32())
        by_row = _transpose(self.metric_rows, len(PER_ROW) + 2)
        per_row = dict(zip(PER_ROW, by_row, strict=False))
        per_message = dict(
            zip(PER_MESSAGE, _transpose(self.messages, len(PER_MESSAGE)), strict=True)
        )
        targets = pa.array(by_row[-2], pa.int8())
        filled = set(pc.unique(targets).to_pylist())
        arrays = []
        for field in schema:
            name, kind = field.name, field.type
            values = per_message.get(name, per_row.get(name))
            if values is not None:
                if name in TIMESTAMPS:
                    array = pa.array(values, pa.int64()).cast(kind)
                else:
                    array = pa.array(values, kind)
                if name in per_message:
                    array = pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(run_ends, array))
                arrays.append(array)
                continue
            array = pa.nulls(self.rows, kind)
            target = CELL_INDEX.get(name, -1)
            if target in filled and target >= 0:
                array = self._cells(array, by_row[-1], pc.equal(targets, target))
            arrays.append(self._sparse(array, *self.sparse[name]))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _cells(self, array: Any, cells: list[Any], chosen: Any) -> Any:
        """`array` with the `cells` of the rows `chosen` (a boolean array) put in place."""
        import itertools

        import pyarrow as pa
        import pyarrow.compute as pc

        selected = chosen.cast(pa.uint8()).buffers()[1].to_pybytes()[: self.rows]
        items = pa.array(list(itertools.compress(cells, selected)), array.type)
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


def _transpose(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Tuples of `width` values as `width` lists (``zip(*rows)`` is slow for many rows)."""
    from operator import itemgetter

    return [list(map(itemgetter(index), rows)) for index in range(width)]


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
