"""Sparkplug B metrics in Spark: journal rows in, one row per metric out, and a quarantine.

``metrics, quarantine = sparkplug_metrics(frame)`` takes rows of the `telemq` data source
(``seq``, ``ts``, ``topic``, ``payload``; other columns are ignored) and decodes every row
whose topic is in the ``spBv1.0`` namespace:

- each metric of an NBIRTH, NDATA, NDEATH, NCMD, DBIRTH, DDATA, DDEATH or DCMD becomes one
  row of `metrics_schema()`: the topic's group, edge node and device, the message type, the
  metric's name (an alias resolved through the BIRTH in force, `sparkplug_births`), its
  datatype and its value in the typed column for its kind (``int_value`` for every integer
  type and DateTime in milliseconds, ``double_value``, ``boolean_value``, ``string_value``,
  ``bytes_value``, the ``*_array`` columns, ``dataset`` and ``template`` as nested structs),
  its timestamp, flags and properties; a message without metrics (a DDEATH) is one row with
  a NULL name, so births and deaths stay visible; a STATE message is one row with its host
  id and its JSON text in ``string_value``;
- what cannot be read goes to the quarantine (`quarantine_schema()`) with the journal row's seq,
  ts, topic and payload and the reason: a broken topic, a payload that is not a valid
  Sparkplug B payload (or an invalid BIRTH), a metric whose alias no BIRTH defines yet, a
  value that does not fit its BIRTH's datatype, an unsigned 64-bit value beyond ``bigint``.
  Nothing in the namespace is dropped silently; rows outside it are not Sparkplug and are
  left out of both frames.

Decoding runs in the executors with ``mapInArrow``: each Arrow batch of journal rows
becomes an Arrow batch of output rows, built column by column (`decode_batch`), with no
Python object per Spark row. Both frames are views of one decoded frame, so persist
`decode_sparkplug`'s result when writing both.

Aliases across batches and restarts. The driver reads the BIRTHs of the frame (few rows:
``collect``) and adds them to the BIRTHs in force before it. In a streaming job, pass a
`BirthLedger` and the micro-batch id: the ledger keeps, beside the checkpoint, the BIRTHs in
force after each batch (``births-<batch id>.json``), and a batch starts from the file of the
greatest earlier batch id. A replayed batch (after a crash) therefore starts from the same
state as its first attempt and decodes the same way, and a new query over the same
checkpoint resolves aliases born before it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..sparkplug import (
    DataSet,
    DataType,
    MessageType,
    Metric,
    PropertySet,
    SparkplugPayloadError,
    SparkplugTopic,
    SparkplugTopicError,
    Template,
    decode_payload,
    parse_topic,
)
from ..sparkplug.datatypes import ARRAY_TYPES, INTEGER_TYPES
from ..sparkplug.topic import NAMESPACE
from .sparkplug_births import Birth, BirthLedger, Births
from .sparkplug_fast import FastDecoder
from .sparkplug_schema import (
    METRIC_COLUMNS,
    Columns,
    decoded_schema,
    metrics_schema,
    quarantine_schema,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame

__all__ = [
    "BirthLedger",
    "birth_rows",
    "decode_batch",
    "decode_sparkplug",
    "decoded_schema",
    "metrics_schema",
    "quarantine_schema",
    "sparkplug_metrics",
    "split_decoded",
]

_LONG_MAX = (1 << 63) - 1
_PREFIX = NAMESPACE + "/"
_BIRTH_TOPIC = r"^spBv1\.0/[^/]+/[ND]BIRTH/"


def decode_batch(batch: pa.RecordBatch, births: Births) -> pa.RecordBatch:
    """One Arrow batch of journal rows -> one of decoded rows (`decoded_schema()`)."""
    import pyarrow as pa

    columns = Columns()
    fast = FastDecoder(columns, births)
    parsed: dict[str, SparkplugTopic | SparkplugTopicError] = {}
    seqs = batch.column("seq").to_pylist()
    stamps = batch.column("ts").cast(pa.int64()).to_pylist()
    topics = batch.column("topic").to_pylist()
    payloads = batch.column("payload").to_pylist()
    for seq, ts, topic, data in zip(seqs, stamps, topics, payloads, strict=True):
        if topic is None or not topic.startswith(_PREFIX):
            continue
        where = parsed.get(topic)
        if where is None:
            try:
                where = parsed[topic] = parse_topic(topic)
            except SparkplugTopicError as error:
                where = parsed[topic] = error
        data = data or b""
        if isinstance(where, SparkplugTopicError):
            columns.add(seq=seq, ts=ts, topic=topic, payload=data, reason=f"topic: {where.reason}")
        elif not fast.decode(seq, ts, topic, where, data):
            _decode_message(columns, births, seq, ts, topic, where, data)
    return columns.to_arrow()


def _decode_message(
    columns: Columns,
    births: Births,
    seq: int,
    ts: int,
    topic: str,
    where: SparkplugTopic,
    data: bytes,
) -> None:
    """The slow path: any message, through `decode_payload` and its dataclasses."""
    common = {"seq": seq, "ts": ts, "topic": topic}

    def quarantine(reason: str, index: int | None = None) -> None:
        columns.add(**common, payload=data, metric_index=index, reason=reason)

    kind = where.message_type
    if kind is MessageType.STATE:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            quarantine("STATE payload is not UTF-8 text")
            return
        columns.add(**common, host_id=where.host_id, message_type=str(kind), string_value=text)
        return
    try:
        payload = decode_payload(data, kind)
        payload_ts = _micros(payload.timestamp, "payload timestamp")
    except SparkplugPayloadError as error:
        quarantine(error.reason)
        return
    assert where.group is not None and where.edge_node is not None
    birth: Birth | None
    if kind.is_birth:
        birth = Birth.of(seq, payload)
    elif where.device is not None:
        birth = births.device_at((where.group, where.edge_node, where.device), seq)
    else:
        birth = births.node_at((where.group, where.edge_node), seq)
    header = {
        **common,
        "group": where.group,
        "edge_node": where.edge_node,
        "device": where.device,
        "message_type": str(kind),
        "payload_ts": payload_ts,
        "payload_seq": payload.seq,
    }
    if not payload.metrics:
        columns.add(**header)
        return
    for index, metric in enumerate(payload.metrics):
        try:
            resolved = _resolve(metric, birth, kind)
            values = _value_columns(resolved)
            metric_ts = _micros(resolved.timestamp, f"metric {resolved.name!r}: timestamp")
        except SparkplugPayloadError as error:
            quarantine(error.reason, index)
            continue
        columns.add(
            **header,
            **values,
            metric_index=index,
            name=resolved.name,
            alias=resolved.alias,
            datatype=resolved.datatype.name if resolved.datatype is not None else None,
            metric_ts=metric_ts,
            is_null=resolved.is_null or resolved.value is None,
            is_historical=resolved.is_historical,
            is_transient=resolved.is_transient,
            properties=_properties(resolved.properties),
        )


def _resolve(metric: Metric, birth: Birth | None, kind: MessageType) -> Metric:
    """`metric` with its name and datatype, from its BIRTH where it lacks them."""
    if metric.name is not None and metric.datatype is not None:
        return metric
    if birth is None:
        what = f"alias {metric.alias}" if metric.name is None else f"metric {metric.name!r}"
        node = "device" if kind.is_device else "edge node"
        raise SparkplugPayloadError(f"{what}: no BIRTH of this {node} before it")
    if metric.name is None:
        assert metric.alias is not None
        entry = birth.aliases.get(metric.alias)
        if entry is None:
            raise SparkplugPayloadError(
                f"alias {metric.alias} is not in the BIRTH at seq {birth.seq}"
            )
        return metric.with_birth(entry.name, entry.datatype)
    datatype = birth.names.get(metric.name)
    if datatype is None:
        raise SparkplugPayloadError(
            f"metric {metric.name!r} is not in the BIRTH at seq {birth.seq}"
        )
    return metric.with_birth(metric.name, datatype)


def _value_columns(metric: Metric) -> dict[str, Any]:
    kind, value = metric.datatype, metric.value
    if value is None or metric.is_null or kind is None:
        return {}
    if isinstance(value, DataSet):
        return {"dataset": _dataset(value)}
    if isinstance(value, Template):
        return {"template": _template(value)}
    if kind in ARRAY_TYPES:
        assert isinstance(value, tuple)
        if kind is DataType.BooleanArray:
            return {"boolean_array": list(value)}
        if kind is DataType.StringArray:
            return {"string_array": list(value)}
        if kind in (DataType.FloatArray, DataType.DoubleArray):
            return {"double_array": list(value)}
        if any(v > _LONG_MAX for v in value):  # type: ignore[operator]
            raise SparkplugPayloadError(f"metric {metric.name!r}: {kind.name} value beyond bigint")
        return {"int_array": list(value)}
    return _cell(kind, value, metric.name)


def _cell(kind: DataType, value: object, name: str | None) -> dict[str, Any]:
    """The typed column of a scalar value."""
    if kind in INTEGER_TYPES:
        assert isinstance(value, int)
        if value > _LONG_MAX:
            raise SparkplugPayloadError(f"metric {name!r}: {kind.name} value {value} beyond bigint")
        return {"int_value": value}
    if isinstance(value, bool):
        return {"boolean_value": value}
    if isinstance(value, float):
        return {"double_value": value}
    if isinstance(value, str):
        return {"string_value": value}
    if isinstance(value, bytes):
        return {"bytes_value": value}
    return {}


def _dataset(value: DataSet) -> dict[str, Any]:
    return {
        "columns": list(value.columns),
        "types": [t.name for t in value.types],
        "rows": [
            [
                _cell(kind, cell, column) if cell is not None else {}
                for kind, cell, column in zip(value.types, row, value.columns, strict=True)
            ]
            for row in value.rows
        ],
    }


def _template(value: Template) -> dict[str, Any]:
    members = []
    for member in value.metrics:
        columns: dict[str, Any] = {}
        if member.value is not None and member.datatype is not None:
            if member.datatype in ARRAY_TYPES or isinstance(member.value, DataSet | Template):
                columns = {"json_value": json.dumps(_plain(member.value))}
            else:
                columns = _cell(member.datatype, member.value, member.name)
        members.append(
            {
                "name": member.name,
                "alias": member.alias,
                "datatype": member.datatype.name if member.datatype is not None else None,
                "is_null": member.is_null or member.value is None,
                **columns,
            }
        )
    return {
        "version": value.version,
        "template_ref": value.template_ref,
        "is_definition": value.is_definition,
        "parameters": [
            {
                "name": p.name,
                "type": p.type.name if p.type is not None else None,
                **(_cell(p.type, p.value, p.name) if p.type and p.value is not None else {}),
            }
            for p in value.parameters
        ],
        "metrics": members,
    }


def _plain(value: object) -> Any:
    """A value as JSON-able data (for nested values the columns do not type)."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, DataSet):
        return {"columns": list(value.columns), "rows": _plain(value.rows)}
    if isinstance(value, Template):
        return {
            "template_ref": value.template_ref,
            "metrics": {m.name: _plain(m.value) for m in value.metrics},
        }
    if isinstance(value, PropertySet):
        return {k: _plain(v.value) for k, v in zip(value.keys, value.values, strict=True)}
    return value


def _properties(properties: PropertySet | None) -> list[tuple[str, str | None]] | None:
    if properties is None:
        return None
    out = []
    for key, item in zip(properties.keys, properties.values, strict=True):
        value = item.value
        if value is None or isinstance(value, str):
            out.append((key, value))
        else:
            out.append((key, json.dumps(_plain(value))))
    return out


def _micros(millis: int | None, what: str) -> int | None:
    """Milliseconds since the epoch as the microseconds of a Spark timestamp."""
    if millis is None:
        return None
    if millis * 1000 > _LONG_MAX:
        raise SparkplugPayloadError(f"{what} {millis} beyond the range of a timestamp")
    return millis * 1000


# ---------------------------------------------------------------------------------------
# Spark


def birth_rows(frame: DataFrame, births: Births | None = None) -> Births:
    """`births` plus the valid BIRTHs of `frame` (collected to the driver: BIRTHs are few)."""
    from pyspark.sql import functions as F

    found = births if births is not None else Births()
    rows = frame.where(F.col("topic").rlike(_BIRTH_TOPIC)).select("seq", "topic", "payload")
    for seq, topic, data in rows.collect():
        found.add_message(seq, topic, data)
    return found


def decode_sparkplug(
    frame: DataFrame, ledger: BirthLedger | None = None, batch_id: int | None = None
) -> DataFrame:
    """Metric rows and quarantine rows together (`decoded_schema()`); `sparkplug_metrics` splits
    them. With a `ledger`, `batch_id` (the micro-batch id) is required."""
    if ledger is not None and batch_id is None:
        raise ValueError("a BirthLedger needs the micro-batch id")
    before = ledger.before(batch_id) if ledger is not None and batch_id is not None else Births()
    births = birth_rows(frame, before)
    if ledger is not None and batch_id is not None:
        ledger.save(batch_id, births.latest())
    journal = frame.select("seq", "ts", "topic", "payload")

    def decode(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            yield decode_batch(batch, births)

    return journal.mapInArrow(decode, decoded_schema())


def sparkplug_metrics(
    frame: DataFrame, ledger: BirthLedger | None = None, batch_id: int | None = None
) -> tuple[DataFrame, DataFrame]:
    """(metrics, quarantine) of the Sparkplug rows of `frame` (see the module's docstring)."""
    return split_decoded(decode_sparkplug(frame, ledger, batch_id))


def split_decoded(decoded: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(metrics, quarantine) of `decode_sparkplug`'s frame (persist it first to decode once
    for both)."""
    from pyspark.sql import functions as F

    metrics = decoded.where(F.col("reason").isNull()).select(*METRIC_COLUMNS)
    quarantine = decoded.where(F.col("reason").isNotNull()).select(
        "seq", "ts", "topic", "payload", "metric_index", "reason"
    )
    return metrics, quarantine
