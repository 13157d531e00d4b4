"""Sparkplug B payloads and topics (telemq.sparkplug): round trips, the specification's
wire examples, and the reasons given for bad input."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemq.sparkplug import (
    DataSet,
    DataType,
    MessageType,
    MetaData,
    Metric,
    Payload,
    PropertySet,
    PropertyValue,
    SparkplugPayloadError,
    SparkplugTopic,
    SparkplugTopicError,
    Template,
    TemplateParameter,
    birth_aliases,
    decode_payload,
    encode_payload,
    parse_topic,
    resolve_metrics,
)
from telemq.sparkplug.schema import PAYLOAD

# -- topics -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "parsed"),
    [
        ("spBv1.0/G1/NBIRTH/E1", SparkplugTopic(MessageType.NBIRTH, "G1", "E1")),
        ("spBv1.0/G1/NDATA/E1", SparkplugTopic(MessageType.NDATA, "G1", "E1")),
        ("spBv1.0/G1/NCMD/E1", SparkplugTopic(MessageType.NCMD, "G1", "E1")),
        ("spBv1.0/G 1/DDATA/E1/pump 3", SparkplugTopic(MessageType.DDATA, "G 1", "E1", "pump 3")),
        ("spBv1.0/G1/DDEATH/E1/D", SparkplugTopic(MessageType.DDEATH, "G1", "E1", "D")),
        ("spBv1.0/STATE/scada-1", SparkplugTopic(MessageType.STATE, host_id="scada-1")),
    ],
)
def test_topics_parse_and_print_back(topic: str, parsed: SparkplugTopic) -> None:
    assert parse_topic(topic) == parsed
    assert str(parsed) == topic


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        ("spAv1.0/G/NDATA/E", "the namespace is not spBv1.0"),
        ("spBv1.0/G/NDATA", "too few levels for <group>/<type>/<edge node>"),
        ("spBv1.0/G/NDATA/E/D", "NDATA takes no device level"),
        ("spBv1.0/G/DDATA/E", "DDATA needs exactly one device level"),
        ("spBv1.0/G/DDATA/E/D/x", "DDATA needs exactly one device level"),
        ("spBv1.0/G/XDATA/E", "unknown message type 'XDATA'"),
        ("spBv1.0//NDATA/E", "level 1 is empty"),
        ("spBv1.0/G/NDATA/+", "level 3 holds a wildcard character"),
        ("spBv1.0/STATE/a/b", "a STATE topic is spBv1.0/STATE/<host id>"),
        ("spBv1.0/G/STATE/E", "a STATE topic is spBv1.0/STATE/<host id>"),
    ],
)
def test_broken_topics_name_the_problem(topic: str, reason: str) -> None:
    with pytest.raises(SparkplugTopicError) as caught:
        parse_topic(topic)
    assert caught.value.reason == reason
    assert topic in str(caught.value)


# -- the specification's wire forms -----------------------------------------------------


def one_metric(**fields: object) -> bytes:
    message = PAYLOAD()
    metric = message.metrics.add()
    for name, value in fields.items():
        if isinstance(value, PAYLOAD.DataSet | PAYLOAD.PropertySet):
            getattr(metric, name).CopyFrom(value)
        else:
            setattr(metric, name, value)
    return bytes(message.SerializeToString())


@pytest.mark.parametrize(
    ("kind", "raw", "value"),
    [
        (DataType.Int8Array, bytes([0xEF, 0x7B]), (-17, 123)),
        (DataType.Int16Array, bytes([0xD0, 0x8A, 0x30, 0x75]), (-30000, 30000)),
        (DataType.Int32Array, bytes.fromhex("fffffffffaafcb12"), (-1, 315338746)),
        (DataType.UInt16Array, bytes([0x1E, 0x00, 0x88, 0xCC]), (30, 52360)),
        (DataType.UInt64Array, bytes.fromhex("3400000000000000d99e02d1b27637e4"),
         (52, 16444743074749521625)),
        (DataType.BooleanArray, bytes([0x0C, 0, 0, 0, 0x34, 0xD0]),
         (False, False, True, True, False, True, False, False, True, True, False, True)),
        (DataType.StringArray, b"ABC\0hello\0", ("ABC", "hello")),
        (DataType.DateTimeArray, struct.pack("<2Q", 1256102875335, 1656107875000),
         (1256102875335, 1656107875000)),
    ],
)  # fmt: skip
def test_packed_arrays_read_as_the_specification_writes_them(
    kind: DataType, raw: bytes, value: tuple[object, ...]
) -> None:
    payload = decode_payload(one_metric(name="a", datatype=int(kind), bytes_value=raw))
    assert payload.metrics[0].value == value
    if kind is not DataType.BooleanArray:  # its padding bits are "do not care"
        assert decode_payload(encode_payload(payload)) == payload
        assert encode_payload(payload) == one_metric(name="a", datatype=int(kind), bytes_value=raw)


@pytest.mark.parametrize(
    ("kind", "field", "raw", "value"),
    [
        (DataType.Int8, "int_value", 255, -1),  # two's complement in the type's width
        (DataType.Int8, "int_value", 0xFFFFFFFF, -1),  # sign-extended to the field's
        (DataType.Int16, "int_value", 0xFFFF8000, -32768),
        (DataType.Int32, "int_value", 0x80000000, -(2**31)),
        (DataType.Int64, "long_value", 2**64 - 1, -1),
        (DataType.UInt32, "long_value", 2**32 - 1, 2**32 - 1),  # some encoders use long_value
        (DataType.UInt64, "long_value", 2**64 - 1, 2**64 - 1),
        (DataType.DateTime, "long_value", 1656107875000, 1656107875000),
    ],
)
def test_integers_read_in_both_widths(kind: DataType, field: str, raw: int, value: int) -> None:
    payload = decode_payload(one_metric(name="n", datatype=int(kind), **{field: raw}))
    assert payload.metrics[0].value == value


# -- round trips ------------------------------------------------------------------------

names = st.text(min_size=1, max_size=8)
float32 = st.floats(width=32, allow_nan=False)


def ints(bits: int, signed: bool) -> st.SearchStrategy[int]:
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return st.integers(low, high)


SCALARS: dict[DataType, st.SearchStrategy[object]] = {
    DataType.Int8: ints(8, True),
    DataType.Int16: ints(16, True),
    DataType.Int32: ints(32, True),
    DataType.Int64: ints(64, True),
    DataType.UInt8: ints(8, False),
    DataType.UInt16: ints(16, False),
    DataType.UInt32: ints(32, False),
    DataType.UInt64: ints(64, False),
    DataType.DateTime: ints(64, False),
    DataType.Float: float32,
    DataType.Double: st.floats(allow_nan=False),
    DataType.Boolean: st.booleans(),
    DataType.String: st.text(max_size=10),
    DataType.Text: st.text(max_size=10),
    DataType.UUID: st.uuids().map(str),
}
ARRAYS: dict[DataType, st.SearchStrategy[object]] = {
    DataType.Int8Array: st.tuples(ints(8, True), ints(8, True)),
    DataType.Int64Array: st.lists(ints(64, True), max_size=3).map(tuple),
    DataType.UInt32Array: st.lists(ints(32, False), max_size=3).map(tuple),
    DataType.FloatArray: st.lists(float32, max_size=3).map(tuple),
    DataType.DoubleArray: st.lists(st.floats(allow_nan=False), max_size=3).map(tuple),
    DataType.BooleanArray: st.lists(st.booleans(), max_size=17).map(tuple),
    DataType.StringArray: st.lists(st.text(st.characters(exclude_characters="\0")), max_size=3).map(
        tuple
    ),
    DataType.Bytes: st.binary(max_size=8),
    DataType.File: st.binary(max_size=8),
}


@st.composite
def typed_values(
    draw: st.DrawFn, pool: dict[DataType, st.SearchStrategy[object]]
) -> tuple[DataType, object]:
    kind = draw(st.sampled_from(sorted(pool)))
    return kind, draw(pool[kind])


property_sets = st.deferred(
    lambda: st.lists(st.tuples(names, property_values), max_size=3, unique_by=lambda kv: kv[0]).map(
        lambda items: PropertySet(tuple(k for k, _ in items), tuple(v for _, v in items))
    )
)
property_values = st.one_of(
    typed_values(SCALARS).map(lambda kv: PropertyValue(kv[0], kv[1])),  # type: ignore[arg-type]
    st.sampled_from(sorted(SCALARS)).map(lambda k: PropertyValue(k, None, is_null=True)),
    property_sets.map(lambda s: PropertyValue(DataType.PropertySet, s)),
    st.lists(property_sets, max_size=2).map(
        lambda sets: PropertyValue(DataType.PropertySetList, tuple(sets))
    ),
)


@st.composite
def datasets(draw: st.DrawFn) -> DataSet:
    kinds = draw(st.lists(st.sampled_from(sorted(SCALARS)), max_size=3))
    rows = draw(st.lists(st.tuples(*(st.one_of(st.none(), SCALARS[k]) for k in kinds)), max_size=3))
    columns = tuple(f"c{i}" for i in range(len(kinds)))
    return DataSet(columns, tuple(kinds), tuple(rows))


@st.composite
def metrics(draw: st.DrawFn, depth: int = 1) -> Metric:
    choice = draw(st.integers(0, 4 if depth else 2))
    if choice == 0:
        kind, value = draw(typed_values(SCALARS))
    elif choice == 1:
        kind, value = draw(typed_values(ARRAYS))
    elif choice == 2:
        kind, value = draw(st.sampled_from(sorted(SCALARS))), None
    elif choice == 3:
        kind, value = DataType.DataSet, draw(datasets())
    else:
        parameters = draw(
            st.lists(
                typed_values(SCALARS).map(lambda kv: TemplateParameter("p", kv[0], kv[1])),  # type: ignore[arg-type]
                max_size=2,
            )
        )
        kind, value = (
            DataType.Template,
            Template(
                version=draw(st.none() | names),
                metrics=tuple(draw(st.lists(metrics(depth - 1), max_size=2))),
                parameters=tuple(parameters),
                template_ref=draw(st.none() | names),
                is_definition=draw(st.booleans()),
            ),
        )
    return Metric(
        name=draw(names),
        alias=draw(st.none() | ints(64, False)),
        timestamp=draw(st.none() | ints(64, False)),
        datatype=kind,
        value=value,
        is_null=value is None and draw(st.booleans()),
        is_historical=draw(st.booleans()),
        is_transient=draw(st.booleans()),
        properties=draw(st.none() | property_sets),
        metadata=draw(
            st.none()
            | st.builds(MetaData, content_type=st.none() | names, size=st.none() | ints(64, False))
        ),
    )


payloads = st.builds(
    Payload,
    timestamp=st.none() | ints(64, False),
    seq=st.none() | st.integers(0, 255),
    metrics=st.lists(metrics(), max_size=4).map(tuple),
    uuid=st.none() | names,
    body=st.none() | st.binary(max_size=8),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads)
def test_decode_inverts_encode(payload: Payload) -> None:
    assert decode_payload(encode_payload(payload)) == payload


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_fail_with_a_reason(data: bytes) -> None:
    try:
        payload = decode_payload(data)
    except SparkplugPayloadError as error:
        assert error.reason
    else:
        assert decode_payload(encode_payload(payload)) == payload


# -- births, aliases and data without datatypes ------------------------------------------

BIRTH = Payload(
    timestamp=1,
    seq=0,
    metrics=(
        Metric("bdSeq", 0, datatype=DataType.Int64, value=0),
        Metric("Pressure", 1, datatype=DataType.Float, value=2.5),
        Metric("Level", 2, datatype=DataType.Int16, value=-3),
        Metric("Tags", 3, datatype=DataType.StringArray, value=("a", "b")),
    ),
)


def test_data_by_alias_resolves_through_its_birth() -> None:
    aliases = birth_aliases(decode_payload(encode_payload(BIRTH), MessageType.NBIRTH))
    data = Payload(
        timestamp=2,
        seq=1,
        metrics=(
            Metric(alias=1, value=3.75, wire_field="float_value"),
            Metric(alias=2, value=0xFFFE),  # Int16 -2, sent without its datatype
            Metric(alias=3, value=b"x\0"),
            Metric(alias=2, is_null=True),
        ),
    )
    decoded = decode_payload(encode_payload(data), MessageType.NDATA)
    assert decoded.metrics[0].datatype is None
    assert [
        (m.name, m.datatype, m.value, m.is_null) for m in resolve_metrics(decoded, aliases)
    ] == [
        ("Pressure", DataType.Float, 3.75, False),
        ("Level", DataType.Int16, -2, False),
        ("Tags", DataType.StringArray, ("x",), False),
        ("Level", DataType.Int16, None, True),
    ]
    with pytest.raises(SparkplugPayloadError, match="alias 9 is not in the BIRTH"):
        resolve_metrics(Payload(metrics=(Metric(alias=9, value=1),)), aliases)
    with pytest.raises(SparkplugPayloadError, match="Int16 value 65536 out of range"):
        resolve_metrics(Payload(metrics=(Metric(alias=2, value=65536),)), aliases)


@pytest.mark.parametrize(
    ("metrics", "reason"),
    [
        ((Metric("a", 1, datatype=DataType.Int8, value=1), Metric("b", 1, datatype=DataType.Int8)),
         "BIRTH gives alias 1 to both 'a' and 'b'"),
        ((Metric("a", 1, datatype=DataType.Int8), Metric("a", 2, datatype=DataType.Int8)),
         "BIRTH names metric 'a' twice"),
        ((Metric(alias=1, datatype=DataType.Int8),), "BIRTH metric 0 has no name"),
        ((Metric("a", 1, value=3),), "BIRTH metric 'a' has no datatype"),
    ],
)  # fmt: skip
def test_bad_births_name_the_problem(metrics: tuple[Metric, ...], reason: str) -> None:
    data = encode_payload(Payload(timestamp=1, seq=0, metrics=metrics))
    decode_payload(data, MessageType.NDATA)  # fine as data
    with pytest.raises(SparkplugPayloadError) as caught:
        decode_payload(data, MessageType.DBIRTH)
    assert caught.value.reason == reason


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x0a\x05\x0a", "not a Sparkplug B protobuf message"),
        (one_metric(name="a", datatype=3, string_value="x"),
         "metric 'a': Int32 value in string_value"),
        (one_metric(name="a", datatype=1, int_value=300),
         "metric 'a': Int8 value 300 out of range"),
        (one_metric(name="a", datatype=99, int_value=1), "unknown datatype 99"),
        (one_metric(name="a", datatype=24, bytes_value=b"1234567"),
         "metric 'a': Int32Array of 7 bytes is not a multiple of 4"),
        (one_metric(name="a", datatype=32, bytes_value=b"\x09\0\0\0\xff"),
         "metric 'a': BooleanArray of 9 values has 1 bytes of bits"),
        (one_metric(name="a", datatype=33, bytes_value=b"ab"),
         "metric 'a': StringArray does not end with NUL"),
        (one_metric(name="a", datatype=16, int_value=1), "metric 'a': DataSet value in int_value"),
        (one_metric(alias=5, datatype=12, dataset_value=PAYLOAD.DataSet(columns=["x"])),
         "alias 5: String value in dataset_value"),
        (one_metric(name="a", datatype=16, dataset_value=PAYLOAD.DataSet(columns=["x"], types=[])),
         "metric 'a': DataSet has 1 columns but 0 types"),
        (one_metric(name="a", properties=PAYLOAD.PropertySet(keys=["k"])),
         "metric 'a': PropertySet has 1 keys but 0 values"),
        (PAYLOAD(seq=256).SerializeToString(), "seq 256 is not between 0 and 255"),
    ],
)  # fmt: skip
def test_bad_payloads_name_the_problem(data: bytes, reason: str) -> None:
    with pytest.raises(SparkplugPayloadError) as caught:
        decode_payload(data)
    assert caught.value.reason.startswith(reason)


def test_encoding_refuses_what_the_datatype_cannot_hold() -> None:
    for metric, reason in [
        (Metric("a", datatype=DataType.Int8, value=128), "metric 'a': Int8 value 128 out of range"),
        (Metric("a", datatype=DataType.String, value=1), "metric 'a': String value 1 is not a str"),
        (Metric("a", datatype=DataType.Int32, value=DataSet((), ())), "metric 'a': a DataSet"),
    ]:
        with pytest.raises(SparkplugPayloadError) as caught:
            encode_payload(Payload(metrics=(metric,)))
        assert caught.value.reason.startswith(reason)


def test_nan_floats_survive() -> None:
    payload = Payload(metrics=(Metric("x", datatype=DataType.Double, value=math.nan),))
    (metric,) = decode_payload(encode_payload(payload)).metrics
    assert isinstance(metric.value, float) and math.isnan(metric.value)
