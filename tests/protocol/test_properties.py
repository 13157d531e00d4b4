"""MQTT 5.0 property blocks (`telemq.protocol.properties`).

Golden bytes are written by hand from the encoding rules of OASIS MQTT 5.0 §1.5 and §2.2.2, and
the table of which packet may carry which property is copied here from Table 2-4, not read
from the module, so that both are checked against the specification. Then: the reason code of
every broken rule, truncation at every byte, fuzzing, and Hypothesis round trips.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemq.protocol.errors import MalformedPacket
from telemq.protocol.packets import PacketType
from telemq.protocol.properties import (
    EMPTY_PROPERTIES_BYTES,
    PropertyError,
    decode_properties,
    encode_properties,
)
from telemq.protocol.property_table import (
    PROPERTY_TABLE,
    Properties,
    PropertyContext,
    PropertyId,
    PropertyType,
)

C: TypeAlias = PropertyContext
P: TypeAlias = PropertyId
MALFORMED = 0x81
PROTOCOL_ERROR = 0x82
TOPIC_ALIAS_INVALID = 0x94

# Table 2-4 of the specification: identifier -> (type, the packets that may carry it).
ALL = set(C)
SPEC_TABLE: dict[int, tuple[str, set[C]]] = {
    0x01: ("byte", {C.PUBLISH, C.WILL}),
    0x02: ("four", {C.PUBLISH, C.WILL}),
    0x03: ("string", {C.PUBLISH, C.WILL}),
    0x08: ("string", {C.PUBLISH, C.WILL}),
    0x09: ("binary", {C.PUBLISH, C.WILL}),
    0x0B: ("varint", {C.PUBLISH, C.SUBSCRIBE}),
    0x11: ("four", {C.CONNECT, C.CONNACK, C.DISCONNECT}),
    0x12: ("string", {C.CONNACK}),
    0x13: ("two", {C.CONNACK}),
    0x15: ("string", {C.CONNECT, C.CONNACK, C.AUTH}),
    0x16: ("binary", {C.CONNECT, C.CONNACK, C.AUTH}),
    0x17: ("byte", {C.CONNECT}),
    0x18: ("four", {C.WILL}),
    0x19: ("byte", {C.CONNECT}),
    0x1A: ("string", {C.CONNACK}),
    0x1C: ("string", {C.CONNACK, C.DISCONNECT}),
    0x1F: (
        "string",
        {C.CONNACK, C.PUBACK, C.PUBREC, C.PUBREL, C.PUBCOMP, C.SUBACK, C.UNSUBACK}
        | {C.DISCONNECT, C.AUTH},
    ),
    0x21: ("two", {C.CONNECT, C.CONNACK}),
    0x22: ("two", {C.CONNECT, C.CONNACK}),
    0x23: ("two", {C.PUBLISH}),
    0x24: ("byte", {C.CONNACK}),
    0x25: ("byte", {C.CONNACK}),
    0x26: ("pair", ALL),
    0x27: ("four", {C.CONNECT, C.CONNACK}),
    0x28: ("byte", {C.CONNACK}),
    0x29: ("byte", {C.CONNACK}),
    0x2A: ("byte", {C.CONNACK}),
}
TYPE_NAMES = {
    "byte": PropertyType.BYTE,
    "two": PropertyType.TWO_BYTE_INTEGER,
    "four": PropertyType.FOUR_BYTE_INTEGER,
    "varint": PropertyType.VARIABLE_BYTE_INTEGER,
    "string": PropertyType.UTF8_STRING,
    "binary": PropertyType.BINARY_DATA,
    "pair": PropertyType.UTF8_STRING_PAIR,
}
# A valid value of each type (1 suits the 0/1 and the non-zero properties) and its bytes.
SAMPLES: dict[str, tuple[Any, bytes]] = {
    "byte": (1, b"\x01"),
    "two": (1, b"\x00\x01"),
    "four": (1, b"\x00\x00\x00\x01"),
    "varint": (1, b"\x01"),
    "string": ("x", b"\x00\x01x"),
    "binary": (b"x", b"\x00\x01x"),
    "pair": (("k", "v"), b"\x00\x01k\x00\x01v"),
}
LISTS = {0x0B: "subscription_identifiers", 0x26: "user_properties"}
ALLOWED = [(ident, context) for ident, (_, carriers) in SPEC_TABLE.items() for context in carriers]
FORBIDDEN = [(i, c) for i, (_, carriers) in SPEC_TABLE.items() for c in sorted(ALL - carriers)]


def field_name(ident: int) -> str:
    return LISTS.get(ident) or P(ident).name.lower()


def with_property(ident: int, value: Any) -> Properties:
    """Properties holding the one property `ident` (a list of one for the repeatable ones)."""
    fields: dict[str, Any] = {field_name(ident): [value] if ident in LISTS else value}
    return Properties(**fields)


def block(*properties: bytes) -> bytes:
    """A property block of at most 127 bytes: its one-byte length, then `properties`."""
    body = b"".join(properties)
    assert len(body) < 128
    return bytes((len(body),)) + body


def decode(data: bytes, context: C) -> tuple[Properties, int]:
    return decode_properties(data, 0, len(data), context)


def reason_of(data: bytes, context: C) -> int:
    with pytest.raises(PropertyError) as caught:
        decode(data, context)
    return caught.value.reason


def ident_name(item: tuple[int, C]) -> str:
    return f"{P(item[0]).name}-{item[1].name}"


# ---------------------------------------------------------------------------
# The table


def test_the_table_is_the_specifications() -> None:
    assert {int(ident) for ident in P} == set(SPEC_TABLE)
    for ident, (kind, carriers) in SPEC_TABLE.items():
        assert PROPERTY_TABLE[P(ident)] == (TYPE_NAMES[kind], frozenset(carriers))


def test_packet_contexts_are_valued_as_packet_types() -> None:
    for context in C:
        if context is C.WILL:
            continue
        if context is C.AUTH:
            assert int(context) == 15
        else:
            assert PacketType(context).name == context.name


# ---------------------------------------------------------------------------
# Golden bytes, written from §1.5 (big-endian integers, length-prefixed strings and binary
# data, 7-bit little-endian Variable Byte Integers) and §2.2.2 (a Property Length, then each
# identifier and value)

GOLDEN: list[tuple[str, C, Properties, bytes]] = [
    (
        "publish",
        C.PUBLISH,
        Properties(
            payload_format_indicator=1,
            message_expiry_interval=60,
            content_type="json",
            user_properties=[("a", "b")],
        ),
        b"\x15\x01\x01\x02\x00\x00\x00\x3c\x03\x00\x04json\x26\x00\x01a\x00\x01b",
    ),
    (
        "two-byte integers",
        C.CONNACK,
        Properties(server_keep_alive=120, receive_maximum=20, topic_alias_maximum=10),
        b"\x09\x13\x00\x78\x21\x00\x14\x22\x00\x0a",
    ),
    (
        "four-byte integers and bytes",
        C.CONNECT,
        Properties(
            session_expiry_interval=0xFFFFFFFF,
            maximum_packet_size=1024,
            request_problem_information=0,
            request_response_information=1,
        ),
        b"\x0e\x11\xff\xff\xff\xff\x17\x00\x19\x01\x27\x00\x00\x04\x00",
    ),
    (
        "largest subscription identifier",
        C.SUBSCRIBE,
        Properties(subscription_identifiers=[268_435_455]),
        b"\x05\x0b\xff\xff\xff\x7f",
    ),
    (
        "several subscription identifiers",
        C.PUBLISH,
        Properties(subscription_identifiers=[1, 128, 16384]),
        b"\x09\x0b\x01\x0b\x80\x01\x0b\x80\x80\x01",
    ),
    (
        "binary data",
        C.AUTH,
        Properties(
            authentication_method="SCRAM", authentication_data=b"\x00\xff", reason_string="go"
        ),
        b"\x12\x15\x00\x05SCRAM\x16\x00\x02\x00\xff\x1f\x00\x02go",
    ),
    (
        "disconnect",
        C.DISCONNECT,
        Properties(session_expiry_interval=0, server_reference="other:1883", reason_string="bye"),
        b"\x18\x11\x00\x00\x00\x00\x1c\x00\x0aother:1883\x1f\x00\x03bye",
    ),
    (
        "will",
        C.WILL,
        Properties(
            will_delay_interval=5, response_topic="r", correlation_data=b"id", content_type="t"
        ),
        b"\x12\x03\x00\x01t\x08\x00\x01r\x09\x00\x02id\x18\x00\x00\x00\x05",
    ),
    (
        "connack capabilities",
        C.CONNACK,
        Properties(
            maximum_qos=1,
            retain_available=0,
            wildcard_subscription_available=1,
            subscription_identifier_available=0,
            shared_subscription_available=1,
            assigned_client_identifier="c1",
            response_information="ri",
        ),
        b"\x14\x12\x00\x02c1\x1a\x00\x02ri\x24\x01\x25\x00\x28\x01\x29\x00\x2a\x01",
    ),
    (
        "utf-8 and repeated user properties",
        C.PUBACK,
        Properties(reason_string="é", user_properties=[("k", "v"), ("k", "v2")]),
        b"\x14\x1f\x00\x02\xc3\xa9\x26\x00\x01k\x00\x01v\x26\x00\x01k\x00\x02v2",
    ),
    (
        "empty string and largest topic alias",
        C.PUBLISH,
        Properties(topic_alias=65535, response_topic=""),
        b"\x06\x08\x00\x00\x23\xff\xff",
    ),
    (
        "two-byte property length",  # 206 = 0b1_1001110: 0xCE 0x01
        C.UNSUBSCRIBE,
        Properties(user_properties=[("k", "v" * 200)]),
        b"\xce\x01\x26\x00\x01k\x00\xc8" + b"v" * 200,
    ),
]


@pytest.mark.parametrize(
    ("context", "props", "expected"),
    [case[1:] for case in GOLDEN],
    ids=[case[0] for case in GOLDEN],
)
def test_golden_bytes(context: C, props: Properties, expected: bytes) -> None:
    assert encode_properties(props, context) == expected
    assert decode(expected, context) == (props, len(expected))


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (16383, b"\xff\x7f"),
        (16384, b"\x80\x80\x01"),
        (2_097_151, b"\xff\xff\x7f"),
        (2_097_152, b"\x80\x80\x80\x01"),
    ],
)
def test_variable_byte_integer_boundaries(value: int, encoded: bytes) -> None:
    """Table 1-1 of §1.5.5: the largest value of each size and the smallest of the next."""
    data = bytes((1 + len(encoded), 0x0B)) + encoded
    props = Properties(subscription_identifiers=[value])
    assert encode_properties(props, C.SUBSCRIBE) == data
    assert decode(data, C.SUBSCRIBE) == (props, len(data))


def test_order_on_the_wire_does_not_matter() -> None:
    """§2.2.2.2: "There is no significance in the order of Properties with different
    Identifiers"; the encoder's order is the identifiers'."""
    data = block(
        b"\x26\x00\x01a\x00\x01b", b"\x03\x00\x04json", b"\x02\x00\x00\x00\x3c", b"\x01\x01"
    )
    props, _ = decode(data, C.PUBLISH)
    assert props == GOLDEN[0][2]
    assert encode_properties(props, C.PUBLISH) == GOLDEN[0][3]


def test_byte_order_mark_is_kept() -> None:
    """[MQTT-1.5.4-3]: 0xEF 0xBB 0xBF is U+FEFF and is not stripped."""
    props, _ = decode(block(b"\x1f\x00\x04\xef\xbb\xbfx"), C.PUBACK)
    assert props.reason_string == "\ufeffx"


# ---------------------------------------------------------------------------
# No properties


@pytest.mark.parametrize("context", list(C), ids=lambda context: context.name)
def test_no_properties(context: C) -> None:
    assert EMPTY_PROPERTIES_BYTES == b"\x00"
    assert encode_properties(Properties(), context) == b"\x00"
    first, offset = decode_properties(b"ab\x00cd", 2, 5, context)
    assert (first, offset) == (Properties(), 3)
    first.user_properties.append(("a", "b"))
    first.subscription_identifiers.append(1)
    second, _ = decode(b"\x00", context)
    assert second.is_empty()  # a fresh instance every time


def test_is_empty() -> None:
    assert Properties().is_empty()
    for ident, (kind, _) in SPEC_TABLE.items():
        assert not with_property(ident, SAMPLES[kind][0]).is_empty(), P(ident).name


def test_property_error_is_a_malformed_packet() -> None:
    assert issubclass(PropertyError, MalformedPacket)
    assert PropertyError("x").reason == MALFORMED
    assert PropertyError("x", PROTOCOL_ERROR).reason == PROTOCOL_ERROR


# ---------------------------------------------------------------------------
# Which packet may carry which property


@pytest.mark.parametrize(("ident", "context"), ALLOWED, ids=[ident_name(a) for a in ALLOWED])
def test_allowed_property_round_trips(ident: int, context: C) -> None:
    value, encoded = SAMPLES[SPEC_TABLE[ident][0]]
    props = with_property(ident, value)
    if ident == P.AUTHENTICATION_DATA and context is C.CONNECT:
        props.authentication_method = "m"  # required with it in CONNECT, see below
    data = encode_properties(props, context)
    assert bytes((ident,)) + encoded in data
    assert decode(data, context) == (props, len(data))


@pytest.mark.parametrize(("ident", "context"), FORBIDDEN, ids=[ident_name(f) for f in FORBIDDEN])
def test_property_not_valid_for_the_packet(ident: int, context: C) -> None:
    """§2.2.2.2: "A Control Packet which contains an Identifier which is not valid for its
    packet type ... is a Malformed Packet"; the encoder refuses to write one."""
    value, encoded = SAMPLES[SPEC_TABLE[ident][0]]
    assert reason_of(block(bytes((ident,)) + encoded), context) == MALFORMED
    with pytest.raises(ValueError, match="not allowed"):
        encode_properties(with_property(ident, value), context)


def test_unknown_identifiers_are_malformed() -> None:
    for ident in range(256):
        if ident in SPEC_TABLE:
            continue
        for context in C:
            assert reason_of(block(bytes((ident,)), b"\x00\x00"), context) == MALFORMED


# ---------------------------------------------------------------------------
# Repeated properties

REPEATS = [(ident, context) for ident, context in ALLOWED if ident != P.USER_PROPERTY]


@pytest.mark.parametrize(("ident", "context"), REPEATS, ids=[ident_name(r) for r in REPEATS])
def test_a_property_given_twice(ident: int, context: C) -> None:
    """ "It is a Protocol Error to include the <property> more than once", said of each but the
    User Property (§3.3.2.3.7) and the Subscription Identifiers of a PUBLISH (§3.3.4)."""
    encoded = bytes((ident,)) + SAMPLES[SPEC_TABLE[ident][0]][1]
    data = block(b"\x15\x00\x01m", encoded, encoded) if ident == 0x16 else block(encoded, encoded)
    if ident == P.SUBSCRIPTION_IDENTIFIER and context is C.PUBLISH:
        assert decode(data, context) == (Properties(subscription_identifiers=[1, 1]), len(data))
    else:
        assert reason_of(data, context) == PROTOCOL_ERROR


@pytest.mark.parametrize("context", list(C), ids=lambda context: context.name)
def test_user_properties_repeat_in_order(context: C) -> None:
    pairs = [("b", "1"), ("a", "2"), ("b", "1"), ("b", "")]
    props = Properties(user_properties=pairs)
    data = encode_properties(props, context)
    expected = (
        b"\x26\x00\x01b\x00\x011\x26\x00\x01a\x00\x012\x26\x00\x01b\x00\x011\x26\x00\x01b\x00\x00"
    )
    assert data == bytes((len(expected),)) + expected
    assert decode(data, context) == (props, len(data))


def test_subscription_identifiers_keep_their_order() -> None:
    props = Properties(subscription_identifiers=[7, 3, 7])
    data = encode_properties(props, C.PUBLISH)
    assert data == b"\x06\x0b\x07\x0b\x03\x0b\x07"
    assert decode(data, C.PUBLISH)[0] == props


def test_several_subscription_identifiers_only_in_publish() -> None:
    with pytest.raises(ValueError, match="several subscription identifiers"):
        encode_properties(Properties(subscription_identifiers=[1, 2]), C.SUBSCRIBE)


# ---------------------------------------------------------------------------
# Values


BAD_VALUES: list[tuple[str, C, bytes, int]] = [
    # §3.3.2.3.2 / §3.1.3.2.3 define only 0 and 1; any other value is taken as a Protocol Error
    ("payload format indicator 2", C.PUBLISH, b"\x01\x02", PROTOCOL_ERROR),
    ("payload format indicator 255", C.WILL, b"\x01\xff", PROTOCOL_ERROR),
    # §3.1.2.11.6-7: "or to have a value other than 0 or 1"
    ("request response information 2", C.CONNECT, b"\x19\x02", PROTOCOL_ERROR),
    ("request problem information 2", C.CONNECT, b"\x17\x02", PROTOCOL_ERROR),
    # §3.2.2.3.4, .5, .11, .12, .13
    ("maximum qos 2", C.CONNACK, b"\x24\x02", PROTOCOL_ERROR),
    ("retain available 2", C.CONNACK, b"\x25\x02", PROTOCOL_ERROR),
    ("wildcard subscription available 2", C.CONNACK, b"\x28\x02", PROTOCOL_ERROR),
    ("subscription identifier available 2", C.CONNACK, b"\x29\x02", PROTOCOL_ERROR),
    ("shared subscription available 2", C.CONNACK, b"\x2a\x02", PROTOCOL_ERROR),
    # §3.1.2.11.3, §3.2.2.3.3: "or for it to have the value 0"
    ("receive maximum 0 in connect", C.CONNECT, b"\x21\x00\x00", PROTOCOL_ERROR),
    ("receive maximum 0 in connack", C.CONNACK, b"\x21\x00\x00", PROTOCOL_ERROR),
    # §3.1.2.11.4, §3.2.2.3.6: "or for the value to be set to zero"
    ("maximum packet size 0 in connect", C.CONNECT, b"\x27\x00\x00\x00\x00", PROTOCOL_ERROR),
    ("maximum packet size 0 in connack", C.CONNACK, b"\x27\x00\x00\x00\x00", PROTOCOL_ERROR),
    # §3.3.2.3.8, §3.8.2.1.2: "It is a Protocol Error if the Subscription Identifier has a
    # value of 0"
    ("subscription identifier 0 in publish", C.PUBLISH, b"\x0b\x00", PROTOCOL_ERROR),
    ("subscription identifier 0 in subscribe", C.SUBSCRIBE, b"\x0b\x00", PROTOCOL_ERROR),
    # §3.3.4: "A Topic Alias value of 0 ... is a Protocol Error, the receiver uses DISCONNECT
    # with Reason Code of 0x94 (Topic Alias invalid)"
    ("topic alias 0", C.PUBLISH, b"\x23\x00\x00", TOPIC_ALIAS_INVALID),
    # §3.1.2.11.10: "It is a Protocol Error to include Authentication Data if there is no
    # Authentication Method"
    ("authentication data without a method", C.CONNECT, b"\x16\x00\x01x", PROTOCOL_ERROR),
    # §1.5.5: at most four bytes
    ("5-byte variable byte integer", C.PUBLISH, b"\x0b\x80\x80\x80\x80\x01", MALFORMED),
    # §1.5.4, §1.5.7: ill-formed UTF-8 and U+0000 are malformed; control characters may be
    ("invalid utf-8", C.PUBLISH, b"\x03\x00\x01\xff", MALFORMED),
    ("overlong utf-8", C.PUBLISH, b"\x03\x00\x02\xc0\xaf", MALFORMED),
    ("encoded surrogate", C.PUBLISH, b"\x03\x00\x03\xed\xa0\x80", MALFORMED),
    ("null character", C.PUBLISH, b"\x08\x00\x03a\x00b", MALFORMED),
    ("U+0001", C.CONNACK, b"\x1f\x00\x01\x01", MALFORMED),
    ("U+007F", C.CONNACK, b"\x1a\x00\x01\x7f", MALFORMED),
    ("U+009F", C.CONNACK, b"\x12\x00\x02\xc2\x9f", MALFORMED),
    ("null in user property name", C.PUBREL, b"\x26\x00\x01\x00\x00\x01v", MALFORMED),
    ("bad utf-8 in user property value", C.PUBREL, b"\x26\x00\x01k\x00\x01\x80", MALFORMED),
]


@pytest.mark.parametrize(
    ("context", "encoded", "reason"),
    [case[1:] for case in BAD_VALUES],
    ids=[case[0] for case in BAD_VALUES],
)
def test_bad_values(context: C, encoded: bytes, reason: int) -> None:
    assert reason_of(block(encoded), context) == reason


@pytest.mark.parametrize(
    ("context", "props"),
    [
        (C.CONNECT, Properties(topic_alias_maximum=0)),  # 0: no aliases (§3.1.2.11.5)
        (C.CONNACK, Properties(topic_alias_maximum=0, maximum_qos=0, session_expiry_interval=0)),
        (C.CONNACK, Properties(authentication_data=b"x")),  # the rule is stated for CONNECT
        (C.AUTH, Properties(authentication_data=b"")),  # AUTH's own rules are the packet's
        (C.PUBLISH, Properties(payload_format_indicator=0, message_expiry_interval=0)),
        (C.CONNECT, Properties(authentication_method="", authentication_data=b"")),
        (C.PUBACK, Properties(reason_string="\u00a0\u2028\uffff")),  # printable or not, allowed
    ],
)
def test_edge_values_that_are_valid(context: C, props: Properties) -> None:
    data = encode_properties(props, context)
    assert decode(data, context) == (props, len(data))


@pytest.mark.parametrize(
    ("context", "props"),
    [
        (C.PUBLISH, Properties(payload_format_indicator=2)),
        (C.PUBLISH, Properties(payload_format_indicator=-1)),
        (C.PUBLISH, Properties(topic_alias=0)),
        (C.PUBLISH, Properties(topic_alias=65536)),
        (C.PUBLISH, Properties(message_expiry_interval=2**32)),
        (C.PUBLISH, Properties(subscription_identifiers=[0])),
        (C.PUBLISH, Properties(subscription_identifiers=[268_435_456])),
        (C.CONNECT, Properties(receive_maximum=0)),
        (C.CONNECT, Properties(maximum_packet_size=0)),
        (C.CONNECT, Properties(request_problem_information=2)),
        (C.CONNECT, Properties(authentication_data=b"x")),
        (C.CONNACK, Properties(maximum_qos=2)),
        (C.CONNACK, Properties(shared_subscription_available=256)),
        (C.PUBLISH, Properties(content_type="a\x00b")),
        (C.PUBLISH, Properties(content_type="\x1b[0m")),
        (C.PUBLISH, Properties(response_topic="\ud800")),
        (C.PUBLISH, Properties(user_properties=[("k", "\x00")])),
        (C.PUBLISH, Properties(user_properties=[("k" * 65536, "v")])),
        (C.PUBLISH, Properties(correlation_data=b"x" * 65536)),
    ],
)
def test_encoder_refuses_what_the_decoder_would(context: C, props: Properties) -> None:
    with pytest.raises(ValueError):
        encode_properties(props, context)


def test_longest_string_fits() -> None:
    props = Properties(correlation_data=b"x" * 65535, content_type="é" * 32767 + "x")
    data = encode_properties(props, C.PUBLISH)
    assert data[:3] == bytes((0x84, 0x80, 0x08))  # 2 * (1 + 2 + 65535) = 131076 = 4 + 8 * 128**2
    assert decode(data, C.PUBLISH) == (props, len(data))


# ---------------------------------------------------------------------------
# Truncation and the bounds of the block


@pytest.mark.parametrize(
    ("context", "data"), [case[1::2] for case in GOLDEN], ids=[case[0] for case in GOLDEN]
)
def test_truncated_at_every_byte(context: C, data: bytes) -> None:
    for cut in range(len(data)):
        with pytest.raises(PropertyError) as caught:
            decode(data[:cut], context)
        assert caught.value.reason == MALFORMED
        # The same bytes, whole, but `end` before the last: `end` is a hard limit.
        with pytest.raises(PropertyError):
            decode_properties(b"??" + data + b"\x01\x01\x01\x01", 2, 2 + cut, context)


@pytest.mark.parametrize(
    ("context", "data"), [case[1::2] for case in GOLDEN], ids=[case[0] for case in GOLDEN]
)
def test_a_shorter_property_length(context: C, data: bytes) -> None:
    """A Property Length that ends inside a property is malformed; one that ends between two
    properties is a smaller valid block, read exactly to its end."""
    body = data[2:] if data[0] & 0x80 else data[1:]
    for length in range(len(body)):
        prefix = bytes((length,)) if length < 128 else bytes((length & 0x7F | 0x80, length >> 7))
        shorter = prefix + body
        try:
            props, offset = decode(shorter, context)
        except PropertyError as problem:
            assert problem.reason in (MALFORMED, PROTOCOL_ERROR)  # 0x82: data without a method
        else:  # exactly the properties before the cut (the golden blocks are in encoder order)
            assert offset == len(prefix) + length
            assert encode_properties(props, context) == prefix + body[:length]


@pytest.mark.parametrize(
    "data",
    [
        b"\x06\x03\x00\x04json",  # a string
        b"\x04\x09\x00\x02id",  # binary data
        b"\x04\x02\x00\x00\x00\x3c",  # a four-byte integer
        b"\x02\x0b\x80\x01",  # a variable byte integer
        b"\x06\x26\x00\x01a\x00\x01b",  # a string pair
    ],
)
def test_a_value_past_the_property_length(data: bytes) -> None:
    """The value runs one byte past the Property Length, though not past `end`."""
    assert reason_of(data, C.PUBLISH) == MALFORMED


@pytest.mark.parametrize(
    "data",
    [b"", b"\x80", b"\xff\xff\xff", b"\x80\x80\x80\x80\x01", b"\x05\x01"],
    ids=["nothing", "length cut", "length cut after 3", "5-byte length", "length past end"],
)
def test_bad_property_length(data: bytes) -> None:
    assert reason_of(data, C.PUBLISH) == MALFORMED


def test_non_minimal_lengths_are_read() -> None:
    """[MQTT-1.5.5-1] binds the sender; a longer encoding still parses (as `codec` reads the
    Remaining Length)."""
    assert decode(b"\x80\x00", C.PUBLISH) == (Properties(), 2)
    assert decode(b"\x03\x0b\x81\x00", C.PUBLISH)[0] == Properties(subscription_identifiers=[1])


# ---------------------------------------------------------------------------
# Hypothesis

CONTROL_CHARACTERS = "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)]))
TEXT = st.text(st.characters(codec="utf-8", exclude_characters=CONTROL_CHARACTERS), max_size=8)
NON_ZERO = {P.SUBSCRIPTION_IDENTIFIER, P.RECEIVE_MAXIMUM, P.TOPIC_ALIAS, P.MAXIMUM_PACKET_SIZE}
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "byte": st.integers(0, 1),  # every Byte property is 0 or 1
    "two": st.integers(0, 0xFFFF),
    "four": st.integers(0, 0xFFFF_FFFF),
    "varint": st.integers(0, 268_435_455),
    "string": TEXT,
    "binary": st.binary(max_size=8),
    "pair": st.tuples(TEXT, TEXT),
}


def values(ident: int) -> st.SearchStrategy[Any]:
    strategy = VALUES[SPEC_TABLE[ident][0]]
    if ident == P.RESPONSE_TOPIC:  # a topic name: no wildcard [MQTT-3.3.2-14]
        return strategy.filter(lambda topic: "+" not in topic and "#" not in topic)
    return strategy.filter(bool) if ident in NON_ZERO else strategy


@st.composite
def properties_for(draw: st.DrawFn, context: C) -> Properties:
    """Valid properties for `context`, from the specification's table and value rules."""
    fields: dict[str, Any] = {}
    for ident, (_, carriers) in SPEC_TABLE.items():
        if context not in carriers:
            continue
        if ident in LISTS:
            most = 3 if ident == P.USER_PROPERTY or context is C.PUBLISH else 1
            fields[LISTS[ident]] = draw(st.lists(values(ident), max_size=most))
        elif draw(st.booleans()):
            fields[field_name(ident)] = draw(values(ident))
    if context is C.CONNECT and "authentication_data" in fields:
        fields.setdefault("authentication_method", draw(TEXT))
    return Properties(**fields)


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


@fuzz(300)
@given(context=st.sampled_from(list(C)), data=st.data())
def test_round_trip(context: C, data: st.DataObject) -> None:
    props = data.draw(properties_for(context))
    encoded = encode_properties(props, context)
    before = data.draw(st.binary(max_size=4))
    after = data.draw(st.binary(max_size=4))  # a payload, or the rest of the packet
    buffer = before + encoded + after
    start, stop = len(before), len(before) + len(encoded)
    assert decode_properties(buffer, start, len(buffer), context) == (props, stop)
    assert decode_properties(memoryview(buffer), start, stop, context) == (props, stop)
    with pytest.raises(PropertyError):
        decode_properties(buffer, start, stop - 1, context)


@fuzz(500)
@given(context=st.sampled_from(list(C)), data=st.binary(max_size=40), offset=st.integers(0, 3))
def test_arbitrary_bytes(context: C, data: bytes, offset: int) -> None:
    """Anything decodes or raises PropertyError; what decodes encodes back to itself."""
    try:
        props, end = decode_properties(data, offset, len(data), context)
    except PropertyError as problem:
        assert problem.reason in (MALFORMED, PROTOCOL_ERROR, TOPIC_ALIAS_INVALID)
        return
    assert offset < end <= len(data)
    again = encode_properties(props, context)
    assert decode(again, context) == (props, len(again))


@fuzz(300)
@given(
    case=st.sampled_from(GOLDEN),
    flips=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), min_size=1, max_size=3),
)
def test_mutated_golden_blocks(case: tuple[str, C, Properties, bytes], flips: list[Any]) -> None:
    _, context, _, golden = case
    data = bytearray(golden)
    for index, value in flips:
        data[index % len(data)] = value
    try:
        props, end = decode(bytes(data), context)
    except PropertyError:
        return
    assert end <= len(data)
    again = encode_properties(props, context)
    assert decode(again, context) == (props, len(again))


@pytest.mark.parametrize("topic", ["+", "a/#", "a/+/b"])
def test_a_response_topic_with_a_wildcard_is_a_protocol_error(topic: str) -> None:
    """[MQTT-3.3.2-14]: a Response Topic is a topic name; the MQ commands reply to it."""
    encoded = topic.encode()
    body = bytes((0x08, 0, len(encoded))) + encoded
    with pytest.raises(PropertyError, match="has a wildcard") as raised:
        decode(bytes((len(body),)) + body, C.PUBLISH)
    assert raised.value.reason == 0x82


def test_a_response_topic_with_a_wildcard_is_not_encoded() -> None:
    with pytest.raises(ValueError, match="has a wildcard"):
        encode_properties(Properties(response_topic="a/#"), C.PUBLISH)
