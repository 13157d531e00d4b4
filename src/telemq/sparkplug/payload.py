"""Sparkplug B payloads as typed values: decode, validate, encode.

`decode_payload(data, message_type)` parses the protobuf bytes (the message classes of
`schema`) into frozen dataclasses: a `Payload` of `Metric`s, each with its name, alias,
timestamp, datatype, flags, `PropertySet`, `MetaData` and its value read by its datatype
(`datatypes.from_wire`: signed integers, DateTime milliseconds, packed arrays as tuples,
`DataSet`, `Template`). A metric sent without a datatype (DATA messages may leave it to the
BIRTH) keeps its raw wire value and field; `Metric.with_birth(name, datatype)` reads it once
the BIRTH is known (`birth_aliases`).

Anything the specification forbids and a reader cannot make sense of raises
`SparkplugPayloadError` with the reason: bytes that are not the protobuf message, a value in
the wrong field for its datatype or out of its range, an unknown datatype, a PropertySet
whose keys and values differ in number, a DataSet whose rows do not fit its columns, and in
a BIRTH (given its `message_type`) a metric without a name or datatype and a duplicate name
or alias. `encode_payload` is the inverse (``decode_payload(encode_payload(p)) == p``), with
the same checks on what it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from google.protobuf.message import DecodeError

from .datatypes import (
    SCALAR_TYPES,
    ArrayValue,
    DataType,
    Scalar,
    datatype,
    from_wire,
    raw_field,
    to_wire,
)
from .schema import PAYLOAD
from .topic import MessageType


class SparkplugPayloadError(ValueError):
    """A payload that is not a valid Sparkplug B payload; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"invalid Sparkplug B payload: {reason}")
        self.reason = reason


PropertyScalar = int | float | bool | str


@dataclass(frozen=True, slots=True)
class PropertyValue:
    type: DataType
    value: PropertyScalar | PropertySet | tuple[PropertySet, ...] | None
    is_null: bool = False


@dataclass(frozen=True, slots=True)
class PropertySet:
    """A map as two lists of the same length, as on the wire."""

    keys: tuple[str, ...] = ()
    values: tuple[PropertyValue, ...] = ()

    def as_dict(self) -> dict[str, PropertyValue]:
        return dict(zip(self.keys, self.values, strict=True))


DataSetCell = int | float | bool | str | None


@dataclass(frozen=True, slots=True)
class DataSet:
    columns: tuple[str, ...]
    types: tuple[DataType, ...]
    rows: tuple[tuple[DataSetCell, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class TemplateParameter:
    name: str | None
    type: DataType | None
    value: PropertyScalar | None = None


@dataclass(frozen=True, slots=True)
class Template:
    version: str | None = None
    metrics: tuple[Metric, ...] = ()
    parameters: tuple[TemplateParameter, ...] = ()
    template_ref: str | None = None
    is_definition: bool = False


@dataclass(frozen=True, slots=True)
class MetaData:
    is_multi_part: bool | None = None
    content_type: str | None = None
    size: int | None = None
    seq: int | None = None
    file_name: str | None = None
    file_type: str | None = None
    md5: str | None = None
    description: str | None = None


MetricValue = Scalar | ArrayValue | DataSet | Template | None
_METADATA_FIELDS = tuple(MetaData.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric. `value` is read by `datatype`; without a datatype it is the raw wire
    value, and `wire_field` (not compared) remembers which oneof field held it."""

    name: str | None = None
    alias: int | None = None
    timestamp: int | None = None
    datatype: DataType | None = None
    value: MetricValue = None
    is_null: bool = False
    is_historical: bool = False
    is_transient: bool = False
    properties: PropertySet | None = None
    metadata: MetaData | None = None
    wire_field: str | None = field(default=None, compare=False, repr=False)

    def with_birth(self, name: str, kind: DataType) -> Metric:
        """This metric with the name and datatype its BIRTH gave its alias, its raw value
        read by that datatype; `SparkplugPayloadError` if the value does not fit it."""
        if self.datatype is not None and self.datatype is not kind:
            raise SparkplugPayloadError(
                f"metric {name!r} is {self.datatype.name} here but {kind.name} in its BIRTH"
            )
        value = self.value
        if self.datatype is None and value is not None:
            try:
                value = _read_raw(kind, self.wire_field, value)
            except ValueError as error:
                raise SparkplugPayloadError(f"metric {name!r}: {error}") from None
        return replace(self, name=name, datatype=kind, value=value)


@dataclass(frozen=True, slots=True)
class Payload:
    timestamp: int | None = None
    seq: int | None = None
    metrics: tuple[Metric, ...] = ()
    uuid: str | None = None
    body: bytes | None = None


@dataclass(frozen=True, slots=True)
class BirthMetric:
    """What a BIRTH says of one alias: the metric's name and datatype."""

    name: str
    datatype: DataType


# ---------------------------------------------------------------------------------------
# decoding


def decode_payload(data: bytes, message_type: MessageType | str | None = None) -> Payload:
    """The payload in `data`; with a BIRTH `message_type`, checked as a BIRTH too."""
    try:
        message = PAYLOAD.FromString(data)
    except DecodeError as error:
        raise SparkplugPayloadError(f"not a Sparkplug B protobuf message ({error})") from None
    try:
        payload = Payload(
            timestamp=_optional(message, "timestamp"),
            seq=_optional(message, "seq"),
            metrics=tuple(_metric(m) for m in message.metrics),
            uuid=_optional(message, "uuid"),
            body=_optional(message, "body"),
        )
    except ValueError as error:
        if isinstance(error, SparkplugPayloadError):
            raise
        raise SparkplugPayloadError(str(error)) from None
    validate_payload(payload, message_type)
    return payload


def validate_payload(payload: Payload, message_type: MessageType | str | None = None) -> None:
    """The checks that need the whole payload (and its message type)."""
    if payload.seq is not None and payload.seq > 255:
        raise SparkplugPayloadError(f"seq {payload.seq} is not between 0 and 255")
    kind = MessageType(message_type) if message_type is not None else None
    if kind is not None and kind.is_birth:
        birth_aliases(payload)
    elif kind is not None and not kind.is_death and kind is not MessageType.STATE:
        for index, metric in enumerate(payload.metrics):
            if metric.name is None and metric.alias is None:
                raise SparkplugPayloadError(f"metric {index} has neither a name nor an alias")


def birth_aliases(payload: Payload) -> dict[int, BirthMetric]:
    """The alias map a BIRTH defines; `SparkplugPayloadError` for a metric without a name or
    a datatype, a name given twice or an alias given twice."""
    names: set[str] = set()
    aliases: dict[int, BirthMetric] = {}
    for index, metric in enumerate(payload.metrics):
        if not metric.name:
            raise SparkplugPayloadError(f"BIRTH metric {index} has no name")
        if metric.datatype is None:
            raise SparkplugPayloadError(f"BIRTH metric {metric.name!r} has no datatype")
        if metric.name in names:
            raise SparkplugPayloadError(f"BIRTH names metric {metric.name!r} twice")
        names.add(metric.name)
        if metric.alias is not None:
            if metric.alias in aliases:
                raise SparkplugPayloadError(
                    f"BIRTH gives alias {metric.alias} to both"
                    f" {aliases[metric.alias].name!r} and {metric.name!r}"
                )
            aliases[metric.alias] = BirthMetric(metric.name, metric.datatype)
    return aliases


def resolve_metrics(payload: Payload, aliases: Mapping[int, BirthMetric]) -> tuple[Metric, ...]:
    """The payload's metrics with names and datatypes from `aliases` (a BIRTH's map); a
    metric that has its own name keeps it. `SparkplugPayloadError` for an alias the map
    lacks."""
    resolved = []
    for metric in payload.metrics:
        if metric.alias is not None and metric.name is None:
            birth = aliases.get(metric.alias)
            if birth is None:
                raise SparkplugPayloadError(f"alias {metric.alias} is not in the BIRTH")
            metric = metric.with_birth(birth.name, birth.datatype)
        resolved.append(metric)
    return tuple(resolved)


def _read_raw(kind: DataType, wire_field: str | None, value: MetricValue) -> MetricValue:
    """A value sent without a datatype, read by the datatype of its BIRTH."""
    if isinstance(value, DataSet | Template):
        if kind is not (DataType.DataSet if isinstance(value, DataSet) else DataType.Template):
            raise ValueError(f"{kind.name} value in a {type(value).__name__}")
        return value
    if isinstance(value, tuple):
        raise ValueError("an array value without a datatype")
    field_name = wire_field if wire_field is not None else raw_field(value)[0]
    return from_wire(kind, field_name, value)


def _optional(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def _metric(message: Any) -> Metric:
    name = _optional(message, "name")
    kind = datatype(message.datatype) if message.HasField("datatype") else None
    where = f"metric {name!r}" if name is not None else f"alias {_optional(message, 'alias')}"
    field_name = message.WhichOneof("value")
    is_null = message.is_null
    value: MetricValue = None
    try:
        if field_name is not None and not is_null:
            value = _metric_value(message, field_name, kind)
        properties = _property_set(message.properties) if message.HasField("properties") else None
    except ValueError as error:
        if isinstance(error, SparkplugPayloadError):
            raise
        raise SparkplugPayloadError(f"{where}: {error}") from None
    return Metric(
        name=name,
        alias=_optional(message, "alias"),
        timestamp=_optional(message, "timestamp"),
        datatype=kind,
        value=value,
        is_null=is_null,
        is_historical=message.is_historical,
        is_transient=message.is_transient,
        properties=properties,
        metadata=(
            MetaData(**{f: _optional(message.metadata, f) for f in _METADATA_FIELDS})
            if message.HasField("metadata")
            else None
        ),
        wire_field=field_name if kind is None else None,
    )


def _metric_value(message: Any, field_name: str, kind: DataType | None) -> MetricValue:
    if field_name == "extension_value":
        raise ValueError("holds an extension value, which has no meaning here")
    if field_name == "dataset_value":
        if kind not in (None, DataType.DataSet):
            raise ValueError(f"{kind.name} value in dataset_value")
        return _dataset(message.dataset_value)
    if field_name == "template_value":
        if kind not in (None, DataType.Template):
            raise ValueError(f"{kind.name} value in template_value")
        return _template(message.template_value)
    raw = getattr(message, field_name)
    if kind is None:
        return raw  # type: ignore[no-any-return]
    if kind in (DataType.DataSet, DataType.Template):
        raise ValueError(f"{kind.name} value in {field_name}")
    return from_wire(kind, field_name, raw)


def _scalar(kind: DataType | None, message: Any, what: str) -> PropertyScalar | None:
    """The value of a DataSet cell, Template parameter or property value of type `kind`."""
    field_name = message.WhichOneof("value")
    if field_name is None:
        return None
    if field_name == "extension_value":
        raise ValueError(f"{what} holds an extension value")
    raw = getattr(message, field_name)
    if kind is None:
        return raw  # type: ignore[no-any-return]
    if kind not in SCALAR_TYPES:
        raise ValueError(f"{what} has type {kind.name}")
    return from_wire(kind, field_name, raw)  # type: ignore[return-value]


def _dataset(message: Any) -> DataSet:
    types = tuple(datatype(t) for t in message.types)
    columns = tuple(message.columns)
    if len(types) != len(columns):
        raise ValueError(f"DataSet has {len(columns)} columns but {len(types)} types")
    if message.HasField("num_of_columns") and message.num_of_columns != len(columns):
        raise ValueError(
            f"DataSet num_of_columns {message.num_of_columns} but {len(columns)} columns"
        )
    rows = []
    for number, row in enumerate(message.rows):
        if len(row.elements) != len(types):
            raise ValueError(f"DataSet row {number} has {len(row.elements)} of {len(types)} values")
        rows.append(
            tuple(
                _scalar(kind, cell, f"DataSet row {number} column {columns[i]!r}")
                for i, (kind, cell) in enumerate(zip(types, row.elements, strict=True))
            )
        )
    return DataSet(columns, types, tuple(rows))


def _template(message: Any) -> Template:
    parameters = []
    for parameter in message.parameters:
        kind = datatype(parameter.type) if parameter.HasField("type") else None
        name = _optional(parameter, "name")
        parameters.append(
            TemplateParameter(name, kind, _scalar(kind, parameter, f"parameter {name!r}"))
        )
    return Template(
        version=_optional(message, "version"),
        metrics=tuple(_metric(m) for m in message.metrics),
        parameters=tuple(parameters),
        template_ref=_optional(message, "template_ref"),
        is_definition=message.is_definition,
    )


def _property_set(message: Any) -> PropertySet:
    if len(message.keys) != len(message.values):
        raise ValueError(
            f"PropertySet has {len(message.keys)} keys but {len(message.values)} values"
        )
    values = []
    for key, item in zip(message.keys, message.values, strict=True):
        kind = datatype(item.type)
        field_name = item.WhichOneof("value")
        value: Any
        if item.is_null or field_name is None:
            value = None
        elif field_name == "propertyset_value":
            if kind is not DataType.PropertySet:
                raise ValueError(f"property {key!r} of type {kind.name} holds a PropertySet")
            value = _property_set(item.propertyset_value)
        elif field_name == "propertysets_value":
            if kind is not DataType.PropertySetList:
                raise ValueError(f"property {key!r} of type {kind.name} holds a PropertySetList")
            value = tuple(_property_set(s) for s in item.propertysets_value.propertyset)
        else:
            value = _scalar(kind, item, f"property {key!r}")
        values.append(PropertyValue(kind, value, item.is_null))
    return PropertySet(tuple(message.keys), tuple(values))


# ---------------------------------------------------------------------------------------
# encoding


def encode_payload(payload: Payload) -> bytes:
    """The protobuf bytes of `payload`; `SparkplugPayloadError` for a value its datatype
    cannot hold (the same rules as decoding)."""
    message = PAYLOAD()
    if payload.timestamp is not None:
        message.timestamp = payload.timestamp
    if payload.seq is not None:
        message.seq = payload.seq
    if payload.uuid is not None:
        message.uuid = payload.uuid
    if payload.body is not None:
        message.body = payload.body
    try:
        for metric in payload.metrics:
            _put_metric(message.metrics.add(), metric)
    except ValueError as error:
        if isinstance(error, SparkplugPayloadError):
            raise
        raise SparkplugPayloadError(str(error)) from None
    return bytes(message.SerializeToString())


def _put_metric(message: Any, metric: Metric) -> None:
    for name in ("name", "alias", "timestamp"):
        if getattr(metric, name) is not None:
            setattr(message, name, getattr(metric, name))
    if metric.datatype is not None:
        message.datatype = int(metric.datatype)
    for flag in ("is_historical", "is_transient", "is_null"):
        if getattr(metric, flag):
            setattr(message, flag, True)
    if metric.metadata is not None:
        message.metadata.SetInParent()
        for name in _METADATA_FIELDS:
            if getattr(metric.metadata, name) is not None:
                setattr(message.metadata, name, getattr(metric.metadata, name))
    if metric.properties is not None:
        _put_property_set(message.properties, metric.properties)
    value = metric.value
    if value is None or metric.is_null:
        return
    where = f"metric {metric.name if metric.name is not None else metric.alias!r}"
    if isinstance(value, DataSet):
        if metric.datatype not in (None, DataType.DataSet):
            raise SparkplugPayloadError(f"{where}: a DataSet value for {metric.datatype}")
        _put_dataset(message.dataset_value, value)
    elif isinstance(value, Template):
        if metric.datatype not in (None, DataType.Template):
            raise SparkplugPayloadError(f"{where}: a Template value for {metric.datatype}")
        _put_template(message.template_value, value)
    else:
        try:
            if metric.datatype is not None:
                field_name, raw = to_wire(metric.datatype, value)
            elif metric.wire_field is not None:
                field_name, raw = metric.wire_field, value  # type: ignore[assignment]
            else:
                field_name, raw = raw_field(value)
        except ValueError as error:
            raise SparkplugPayloadError(f"{where}: {error}") from None
        setattr(message, field_name, raw)


def _put_scalar(message: Any, kind: DataType | None, value: object, what: str) -> None:
    if value is None:
        return
    field_name, raw = to_wire(kind, value) if kind is not None else raw_field(value)
    if field_name == "bytes_value":
        raise ValueError(f"{what} cannot hold bytes")
    setattr(message, field_name, raw)


def _put_dataset(message: Any, dataset: DataSet) -> None:
    if len(dataset.columns) != len(dataset.types):
        raise ValueError(
            f"DataSet has {len(dataset.columns)} columns but {len(dataset.types)} types"
        )
    message.num_of_columns = len(dataset.columns)
    message.columns.extend(dataset.columns)
    message.types.extend(int(t) for t in dataset.types)
    for number, row in enumerate(dataset.rows):
        if len(row) != len(dataset.types):
            raise ValueError(f"DataSet row {number} has {len(row)} of {len(dataset.types)} values")
        out = message.rows.add()
        for kind, cell in zip(dataset.types, row, strict=True):
            _put_scalar(out.elements.add(), kind, cell, f"DataSet row {number}")


def _put_template(message: Any, template: Template) -> None:
    message.SetInParent()
    if template.version is not None:
        message.version = template.version
    if template.template_ref is not None:
        message.template_ref = template.template_ref
    if template.is_definition:
        message.is_definition = True
    for metric in template.metrics:
        _put_metric(message.metrics.add(), metric)
    for parameter in template.parameters:
        out = message.parameters.add()
        if parameter.name is not None:
            out.name = parameter.name
        if parameter.type is not None:
            out.type = int(parameter.type)
        _put_scalar(out, parameter.type, parameter.value, f"parameter {parameter.name!r}")


def _put_property_set(message: Any, properties: PropertySet) -> None:
    message.SetInParent()
    if len(properties.keys) != len(properties.values):
        raise ValueError(
            f"PropertySet has {len(properties.keys)} keys but {len(properties.values)} values"
        )
    message.keys.extend(properties.keys)
    for key, item in zip(properties.keys, properties.values, strict=True):
        out = message.values.add()
        out.type = int(item.type)
        if item.is_null:
            out.is_null = True
        value = item.value
        if value is None or item.is_null:
            continue
        if isinstance(value, PropertySet):
            if item.type is not DataType.PropertySet:
                raise ValueError(f"property {key!r} of type {item.type.name} holds a PropertySet")
            _put_property_set(out.propertyset_value, value)
        elif isinstance(value, tuple):
            if item.type is not DataType.PropertySetList:
                raise ValueError(f"property {key!r} of type {item.type.name} holds a list")
            out.propertysets_value.SetInParent()
            for entry in value:
                _put_property_set(out.propertysets_value.propertyset.add(), entry)
        else:
            if item.type not in SCALAR_TYPES:
                raise ValueError(f"property {key!r} has type {item.type.name}")
            _put_scalar(out, item.type, value, f"property {key!r}")
