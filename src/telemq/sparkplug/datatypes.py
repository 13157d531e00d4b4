"""Sparkplug B datatypes, and how a value of each sits in the protobuf ``value`` oneof.

The specification stores every value in one of a few protobuf fields: the integers in
``int_value`` (uint32) or ``long_value`` (uint64), ``float_value``, ``double_value``,
``boolean_value``, ``string_value`` and ``bytes_value``. The datatype says how to read it:

- signed integers are two's complement in the unsigned field. Encoders disagree on the
  width: some write ``Int8 -1`` as 255 (the width of the type), others as 4294967295 (sign
  extended to the field). `from_wire` accepts both and refuses anything else; `to_wire`
  writes the width of the type, as the specification's examples do.
- ``DateTime`` is milliseconds since the epoch in ``long_value``, kept as an int here.
- the array types are packed little-endian in ``bytes_value``; ``BooleanArray`` is a 4-byte
  little-endian count then the bits, most significant first; ``StringArray`` is
  NUL-terminated UTF-8 strings.

A value that does not fit its datatype (a string in an Int32, 300 in an Int8, 7 bytes of
Int32Array) raises `ValueError` with the reason; the payload decoder turns it into a
`SparkplugPayloadError`. `DataSet`, `Template`, `PropertySet` and `PropertySetList` are
messages, handled by the payload module.
"""

from __future__ import annotations

import struct
from enum import IntEnum


class DataType(IntEnum):
    """The datatype enumeration of the specification (``DataType`` in sparkplug_b.proto)."""

    Unknown = 0
    Int8 = 1
    Int16 = 2
    Int32 = 3
    Int64 = 4
    UInt8 = 5
    UInt16 = 6
    UInt32 = 7
    UInt64 = 8
    Float = 9
    Double = 10
    Boolean = 11
    String = 12
    DateTime = 13
    Text = 14
    UUID = 15
    DataSet = 16
    Bytes = 17
    File = 18
    Template = 19
    PropertySet = 20
    PropertySetList = 21
    Int8Array = 22
    Int16Array = 23
    Int32Array = 24
    Int64Array = 25
    UInt8Array = 26
    UInt16Array = 27
    UInt32Array = 28
    UInt64Array = 29
    FloatArray = 30
    DoubleArray = 31
    BooleanArray = 32
    StringArray = 33
    DateTimeArray = 34


Scalar = int | float | bool | str | bytes
ArrayValue = tuple[int, ...] | tuple[float, ...] | tuple[bool, ...] | tuple[str, ...]

SIGNED_BITS = {DataType.Int8: 8, DataType.Int16: 16, DataType.Int32: 32, DataType.Int64: 64}
UNSIGNED_BITS = {
    DataType.UInt8: 8,
    DataType.UInt16: 16,
    DataType.UInt32: 32,
    DataType.UInt64: 64,
    DataType.DateTime: 64,
}
INTEGER_TYPES = frozenset(SIGNED_BITS) | frozenset(UNSIGNED_BITS)
STRING_TYPES = frozenset({DataType.String, DataType.Text, DataType.UUID})
BYTES_TYPES = frozenset({DataType.Bytes, DataType.File})
# struct format of one element of each packed array type
ARRAY_FORMATS = {
    DataType.Int8Array: "b",
    DataType.Int16Array: "h",
    DataType.Int32Array: "i",
    DataType.Int64Array: "q",
    DataType.UInt8Array: "B",
    DataType.UInt16Array: "H",
    DataType.UInt32Array: "I",
    DataType.UInt64Array: "Q",
    DataType.FloatArray: "f",
    DataType.DoubleArray: "d",
    DataType.DateTimeArray: "Q",
}
ARRAY_TYPES = frozenset(ARRAY_FORMATS) | {DataType.BooleanArray, DataType.StringArray}
# The types a metric's value, a DataSet cell or a Template parameter may hold as a scalar.
SCALAR_TYPES = (
    INTEGER_TYPES | STRING_TYPES | BYTES_TYPES | {DataType.Float, DataType.Double, DataType.Boolean}
)


def datatype(code: int) -> DataType:
    """The `DataType` of a wire code; `ValueError` for a code the specification lacks."""
    try:
        return DataType(code)
    except ValueError:
        raise ValueError(f"unknown datatype {code}") from None


def from_wire(kind: DataType, field: str, raw: object) -> Scalar | ArrayValue:
    """The value of datatype `kind` held in the oneof `field` as `raw`."""
    if kind in INTEGER_TYPES:
        if field not in ("int_value", "long_value") or not isinstance(raw, int):
            raise ValueError(f"{kind.name} value in {field}")
        return _integer(kind, raw, 32 if field == "int_value" else 64)
    expected = _FIELD_OF.get(kind)
    if expected is None:
        raise ValueError(f"{kind.name} is not a value datatype")
    if field != expected:
        raise ValueError(f"{kind.name} value in {field}")
    if kind in ARRAY_TYPES:
        assert isinstance(raw, bytes)
        return unpack_array(kind, raw)
    return raw  # type: ignore[return-value]


def to_wire(kind: DataType, value: object) -> tuple[str, Scalar]:
    """The oneof field and wire value that hold `value` of datatype `kind`."""
    if kind in INTEGER_TYPES:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{kind.name} value {value!r} is not an int")
        bits = SIGNED_BITS.get(kind) or UNSIGNED_BITS[kind]
        low = -(1 << (bits - 1)) if kind in SIGNED_BITS else 0
        high = (1 << (bits - 1)) if kind in SIGNED_BITS else (1 << bits)
        if not low <= value < high:
            raise ValueError(f"{kind.name} value {value} out of range")
        return ("int_value" if bits <= 32 else "long_value"), value % (1 << bits)
    if kind in ARRAY_TYPES:
        if not isinstance(value, tuple | list):
            raise ValueError(f"{kind.name} value {value!r} is not a sequence")
        return "bytes_value", pack_array(kind, tuple(value))
    field = _FIELD_OF.get(kind)
    if field is None:
        raise ValueError(f"{kind.name} is not a scalar datatype")
    python_type = _PYTHON_TYPE[field]
    if not isinstance(value, python_type) or (python_type is float and isinstance(value, bool)):
        if python_type is float and isinstance(value, int) and not isinstance(value, bool):
            return field, float(value)
        raise ValueError(f"{kind.name} value {value!r} is not a {python_type.__name__}")
    return field, value  # type: ignore[return-value]


def raw_field(value: object) -> tuple[str, Scalar]:
    """The oneof field for a value sent without a datatype (as DATA messages may): the
    datatype then comes from the BIRTH, and `from_wire` reads it there."""
    if isinstance(value, bool):
        return "boolean_value", value
    if isinstance(value, int):
        if not 0 <= value < 1 << 64:
            raise ValueError(f"an integer without a datatype must be unsigned: {value}")
        return ("int_value" if value < 1 << 32 else "long_value"), value
    if isinstance(value, float):
        return "double_value", value
    if isinstance(value, str):
        return "string_value", value
    if isinstance(value, bytes):
        return "bytes_value", value
    raise ValueError(f"no wire field for {type(value).__name__} without a datatype")


def _integer(kind: DataType, raw: int, field_bits: int) -> int:
    if kind in UNSIGNED_BITS:
        bits = UNSIGNED_BITS[kind]
        if raw >= 1 << bits:
            raise ValueError(f"{kind.name} value {raw} out of range")
        return raw
    bits = SIGNED_BITS[kind]
    if raw < 1 << bits:  # two's complement in the type's width
        return raw - (1 << bits) if raw >= 1 << (bits - 1) else raw
    if bits < field_bits and raw >= (1 << field_bits) - (1 << (bits - 1)):
        return raw - (1 << field_bits)  # sign-extended to the field's width
    raise ValueError(f"{kind.name} value {raw} out of range")


def unpack_array(kind: DataType, data: bytes) -> ArrayValue:
    """The elements of a packed array of datatype `kind`."""
    if kind is DataType.StringArray:
        if data and not data.endswith(b"\0"):
            raise ValueError("StringArray does not end with NUL")
        try:
            return tuple(part.decode("utf-8") for part in data.split(b"\0")[:-1])
        except UnicodeDecodeError as error:
            raise ValueError(f"StringArray element is not UTF-8: {error.reason}") from None
    if kind is DataType.BooleanArray:
        if len(data) < 4:
            raise ValueError("BooleanArray shorter than its 4-byte count")
        (count,) = struct.unpack_from("<I", data)
        if len(data) - 4 != (count + 7) // 8:
            raise ValueError(f"BooleanArray of {count} values has {len(data) - 4} bytes of bits")
        return tuple(bool(data[4 + i // 8] & (0x80 >> (i % 8))) for i in range(count))
    code = ARRAY_FORMATS[kind]
    width = struct.calcsize(code)
    if len(data) % width:
        raise ValueError(f"{kind.name} of {len(data)} bytes is not a multiple of {width}")
    return struct.unpack(f"<{len(data) // width}{code}", data)


def pack_array(kind: DataType, values: tuple[object, ...]) -> bytes:
    """The packed bytes of an array of datatype `kind`."""
    if kind is DataType.StringArray:
        if not all(isinstance(v, str) and "\0" not in v for v in values):
            raise ValueError("StringArray elements must be strings without NUL")
        return b"".join(str(v).encode("utf-8") + b"\0" for v in values)
    if kind is DataType.BooleanArray:
        if not all(isinstance(v, bool) for v in values):
            raise ValueError("BooleanArray elements must be booleans")
        bits = bytearray((len(values) + 7) // 8)
        for i, flag in enumerate(values):
            if flag:
                bits[i // 8] |= 0x80 >> (i % 8)
        return struct.pack("<I", len(values)) + bytes(bits)
    try:
        return struct.pack(f"<{len(values)}{ARRAY_FORMATS[kind]}", *values)
    except struct.error as error:
        raise ValueError(f"{kind.name}: {error}") from None


_FIELD_OF: dict[DataType, str] = {
    DataType.Float: "float_value",
    DataType.Double: "double_value",
    DataType.Boolean: "boolean_value",
    **dict.fromkeys(STRING_TYPES, "string_value"),
    **dict.fromkeys(BYTES_TYPES, "bytes_value"),
    **dict.fromkeys(ARRAY_TYPES, "bytes_value"),
}
_PYTHON_TYPE: dict[str, type] = {
    "float_value": float,
    "double_value": float,
    "boolean_value": bool,
    "string_value": str,
    "bytes_value": bytes,
}
