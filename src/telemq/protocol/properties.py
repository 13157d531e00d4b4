"""MQTT 5.0 properties (OASIS MQTT 5.0 §2.2.2): `Properties` <-> bytes.

Theory of operation
-------------------
A property block is a Property Length (a Variable Byte Integer) followed by that many bytes of
properties, each an identifier and a value of the identifier's type (§2.2.2.2, Table 2-4).
The block sits in the variable header of every packet but PINGREQ/PINGRESP, and a second one,
the Will Properties, in CONNECT's payload; a `PropertyContext` names the carrier, since which
properties it may hold depends on it.

What properties there are, which blocks may carry each, and the `Properties` record that
holds a block's values are property_table.py's; this module reads and writes blocks.

`decode_properties` reads one block in place, from `offset` without passing `end`, and raises
`PropertyError` with the reason code the connection sends in its CONNACK or DISCONNECT:

- 0x81 (Malformed Packet) for what cannot be parsed: a length or value running past the block
  or the packet, a Variable Byte Integer over four bytes, an unknown identifier, and an
  identifier not valid for the packet type ("A Control Packet which contains an Identifier
  which is not valid for its packet type ... is a Malformed Packet", §2.2.2.2); strings that
  are not well-formed UTF-8 or contain U+0000 (§1.5.4, §1.5.7) or a control character (which
  §1.5.4 lets a receiver treat as malformed, as `codec` does for MQTT 3.1.1).
- 0x82 (Protocol Error) for what parses but breaks a rule stated per property: a property given
  twice ("It is a Protocol Error to include ... more than once"), a 0/1 property with another
  value, a Receive Maximum, Maximum Packet Size or Subscription Identifier of 0, and CONNECT
  Authentication Data without an Authentication Method (§3.1.2.11.10).
- 0x94 (Topic Alias invalid) for a Topic Alias of 0, the code §3.3.4 names for it.

Rules that need the connection's state (a Topic Alias above the maximum, a Subscription
Identifier sent by a client, the Authentication Method AUTH must carry) are the caller's.

`encode_properties` writes a block in identifier order (deterministic bytes) and raises
`ValueError` for whatever the decoder would refuse: the caller built something illegal.

The common block is the empty one, `b"\\x00"`, which both directions take without looking at
the table. The per-property code compares identifiers as int literals, not `PropertyId`
members: integer comparisons once compiled with mypyc.
"""

from __future__ import annotations

from typing import Final

from .errors import MalformedPacket
from .property_table import (
    PROPERTY_TABLE,
    Properties,
    PropertyContext,
    PropertyId,
)
from .reasons import ReasonCode
from .topics import forbidden_character

__all__ = [
    "CORRELATION_DATA",
    "EMPTY_PROPERTIES_BYTES",
    "MALFORMED_PACKET",
    "MAX_PROPERTY_LENGTH",
    "MAX_SUBSCRIPTION_ID",
    "PROTOCOL_ERROR",
    "TOPIC_ALIAS_INVALID",
    "Buffer",
    "PropertyError",
    "correlation_data_property",
    "decode_properties",
    "encode_properties",
    "message_expiry_property",
    "message_properties",
    "read_message_properties",
    "subscription_identifier_property",
    "without_correlation_data",
]


# The table as the codec reads it, indexed by identifier: the type (0 = unknown identifier)
# and a bit mask of the allowed contexts (bit `1 << context`).
_ID_LIMIT: Final = 0x2B
_TYPE_OF: Final[dict[int, int]] = {int(i): int(row[0]) for i, row in PROPERTY_TABLE.items()}
_TYPES: Final[tuple[int, ...]] = tuple(_TYPE_OF.get(i, 0) for i in range(_ID_LIMIT))
_CONTEXTS: Final[tuple[int, ...]] = tuple(
    sum(1 << c for c in PROPERTY_TABLE[PropertyId(i)][1]) if i in _TYPE_OF else 0
    for i in range(_ID_LIMIT)
)
_BYTE: Final = 1
_TWO: Final = 2
_VARINT: Final = 4
_STRING: Final = 5
_BINARY: Final = 6
_PAIR: Final = 7
_MAXIMUMS: Final[tuple[int, ...]] = (0, 0xFF, 0xFFFF, 0xFFFF_FFFF, 268_435_455)

# Value rules (bit `1 << identifier`): 0 or 1 only; never 0.
_ZERO_OR_ONE: Final = sum(1 << i for i in (0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A))
_NOT_ZERO: Final = sum(1 << i for i in (0x0B, 0x21, 0x23, 0x27))

MALFORMED_PACKET: Final[int] = ReasonCode.MALFORMED_PACKET
PROTOCOL_ERROR: Final[int] = ReasonCode.PROTOCOL_ERROR
TOPIC_ALIAS_INVALID: Final[int] = ReasonCode.TOPIC_ALIAS_INVALID
EMPTY_PROPERTIES_BYTES: Final = b"\x00"
MAX_PROPERTY_LENGTH: Final = 268_435_455
Buffer = bytes | memoryview  # what `decode_properties` reads


class PropertyError(MalformedPacket):
    """A property block the peer is disconnected for; `reason` is the MQTT 5.0 reason code
    to send first (0x81, 0x82 or 0x94, see the module docstring)."""

    def __init__(self, message: str, reason: int = MALFORMED_PACKET) -> None:
        super().__init__(message, reason)


def _name(ident: int) -> str:
    """'topic alias' for 0x23 (for messages)."""
    return PropertyId(ident).name.lower().replace("_", " ")


def _value_problem(ident: int, value: int) -> str | None:
    """Why an integer property's value breaks its own rule, or None (§3.1.2.11, §3.2.2.3,
    §3.3.2.3, §3.8.2.1)."""
    if _ZERO_OR_ONE >> ident & 1 and value > 1:
        return f"{_name(ident)} must be 0 or 1, got {value}"
    if _NOT_ZERO >> ident & 1 and value == 0:
        return f"{_name(ident)} must not be 0"
    return None


# ---------------------------------------------------------------------------
# Encoding


def _varint(value: int) -> bytes:
    if value < 128:
        return bytes((value,))
    out = bytearray()
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _put_id(out: bytearray, ident: int, allowed: int) -> None:
    if not _CONTEXTS[ident] & allowed:
        raise ValueError(f"{_name(ident)} is not allowed here")
    out.append(ident)


def _put_int(out: bytearray, ident: int, value: int | None, allowed: int) -> None:
    if value is None:
        return
    kind = _TYPES[ident]
    if not 0 <= value <= _MAXIMUMS[kind]:
        raise ValueError(f"{_name(ident)} {value} is out of range 0..{_MAXIMUMS[kind]}")
    problem = _value_problem(ident, value)
    if problem is not None:
        raise ValueError(problem)
    _put_id(out, ident, allowed)
    if kind == _BYTE:
        out.append(value)
    elif kind == _VARINT:
        out += _varint(value)
    else:
        out += value.to_bytes(2 if kind == _TWO else 4, "big")


def _put_string(out: bytearray, ident: int, value: str | None, allowed: int) -> None:
    """`ident` 0: the value of a user property (no identifier of its own)."""
    if value is None:
        return
    forbidden = forbidden_character(value)
    if forbidden is not None:
        raise ValueError(f"string {value!r} contains {forbidden}")
    if ident == 0x08 and ("+" in value or "#" in value):
        raise ValueError(f"Response Topic {value!r} has a wildcard")  # [MQTT-3.3.2-14]
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"string {value!r} is not valid Unicode (a lone surrogate)") from None
    _put_binary(out, ident, data, allowed)


def _put_binary(out: bytearray, ident: int, data: bytes | None, allowed: int) -> None:
    if data is None:
        return
    if len(data) > 0xFFFF:
        raise ValueError(f"{len(data)} bytes do not fit a two-byte length")
    if ident:
        _put_id(out, ident, allowed)
    out += len(data).to_bytes(2, "big")
    out += data


def encode_properties(props: Properties, context: PropertyContext) -> bytes:
    """The property block of `props` for `context`: Property Length, then the properties in
    identifier order (user properties in their own). `ValueError` for what may not be sent."""
    if props.is_empty():
        return EMPTY_PROPERTIES_BYTES
    allowed = 1 << context
    out = bytearray()
    _put_int(out, 0x01, props.payload_format_indicator, allowed)
    _put_int(out, 0x02, props.message_expiry_interval, allowed)
    _put_string(out, 0x03, props.content_type, allowed)
    _put_string(out, 0x08, props.response_topic, allowed)
    _put_binary(out, 0x09, props.correlation_data, allowed)
    if len(props.subscription_identifiers) > 1 and context != PropertyContext.PUBLISH:
        raise ValueError("several subscription identifiers are only allowed in PUBLISH")
    for identifier in props.subscription_identifiers:
        _put_int(out, 0x0B, identifier, allowed)
    _put_int(out, 0x11, props.session_expiry_interval, allowed)
    _put_string(out, 0x12, props.assigned_client_identifier, allowed)
    _put_int(out, 0x13, props.server_keep_alive, allowed)
    _put_string(out, 0x15, props.authentication_method, allowed)
    if (  # §3.1.2.11.10
        props.authentication_data is not None
        and props.authentication_method is None
        and context == PropertyContext.CONNECT
    ):
        raise ValueError("authentication data without an authentication method")
    _put_binary(out, 0x16, props.authentication_data, allowed)
    _put_int(out, 0x17, props.request_problem_information, allowed)
    _put_int(out, 0x18, props.will_delay_interval, allowed)
    _put_int(out, 0x19, props.request_response_information, allowed)
    _put_string(out, 0x1A, props.response_information, allowed)
    _put_string(out, 0x1C, props.server_reference, allowed)
    _put_string(out, 0x1F, props.reason_string, allowed)
    _put_int(out, 0x21, props.receive_maximum, allowed)
    _put_int(out, 0x22, props.topic_alias_maximum, allowed)
    _put_int(out, 0x23, props.topic_alias, allowed)
    _put_int(out, 0x24, props.maximum_qos, allowed)
    _put_int(out, 0x25, props.retain_available, allowed)
    for name, value in props.user_properties:
        _put_string(out, 0x26, name, allowed)
        _put_string(out, 0, value, allowed)
    _put_int(out, 0x27, props.maximum_packet_size, allowed)
    _put_int(out, 0x28, props.wildcard_subscription_available, allowed)
    _put_int(out, 0x29, props.subscription_identifier_available, allowed)
    _put_int(out, 0x2A, props.shared_subscription_available, allowed)
    if len(out) > MAX_PROPERTY_LENGTH:
        raise ValueError(f"{len(out)} bytes of properties exceed {MAX_PROPERTY_LENGTH}")
    return _varint(len(out)) + out


def message_properties(props: Properties) -> bytes:
    """What a server forwards of a PUBLISH's properties, unchanged [MQTT-3.3.2-4..20]: the
    Payload Format Indicator, Content Type, Response Topic, Correlation Data and User
    Properties, encoded one after the other without a Property Length (b"" for none). The
    Message Expiry Interval is the caller's to write (it shrinks while the message waits);
    the Topic Alias and Subscription Identifiers belong to one connection."""
    if (
        props.payload_format_indicator is None
        and props.content_type is None
        and props.response_topic is None
        and props.correlation_data is None
        and not props.user_properties
    ):
        return b""
    allowed = 1 << PropertyContext.PUBLISH
    out = bytearray()
    _put_int(out, 0x01, props.payload_format_indicator, allowed)
    _put_string(out, 0x03, props.content_type, allowed)
    _put_string(out, 0x08, props.response_topic, allowed)
    _put_binary(out, 0x09, props.correlation_data, allowed)
    for name, value in props.user_properties:
        _put_string(out, 0x26, name, allowed)
        _put_string(out, 0, value, allowed)
    return bytes(out)


MAX_SUBSCRIPTION_ID: Final = 268_435_455  # a Variable Byte Integer's largest value


def subscription_identifier_property(identifier: int) -> bytes:
    """A Subscription Identifier property (identifier 0x0B, Variable Byte Integer)."""
    return b"\x0b" + _varint(identifier)


def message_expiry_property(seconds: int) -> bytes:
    """A Message Expiry Interval property (identifier 0x02, Four Byte Integer)."""
    return b"\x02" + seconds.to_bytes(4, "big")


CORRELATION_DATA: Final = 0x09


def correlation_data_property(data: bytes) -> bytes:
    """A Correlation Data property (identifier 0x09, Binary Data)."""
    return b"\x09" + len(data).to_bytes(2, "big") + data


def read_message_properties(data: bytes) -> Properties:
    """Properties encoded one after the other without a Property Length (what
    `message_properties` writes, with a Message Expiry Interval before them or not), read
    back. `PropertyError` for bytes that are not such properties."""
    block = _varint(len(data)) + data
    return decode_properties(block, 0, len(block), PropertyContext.PUBLISH)[0]


def without_correlation_data(data: bytes) -> bytes:
    """`data` (as `read_message_properties` reads it) without its Correlation Data: for a
    delivery that carries one of its own (an MQ CorrelAsId subscription's CorrelId)."""
    props = read_message_properties(data)
    if props.correlation_data is None:
        return data
    props.correlation_data = None
    expiry = props.message_expiry_interval
    kept = message_properties(props)
    return kept if expiry is None else message_expiry_property(expiry) + kept


# ---------------------------------------------------------------------------
# Decoding
#
# The readers take the context and identifier rather than a description, so that the
# message is only formatted for an error.


def _label(context: int, ident: int) -> str:
    """'PUBLISH: topic alias' (for messages; `ident` 0: the Property Length)."""
    what = _name(ident) if ident else "property length"
    return f"{PropertyContext(context).name}: {what}"


def _read_varint(data: Buffer, pos: int, stop: int, context: int, ident: int) -> tuple[int, int]:
    """A Variable Byte Integer (§1.5.5) at `pos`, and the position after it (`ident` 0: the
    Property Length)."""
    value = 0
    shift = 0
    while True:
        if pos >= stop:
            raise PropertyError(f"{_label(context, ident)} ends early")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift == 28:
            raise PropertyError(f"{_label(context, ident)} is longer than 4 bytes")


def _read_binary(data: Buffer, pos: int, stop: int, context: int, ident: int) -> tuple[int, int]:
    """The bounds (start, end) of the Binary Data or string at `pos` (§1.5.6)."""
    if pos + 2 > stop:
        raise PropertyError(f"{_label(context, ident)} ends early")
    start = pos + 2
    end = start + ((data[pos] << 8) | data[pos + 1])
    if end > stop:
        raise PropertyError(f"{_label(context, ident)} runs past the end of the properties")
    return start, end


def _read_string(data: Buffer, pos: int, stop: int, context: int, ident: int) -> tuple[str, int]:
    """A UTF-8 Encoded String (§1.5.4) at `pos`, and the position after it."""
    start, end = _read_binary(data, pos, stop, context, ident)
    try:
        value = str(data[start:end], "utf-8")
    except UnicodeDecodeError:
        raise PropertyError(f"{_label(context, ident)} is not valid UTF-8") from None
    if not value.isprintable():  # U+0000 and the control characters (`topics`)
        forbidden = forbidden_character(value)
        if forbidden is not None:
            raise PropertyError(f"{_label(context, ident)} contains {forbidden}")
    return value, end


def _store_int(props: Properties, context: int, ident: int, value: int) -> None:
    problem = _value_problem(ident, value)
    if problem is not None:
        reason = TOPIC_ALIAS_INVALID if ident == 0x23 else PROTOCOL_ERROR
        raise PropertyError(f"{PropertyContext(context).name}: {problem}", reason)
    if ident == 0x01:
        props.payload_format_indicator = value
    elif ident == 0x02:
        props.message_expiry_interval = value
    elif ident == 0x0B:
        props.subscription_identifiers.append(value)
    elif ident == 0x23:
        props.topic_alias = value
    elif ident == 0x11:
        props.session_expiry_interval = value
    elif ident == 0x13:
        props.server_keep_alive = value
    elif ident == 0x17:
        props.request_problem_information = value
    elif ident == 0x18:
        props.will_delay_interval = value
    elif ident == 0x19:
        props.request_response_information = value
    elif ident == 0x21:
        props.receive_maximum = value
    elif ident == 0x22:
        props.topic_alias_maximum = value
    elif ident == 0x24:
        props.maximum_qos = value
    elif ident == 0x25:
        props.retain_available = value
    elif ident == 0x27:
        props.maximum_packet_size = value
    elif ident == 0x28:
        props.wildcard_subscription_available = value
    elif ident == 0x29:
        props.subscription_identifier_available = value
    else:
        props.shared_subscription_available = value


def _store_string(props: Properties, ident: int, value: str) -> None:
    if ident == 0x03:
        props.content_type = value
    elif ident == 0x08:
        if "+" in value or "#" in value:  # [MQTT-3.3.2-14]
            raise PropertyError(f"Response Topic {value!r} has a wildcard", PROTOCOL_ERROR)
        props.response_topic = value
    elif ident == 0x12:
        props.assigned_client_identifier = value
    elif ident == 0x15:
        props.authentication_method = value
    elif ident == 0x1A:
        props.response_information = value
    elif ident == 0x1C:
        props.server_reference = value
    else:
        props.reason_string = value


def decode_properties(
    data: Buffer, offset: int, end: int, context: PropertyContext
) -> tuple[Properties, int]:
    """The property block at `offset` (not reading at or past `end`, at most `len(data)`),
    and the offset after it. `PropertyError` for a block that is malformed or breaks a rule
    of §2.2.2 and §3."""
    if offset < end and data[offset] == 0:
        return Properties(), offset + 1
    where = int(context)
    length, pos = _read_varint(data, offset, end, where, 0)
    stop = pos + length
    if stop > end:
        raise PropertyError(f"{context.name}: {length} bytes of properties run past the packet")
    props = Properties()
    allowed = 1 << where
    repeatable = 1 << 0x26  # user property (§3.3.2.3.7); subscription ids in PUBLISH (§3.3.4)
    if where == PropertyContext.PUBLISH:
        repeatable |= 1 << 0x0B
    seen = 0
    while pos < stop:
        ident = data[pos]  # one byte: every identifier is below 128 (§2.2.2.2)
        pos += 1
        kind = _TYPES[ident] if ident < _ID_LIMIT else 0
        if kind == 0:
            raise PropertyError(f"{context.name}: unknown property identifier 0x{ident:02X}")
        if not _CONTEXTS[ident] & allowed:
            raise PropertyError(f"{_label(where, ident)} is not valid in this packet")
        bit = 1 << ident
        if seen & bit and not repeatable & bit:
            raise PropertyError(f"{_label(where, ident)} is included twice", PROTOCOL_ERROR)
        seen |= bit
        if kind == _STRING:
            text, pos = _read_string(data, pos, stop, where, ident)
            _store_string(props, ident, text)
        elif kind == _PAIR:
            name, pos = _read_string(data, pos, stop, where, ident)
            value, pos = _read_string(data, pos, stop, where, ident)
            props.user_properties.append((name, value))
        elif kind == _BINARY:
            start, pos = _read_binary(data, pos, stop, where, ident)
            if ident == 0x09:
                props.correlation_data = bytes(data[start:pos])
            else:
                props.authentication_data = bytes(data[start:pos])
        elif kind == _VARINT:
            number, pos = _read_varint(data, pos, stop, where, ident)
            _store_int(props, where, ident, number)
        else:
            size = 1 if kind == _BYTE else 2 if kind == _TWO else 4
            if pos + size > stop:
                raise PropertyError(f"{_label(where, ident)} ends early")
            number = 0
            for index in range(pos, pos + size):
                number = (number << 8) | data[index]
            pos += size
            _store_int(props, where, ident, number)
    if (
        props.authentication_data is not None
        and props.authentication_method is None
        and where == PropertyContext.CONNECT
    ):
        raise PropertyError(  # §3.1.2.11.10
            f"{context.name}: authentication data without an authentication method",
            PROTOCOL_ERROR,
        )
    return props, stop
