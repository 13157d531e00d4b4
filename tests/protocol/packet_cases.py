"""Golden packets: raw bytes and the packet they stand for, for every protocol level.

`CASES` holds one entry per packet and protocol level: the bytes were written by hand from
the specifications (MQTT 3.1 for level 3, OASIS MQTT 3.1.1 for level 4), never produced by
telemq's encoder. Unless an entry is `decode_only`, encoding the packet gives exactly the
raw bytes, and decoding the raw bytes at that level gives the packet back.

`MALFORMED_CASES` holds bytes that must be refused, each with a substring the
`MalformedPacket` message has to contain. Codec tests, connection tests and fuzzers reuse
both tables.

MQTT 5.0 (level 5, OASIS MQTT Version 5.0) has its own tables, `CASES_5` and
`MALFORMED_CASES_5` (whose entries also name the reason code of the error), written by hand
the same way: they are not in `CASES` and `LEVELS`, since the connection still refuses level
5, and the 3.x tests encode at the default level. `cases_for(5)` and `golden_stream(5)`
include them.
"""

from __future__ import annotations

from dataclasses import dataclass

from telemq.protocol import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)

MQTT_3_1 = 3
MQTT_3_1_1 = 4
MQTT_5 = 5
LEVELS = (MQTT_3_1, MQTT_3_1_1)  # the levels the connection accepts
LEVEL_NAMES = {MQTT_3_1: "3.1", MQTT_3_1_1: "3.1.1", MQTT_5: "5.0"}
MALFORMED = 0x81
PROTOCOL_ERROR = 0x82
TOPIC_ALIAS_INVALID = 0x94


def packet_types(level: int) -> set[PacketType]:
    """The packet types of a protocol level: AUTH is MQTT 5.0's."""
    return set(PacketType) if level == MQTT_5 else set(PacketType) - {PacketType.AUTH}


@dataclass(frozen=True)
class PacketCase:
    description: str
    level: int
    raw: bytes
    packet: Packet
    decode_only: bool = False  # accepted as input, but not what the encoder writes

    @property
    def id(self) -> str:
        return f"{LEVEL_NAMES[self.level]}: {self.description}"


@dataclass(frozen=True)
class MalformedCase:
    description: str
    level: int
    raw: bytes
    message: str  # a substring of the MalformedPacket message
    reason: int = MALFORMED  # the reason code of the error (`MalformedPacket.reason`)

    @property
    def id(self) -> str:
        return f"{LEVEL_NAMES[self.level]}: {self.description}"


# The worked example of the MQTT 3.1 PUBLISH page: topic "a/b", QoS 1, message id 10.
SEED_PUBLISH_VARIABLE_HEADER = bytes([0x00, 0x03, 0x61, 0x2F, 0x62, 0x00, 0x0A])

_CASES_3_1_1: list[PacketCase] = [
    PacketCase(
        "CONNECT minimal",
        MQTT_3_1_1,
        b"\x10\x0e"  # CONNECT, remaining length 14
        b"\x00\x04MQTT"  # protocol name
        b"\x04"  # protocol level
        b"\x02"  # flags: clean session
        b"\x00\x3c"  # keep-alive 60 s
        b"\x00\x02c1",  # client identifier
        Connect(client_id="c1", keepalive=60),
    ),
    PacketCase(
        "CONNECT with will, user name and password, persistent session",
        MQTT_3_1_1,
        b"\x10\x1e"
        b"\x00\x04MQTT"
        b"\x04"
        b"\xec"  # user name, password, will retain, will QoS 1, will flag; clean session 0
        b"\x12\x34"  # keep-alive 4660 s
        b"\x00\x02c2"
        b"\x00\x03w/t"  # will topic
        b"\x00\x03bye"  # will message
        b"\x00\x01u"  # user name
        b"\x00\x01p",  # password
        Connect(
            client_id="c2",
            clean_session=False,
            keepalive=0x1234,
            will=Will("w/t", b"bye", qos=1, retain=True),
            username="u",
            password=b"p",
        ),
    ),
    PacketCase(
        "CONNECT with an empty client identifier and user name only",
        MQTT_3_1_1,
        b"\x10\x11"
        b"\x00\x04MQTT"
        b"\x04"
        b"\x82"  # user name, clean session
        b"\x00\x00"  # keep-alive 0: disabled
        b"\x00\x00"  # empty client identifier
        b"\x00\x03\xc3\xa9t",  # user name "ét"
        Connect(client_id="", keepalive=0, username="ét"),
    ),
    PacketCase(
        "CONNECT with a QoS 2 will and an empty will message",
        MQTT_3_1_1,
        b"\x10\x13"
        b"\x00\x04MQTT"
        b"\x04"
        b"\x16"  # will QoS 2, will flag, clean session
        b"\xff\xff"  # keep-alive 65535 s
        b"\x00\x01c"
        b"\x00\x02$w"
        b"\x00\x00",
        Connect(client_id="c", keepalive=65535, will=Will("$w", b"", qos=2)),
    ),
    PacketCase("CONNACK accepted", MQTT_3_1_1, b"\x20\x02\x00\x00", ConnAck()),
    PacketCase(
        "CONNACK accepted, session present",
        MQTT_3_1_1,
        b"\x20\x02\x01\x00",
        ConnAck(session_present=True),
    ),
    PacketCase("CONNACK not authorized", MQTT_3_1_1, b"\x20\x02\x00\x05", ConnAck(5)),
    PacketCase(
        "PUBLISH QoS 0",
        MQTT_3_1_1,
        b"\x30\x0a\x00\x03a/bhello",
        Publish("a/b", b"hello"),
    ),
    PacketCase(
        "PUBLISH QoS 1, the seed's worked example (topic a/b, message id 10)",
        MQTT_3_1_1,
        b"\x32\x07" + SEED_PUBLISH_VARIABLE_HEADER,
        Publish("a/b", b"", qos=1, packet_id=10),
    ),
    PacketCase(
        "PUBLISH QoS 2, DUP and RETAIN, binary payload",
        MQTT_3_1_1,
        b"\x3d\x07\x00\x01x\xff\xff\x00\xff",
        Publish("x", b"\x00\xff", qos=2, retain=True, dup=True, packet_id=65535),
    ),
    PacketCase(
        "PUBLISH retained with an empty payload (deletes the retained message)",
        MQTT_3_1_1,
        b"\x31\x05\x00\x03a/b",
        Publish("a/b", b"", retain=True),
    ),
    PacketCase(
        "PUBLISH with a UTF-8 topic and empty levels",
        MQTT_3_1_1,
        b"\x30\x0a\x00\x08/caf\xc3\xa9//",
        Publish("/café//"),
    ),
    PacketCase(
        "PUBLISH with a two-byte remaining length (128)",
        MQTT_3_1_1,
        b"\x30\x80\x01\x00\x01t" + b"x" * 125,
        Publish("t", b"x" * 125),
    ),
    PacketCase("PUBACK", MQTT_3_1_1, b"\x40\x02\x00\x01", PubAck(1)),
    PacketCase("PUBREC", MQTT_3_1_1, b"\x50\x02\x12\x34", PubRec(0x1234)),
    PacketCase("PUBREL", MQTT_3_1_1, b"\x62\x02\xff\xff", PubRel(65535)),
    PacketCase("PUBCOMP", MQTT_3_1_1, b"\x70\x02\x00\x0a", PubComp(10)),
    PacketCase(
        "SUBSCRIBE with three filters",
        MQTT_3_1_1,
        b"\x82\x14"
        b"\x00\x01"  # packet identifier
        b"\x00\x03a/b\x00"
        b"\x00\x01#\x01"
        b"\x00\x05x/+/y\x02",
        Subscribe(1, [("a/b", 0), ("#", 1), ("x/+/y", 2)]),
    ),
    PacketCase(
        "SUBACK with every return code",
        MQTT_3_1_1,
        b"\x90\x06\x00\x01\x00\x01\x02\x80",
        SubAck(1, [0, 1, 2, 0x80]),
    ),
    PacketCase(
        "UNSUBSCRIBE with two filters",
        MQTT_3_1_1,
        b"\xa2\x0a\x00\x02\x00\x03a/b\x00\x01#",
        Unsubscribe(2, ["a/b", "#"]),
    ),
    PacketCase("UNSUBACK", MQTT_3_1_1, b"\xb0\x02\x00\x02", UnsubAck(2)),
    PacketCase("PINGREQ", MQTT_3_1_1, b"\xc0\x00", PingReq()),
    PacketCase("PINGRESP", MQTT_3_1_1, b"\xd0\x00", PingResp()),
    PacketCase("DISCONNECT", MQTT_3_1_1, b"\xe0\x00", Disconnect()),
]

_CASES_3_1: list[PacketCase] = [
    PacketCase(
        "CONNECT minimal",
        MQTT_3_1,
        b"\x10\x10"
        b"\x00\x06MQIsdp"
        b"\x03"
        b"\x02"  # clean session
        b"\x00\x3c"
        b"\x00\x02c1",
        Connect(client_id="c1", protocol_level=3, protocol_name="MQIsdp", keepalive=60),
    ),
    PacketCase(
        "CONNECT with will, user name and password",
        MQTT_3_1,
        b"\x10\x24"
        b"\x00\x06MQIsdp"
        b"\x03"
        b"\xd6"  # user name, password, will QoS 2, will flag, clean session
        b"\x00\x0a"
        b"\x00\x03abc"
        b"\x00\x01t"
        b"\x00\x02hi"
        b"\x00\x04user"
        b"\x00\x04pass",
        Connect(
            client_id="abc",
            protocol_level=3,
            protocol_name="MQIsdp",
            keepalive=10,
            will=Will("t", b"hi", qos=2),
            username="user",
            password=b"pass",
        ),
    ),
    PacketCase(
        "CONNECT with 23 characters of client identifier, persistent session",
        MQTT_3_1,
        b"\x10\x25\x00\x06MQIsdp\x03\x00\x00\x3c\x00\x17" + b"c" * 23,
        Connect(
            client_id="c" * 23,
            protocol_level=3,
            protocol_name="MQIsdp",
            clean_session=False,
            keepalive=60,
        ),
    ),
    PacketCase(
        "CONNECT with bytes after the payload (tolerated in 3.1)",
        MQTT_3_1,
        b"\x10\x11\x00\x06MQIsdp\x03\x02\x00\x3c\x00\x02c1!",
        Connect(client_id="c1", protocol_level=3, protocol_name="MQIsdp", keepalive=60),
        decode_only=True,
    ),
    PacketCase("CONNACK accepted", MQTT_3_1, b"\x20\x02\x00\x00", ConnAck()),
    PacketCase("CONNACK identifier rejected", MQTT_3_1, b"\x20\x02\x00\x02", ConnAck(2)),
    PacketCase("PUBLISH QoS 0", MQTT_3_1, b"\x30\x0a\x00\x03a/bhello", Publish("a/b", b"hello")),
    PacketCase(
        "PUBLISH QoS 1, the seed's worked example (topic a/b, message id 10)",
        MQTT_3_1,
        b"\x32\x09" + SEED_PUBLISH_VARIABLE_HEADER + b"hi",
        Publish("a/b", b"hi", qos=1, packet_id=10),
    ),
    PacketCase(
        "PUBLISH QoS 1 retried with DUP",
        MQTT_3_1,
        b"\x3a\x07\x00\x03a/b\x00\x0a",
        Publish("a/b", qos=1, dup=True, packet_id=10),
    ),
    PacketCase(
        "PUBLISH QoS 2 retained",
        MQTT_3_1,
        b"\x35\x08\x00\x04$x/y\x01\x00",
        Publish("$x/y", qos=2, retain=True, packet_id=256),
    ),
    PacketCase(
        "PUBLISH QoS 0 with DUP (tolerated in 3.1)",
        MQTT_3_1,
        b"\x38\x05\x00\x03a/b",
        Publish("a/b", dup=True),
    ),
    PacketCase("PUBACK", MQTT_3_1, b"\x40\x02\x00\x0a", PubAck(10)),
    PacketCase(
        "PUBACK with flag bits set (not checked in 3.1)",
        MQTT_3_1,
        b"\x41\x02\x00\x0a",
        PubAck(10),
        decode_only=True,
    ),
    PacketCase("PUBREC", MQTT_3_1, b"\x50\x02\x00\x0a", PubRec(10)),
    PacketCase("PUBREL (sent as QoS 1)", MQTT_3_1, b"\x62\x02\x00\x0a", PubRel(10)),
    PacketCase("PUBREL retried with DUP", MQTT_3_1, b"\x6a\x02\x00\x0a", PubRel(10, dup=True)),
    PacketCase("PUBCOMP", MQTT_3_1, b"\x70\x02\x00\x0a", PubComp(10)),
    PacketCase(
        "SUBSCRIBE (sent as QoS 1)",
        MQTT_3_1,
        b"\x82\x0b\x00\x07\x00\x06$SYS/#\x01",
        Subscribe(7, [("$SYS/#", 1)]),
    ),
    PacketCase(
        "SUBSCRIBE retried with DUP",
        MQTT_3_1,
        b"\x8a\x0c\x00\x07\x00\x01+\x00\x00\x03a/#\x02",
        Subscribe(7, [("+", 0), ("a/#", 2)], dup=True),
    ),
    PacketCase(
        "SUBSCRIBE with reserved bits in the QoS byte (ignored in 3.1)",
        MQTT_3_1,
        b"\x82\x06\x00\x07\x00\x01a\xfd",
        Subscribe(7, [("a", 1)]),
        decode_only=True,
    ),
    PacketCase("SUBACK", MQTT_3_1, b"\x90\x04\x00\x07\x01\x00", SubAck(7, [1, 0])),
    PacketCase(
        "UNSUBSCRIBE (sent as QoS 1)",
        MQTT_3_1,
        b"\xa2\x07\x00\x08\x00\x03a/b",
        Unsubscribe(8, ["a/b"]),
    ),
    PacketCase(
        "UNSUBSCRIBE retried with DUP",
        MQTT_3_1,
        b"\xaa\x07\x00\x08\x00\x03a/b",
        Unsubscribe(8, ["a/b"], dup=True),
    ),
    PacketCase("UNSUBACK", MQTT_3_1, b"\xb0\x02\x00\x08", UnsubAck(8)),
    PacketCase("PINGREQ", MQTT_3_1, b"\xc0\x00", PingReq()),
    PacketCase("PINGRESP", MQTT_3_1, b"\xd0\x00", PingResp()),
    PacketCase("DISCONNECT", MQTT_3_1, b"\xe0\x00", Disconnect()),
]

CASES: list[PacketCase] = _CASES_3_1_1 + _CASES_3_1


def cases_for(level: int) -> list[PacketCase]:
    return [case for case in CASES + CASES_5 if case.level == level]


def golden_stream(level: int) -> tuple[bytes, list[Packet]]:
    """Every golden packet of one level, back to back, and the packets they decode to."""
    selected = cases_for(level)
    return b"".join(case.raw for case in selected), [case.packet for case in selected]


def _connect_body(name: bytes, level: int, flags: int, payload: bytes) -> bytes:
    body = len(name).to_bytes(2, "big") + name + bytes((level, flags)) + b"\x00\x3c" + payload
    return b"\x10" + bytes((len(body),)) + body


# Each fixed-size packet of 3.1.1 with its only valid flag nibble and a valid body: the
# reserved-flags cases below replace the flags and keep the rest.
_FLAG_BASES: list[tuple[str, bytes]] = [
    ("CONNECT", _connect_body(b"MQTT", 4, 0x02, b"\x00\x01c")),
    ("CONNACK", b"\x20\x02\x00\x00"),
    ("PUBACK", b"\x40\x02\x00\x01"),
    ("PUBREC", b"\x50\x02\x00\x01"),
    ("PUBREL", b"\x62\x02\x00\x01"),
    ("PUBCOMP", b"\x70\x02\x00\x01"),
    ("SUBSCRIBE", b"\x82\x06\x00\x01\x00\x01a\x00"),
    ("SUBACK", b"\x90\x03\x00\x01\x00"),
    ("UNSUBSCRIBE", b"\xa2\x05\x00\x01\x00\x01a"),
    ("UNSUBACK", b"\xb0\x02\x00\x01"),
    ("PINGREQ", b"\xc0\x00"),
    ("PINGRESP", b"\xd0\x00"),
    ("DISCONNECT", b"\xe0\x00"),
]

_RESERVED_FLAG_CASES: list[MalformedCase] = [
    MalformedCase(
        f"{name} with flags {flags:04b}",
        MQTT_3_1_1,
        bytes(((base[0] & 0xF0) | flags,)) + base[1:],
        f"{name}: reserved flag bits are {flags:04b}, must be {base[0] & 0x0F:04b}",
    )
    for name, base in _FLAG_BASES
    for flags in (0b0000, 0b0001, 0b0010, 0b1000, 0b1010, 0b1111)
    if flags != base[0] & 0x0F
]

# Packet identifier 0 parses: a protocol error (0x82, §4.13), at every level.
_PACKET_ID_ZERO_CASES: list[MalformedCase] = [
    MalformedCase(
        f"{name} with packet identifier 0",
        level,
        raw,
        f"{name}: packet identifier 0",
        PROTOCOL_ERROR,
    )
    for level in LEVELS
    for name, raw in [
        ("PUBLISH", b"\x32\x07\x00\x03a/b\x00\x00"),  # QoS 1
        ("PUBLISH", b"\x34\x07\x00\x03a/b\x00\x00"),  # QoS 2
        ("PUBACK", b"\x40\x02\x00\x00"),
        ("PUBREC", b"\x50\x02\x00\x00"),
        ("PUBREL", b"\x62\x02\x00\x00"),
        ("PUBCOMP", b"\x70\x02\x00\x00"),
        ("SUBSCRIBE", b"\x82\x06\x00\x00\x00\x01a\x00"),
        ("SUBACK", b"\x90\x03\x00\x00\x00"),
        ("UNSUBSCRIBE", b"\xa2\x05\x00\x00\x00\x01a"),
        ("UNSUBACK", b"\xb0\x02\x00\x00"),
    ]
]

_WRONG_LENGTH_CASES: list[MalformedCase] = [
    MalformedCase(
        f"{name} with remaining length {len(raw) - 2}",
        level,
        raw,
        f"{name}: remaining length must be {expected}, got {len(raw) - 2}",
    )
    for level in LEVELS
    for name, expected, raw in [
        ("CONNACK", 2, b"\x20\x01\x00"),
        ("CONNACK", 2, b"\x20\x03\x00\x00\x00"),
        ("PUBACK", 2, b"\x40\x00"),
        ("PUBACK", 2, b"\x40\x03\x00\x01\x00"),
        ("PUBREC", 2, b"\x50\x01\x01"),
        ("PUBREL", 2, b"\x62\x03\x00\x01\x00"),
        ("PUBCOMP", 2, b"\x70\x04\x00\x01\x00\x02"),
        ("UNSUBACK", 2, b"\xb0\x00"),
        ("PINGREQ", 0, b"\xc0\x01\x00"),
        ("PINGRESP", 0, b"\xd0\x02\x00\x00"),
        ("DISCONNECT", 0, b"\xe0\x01\x00"),
    ]
]

MALFORMED_CASES: list[MalformedCase] = [
    # Fixed header.
    MalformedCase(
        "remaining length of five bytes",
        MQTT_3_1_1,
        b"\xc0\x80\x80\x80\x80\x01",
        "remaining length is longer than 4 bytes",
    ),
    MalformedCase(
        "remaining length of five bytes (3.1)",
        MQTT_3_1,
        b"\x30\xff\xff\xff\xff\x7f",
        "remaining length is longer than 4 bytes",
    ),
    MalformedCase("reserved packet type 0", MQTT_3_1_1, b"\x00\x00", "reserved packet type 0"),
    MalformedCase("reserved packet type 15", MQTT_3_1_1, b"\xf0\x00", "reserved packet type 15"),
    MalformedCase("reserved packet type 0 (3.1)", MQTT_3_1, b"\x00\x00", "reserved packet type 0"),
    MalformedCase(
        "reserved packet type 15 (3.1)", MQTT_3_1, b"\xf0\x00", "reserved packet type 15"
    ),
    *_RESERVED_FLAG_CASES,
    MalformedCase(
        "SUBSCRIBE without the QoS 1 bits",
        MQTT_3_1,
        b"\x80\x06\x00\x01\x00\x01a\x00",
        "SUBSCRIBE: QoS bits must be 01 in MQTT 3.1",
    ),
    MalformedCase(
        "UNSUBSCRIBE sent as QoS 2",
        MQTT_3_1,
        b"\xa4\x05\x00\x01\x00\x01a",
        "UNSUBSCRIBE: QoS bits must be 01 in MQTT 3.1",
    ),
    MalformedCase(
        "PUBREL sent as QoS 0", MQTT_3_1, b"\x60\x02\x00\x01", "PUBREL: QoS bits must be 01"
    ),
    *_PACKET_ID_ZERO_CASES,
    *_WRONG_LENGTH_CASES,
    # PUBLISH.
    MalformedCase(
        "PUBLISH topic is not UTF-8",
        MQTT_3_1_1,
        b"\x30\x04\x00\x02\xc3\x28",
        "PUBLISH: topic name is not valid UTF-8",
    ),
    MalformedCase(
        "PUBLISH topic holds an encoded surrogate",
        MQTT_3_1,
        b"\x30\x05\x00\x03\xed\xa0\x80",
        "PUBLISH: topic name is not valid UTF-8",
    ),
    MalformedCase(
        "PUBLISH topic holds U+0000",
        MQTT_3_1_1,
        b"\x30\x05\x00\x03a\x00b",
        "PUBLISH: U+0000 in topic name",
    ),
    MalformedCase(
        "PUBLISH topic holds +", MQTT_3_1_1, b"\x30\x05\x00\x03a/+", "PUBLISH: wildcard in topic"
    ),
    MalformedCase(
        "PUBLISH topic holds #",
        MQTT_3_1,
        b"\x32\x05\x00\x01#\x00\x01",
        "PUBLISH: wildcard in topic",
    ),
    MalformedCase(
        "PUBLISH topic is empty", MQTT_3_1_1, b"\x30\x02\x00\x00", "PUBLISH: empty topic name"
    ),
    MalformedCase(
        "PUBLISH QoS 3", MQTT_3_1_1, b"\x36\x07\x00\x03a/b\x00\x01", "PUBLISH: QoS 3 is invalid"
    ),
    MalformedCase(
        "PUBLISH QoS 3 (3.1)", MQTT_3_1, b"\x3e\x07\x00\x03a/b\x00\x01", "PUBLISH: QoS 3 is invalid"
    ),
    MalformedCase(
        "PUBLISH QoS 0 with DUP", MQTT_3_1_1, b"\x38\x05\x00\x03a/b", "PUBLISH: DUP must be 0"
    ),
    MalformedCase("PUBLISH without a topic", MQTT_3_1_1, b"\x30\x01\x00", "PUBLISH: packet ends"),
    MalformedCase(
        "PUBLISH topic longer than the packet",
        MQTT_3_1_1,
        b"\x30\x03\x00\x05a",
        "PUBLISH: topic runs past the end of the packet",
    ),
    MalformedCase(
        "PUBLISH QoS 1 without a packet identifier",
        MQTT_3_1_1,
        b"\x32\x06\x00\x03a/b\x00",
        "PUBLISH: packet ends before the packet identifier",
    ),
    # SUBSCRIBE, SUBACK, UNSUBSCRIBE.
    MalformedCase(
        "SUBSCRIBE requests QoS 3",
        MQTT_3_1_1,
        b"\x82\x06\x00\x01\x00\x01a\x03",
        "SUBSCRIBE: requested QoS 3 is invalid",
    ),
    MalformedCase(
        "SUBSCRIBE requests QoS 3 (3.1)",
        MQTT_3_1,
        b"\x82\x06\x00\x01\x00\x01a\x03",
        "SUBSCRIBE: requested QoS 3 is invalid",
    ),
    MalformedCase(
        "SUBSCRIBE with reserved bits in the QoS byte",
        MQTT_3_1_1,
        b"\x82\x06\x00\x01\x00\x01a\x04",
        "SUBSCRIBE: reserved bits of the requested QoS byte are set",
    ),
    MalformedCase(
        "SUBSCRIBE without topics", MQTT_3_1_1, b"\x82\x02\x00\x01", "SUBSCRIBE: no topic filter"
    ),
    MalformedCase(
        "SUBSCRIBE without topics (3.1)",
        MQTT_3_1,
        b"\x82\x02\x00\x01",
        "SUBSCRIBE: no topic filter",
    ),
    MalformedCase(
        "SUBSCRIBE filter without its QoS byte",
        MQTT_3_1_1,
        b"\x82\x05\x00\x01\x00\x01a",
        "SUBSCRIBE: packet ends early",
    ),
    MalformedCase(
        "SUBSCRIBE filter is not UTF-8",
        MQTT_3_1_1,
        b"\x82\x06\x00\x01\x00\x01\xff\x00",
        "SUBSCRIBE: topic filter is not valid UTF-8",
    ),
    MalformedCase(
        "SUBSCRIBE filter holds U+0000",
        MQTT_3_1_1,
        b"\x82\x07\x00\x01\x00\x02#\x00\x00",
        "SUBSCRIBE: topic filter contains U+0000",
    ),
    MalformedCase(
        "SUBSCRIBE filter longer than the packet",
        MQTT_3_1_1,
        b"\x82\x06\x00\x01\x00\x09a\x00",
        "SUBSCRIBE: field of 9 bytes runs past the end of the packet",
    ),
    MalformedCase("SUBACK without return codes", MQTT_3_1_1, b"\x90\x02\x00\x01", "no return code"),
    MalformedCase(
        "UNSUBSCRIBE without topics",
        MQTT_3_1_1,
        b"\xa2\x02\x00\x01",
        "UNSUBSCRIBE: no topic filter",
    ),
    MalformedCase(
        "UNSUBSCRIBE without topics (3.1)",
        MQTT_3_1,
        b"\xa2\x02\x00\x01",
        "UNSUBSCRIBE: no topic filter",
    ),
    MalformedCase(
        "UNSUBSCRIBE filter is not UTF-8",
        MQTT_3_1,
        b"\xa2\x05\x00\x01\x00\x01\x80",
        "UNSUBSCRIBE: topic filter is not valid UTF-8",
    ),
    MalformedCase(
        "CONNACK with reserved acknowledge flags",
        MQTT_3_1_1,
        b"\x20\x02\x02\x00",
        "CONNACK: reserved acknowledge flags are set",
    ),
    # CONNECT (always checked with the 3.1.1 rules: the level is not known yet).
    MalformedCase(
        "CONNECT MQIsdp with level 4",
        MQTT_3_1_1,
        _connect_body(b"MQIsdp", 4, 0x02, b"\x00\x01c"),
        "CONNECT: protocol name 'MQIsdp' does not go with level 4",
    ),
    MalformedCase(
        "CONNECT MQTT with level 3",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 3, 0x02, b"\x00\x01c"),
        "CONNECT: protocol name 'MQTT' does not go with level 3",
    ),
    MalformedCase(
        "CONNECT with an unknown protocol name",
        MQTT_3_1_1,
        _connect_body(b"MQTX", 4, 0x02, b"\x00\x01c"),
        "CONNECT: unknown protocol name 'MQTX'",
    ),
    MalformedCase(
        "CONNECT with a password but no user name",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x42, b"\x00\x01c\x00\x02pw"),
        "CONNECT: password flag set without the user name flag",
    ),
    MalformedCase(
        "CONNECT with will QoS 3",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x1E, b"\x00\x01c\x00\x01w\x00\x00"),
        "CONNECT: will QoS 3 is invalid",
    ),
    MalformedCase(
        "CONNECT 3.1 with will QoS 3",
        MQTT_3_1,
        _connect_body(b"MQIsdp", 3, 0x1E, b"\x00\x01c\x00\x01w\x00\x00"),
        "CONNECT: will QoS 3 is invalid",
    ),
    MalformedCase(
        "CONNECT with will QoS but no will flag",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x0A, b"\x00\x01c"),
        "CONNECT: will QoS/retain set without the will flag",
    ),
    MalformedCase(
        "CONNECT with will retain but no will flag",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x22, b"\x00\x01c"),
        "CONNECT: will QoS/retain set without the will flag",
    ),
    MalformedCase(
        "CONNECT with reserved flag bit 0",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x03, b"\x00\x01c"),
        "CONNECT: reserved flag bit 0 is set",
    ),
    MalformedCase(
        "CONNECT with a wildcard in the will topic",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x06, b"\x00\x01c\x00\x03a/#\x00\x00"),
        "CONNECT: will topic: wildcard in topic name",
    ),
    MalformedCase(
        "CONNECT client identifier is not UTF-8",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x02, b"\x00\x01\xfe"),
        "CONNECT: client identifier is not valid UTF-8",
    ),
    # Control characters (U+0001..U+001F, U+007F..U+009F) in any string: MQTT 3.1.1 §1.5.3
    # lets the server close the connection, and Mosquitto does.
    MalformedCase(
        "PUBLISH topic holds U+0001",
        MQTT_3_1_1,
        b"\x30\x05\x00\x03a\x01b",
        "PUBLISH: U+0001 in topic name",
    ),
    MalformedCase(
        "QoS 1 PUBLISH topic holds U+009F",
        MQTT_3_1_1,
        b"\x32\x08\x00\x04a\xc2\x9fb\x00\x01",
        "PUBLISH: U+009F in topic name",
    ),
    MalformedCase(
        "PUBLISH topic holds U+007F",
        MQTT_3_1,
        b"\x30\x05\x00\x03a\x7fb",
        "PUBLISH: U+007F in topic name",
    ),
    MalformedCase(
        "SUBSCRIBE filter holds U+001F",
        MQTT_3_1_1,
        b"\x82\x07\x00\x01\x00\x02#\x1f\x00",
        "SUBSCRIBE: topic filter contains U+001F",
    ),
    MalformedCase(
        "SUBSCRIBE with an empty filter",
        MQTT_3_1_1,
        b"\x82\x05\x00\x01\x00\x00\x00",
        "SUBSCRIBE: empty topic filter",
    ),
    MalformedCase(
        "UNSUBSCRIBE with an empty filter after a valid one",
        MQTT_3_1_1,
        b"\xa2\x07\x00\x01\x00\x01a\x00\x00",
        "UNSUBSCRIBE: empty topic filter",
    ),
    MalformedCase(
        "CONNECT client identifier holds U+0009",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x02, b"\x00\x02c\x09"),
        "CONNECT: client identifier contains U+0009",
    ),
    MalformedCase(
        "CONNECT user name holds U+0085",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x82, b"\x00\x01c\x00\x03u\xc2\x85"),
        "CONNECT: user name contains U+0085",
    ),
    MalformedCase(
        "CONNECT will topic holds U+001B",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x06, b"\x00\x01c\x00\x03w\x1bt\x00\x00"),
        "CONNECT: will topic contains U+001B",
    ),
    MalformedCase(
        "CONNECT user name holds U+0000",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x82, b"\x00\x01c\x00\x01\x00"),
        "CONNECT: user name contains U+0000",
    ),
    MalformedCase(
        "CONNECT with bytes after the payload",
        MQTT_3_1_1,
        _connect_body(b"MQTT", 4, 0x02, b"\x00\x01c!"),
        "CONNECT: 1 unexpected bytes at the end",
    ),
    MalformedCase(
        "CONNECT that ends inside the keep-alive",
        MQTT_3_1_1,
        b"\x10\x08\x00\x04MQTT\x04\x02",
        "CONNECT: packet ends early",
    ),
    MalformedCase(
        "CONNECT whose will message is missing",
        MQTT_3_1,
        _connect_body(b"MQIsdp", 3, 0x06, b"\x00\x01c\x00\x01w"),
        "CONNECT: packet ends early",
    ),
]


# ---------------------------------------------------------------------------
# MQTT 5.0 (OASIS MQTT Version 5.0, chapter 3; properties as in §2.2.2, Table 2-4)


# A property block of a few properties, as bytes: its one-byte Property Length, then them.
def _block(*properties: bytes) -> bytes:
    body = b"".join(properties)
    assert len(body) < 128
    return bytes((len(body),)) + body


_REASON_E = b"\x1f\x00\x01e"  # Reason String "e"
_USER_KV = b"\x26\x00\x01k\x00\x01v"  # User Property ("k", "v")

_CASES_5: list[PacketCase] = [
    # CONNECT (§3.1)
    PacketCase(
        "CONNECT minimal",
        MQTT_5,
        b"\x10\x0f"  # CONNECT, remaining length 15
        b"\x00\x04MQTT"  # protocol name
        b"\x05"  # protocol version 5
        b"\x02"  # connect flags: clean start
        b"\x00\x3c"  # keep alive 60 s
        b"\x00"  # property length 0
        b"\x00\x02c1",  # client identifier
        Connect(client_id="c1", protocol_level=5, keepalive=60),
    ),
    PacketCase(
        "CONNECT with properties, will with will properties, user name and password",
        MQTT_5,
        b"\x10\x3f"  # remaining length 63 = 10 + 21 + 32
        b"\x00\x04MQTT\x05"
        b"\xec"  # user name, password, will retain, will QoS 1, will flag; clean start 0
        b"\x12\x34"  # keep alive 4660 s
        b"\x14"  # property length 20
        b"\x11\x00\x00\x00\x0a"  # session expiry interval 10
        b"\x21\x00\x14"  # receive maximum 20
        b"\x26\x00\x01k\x00\x01v"  # user property (k, v)
        b"\x27\x00\x00\x04\x00"  # maximum packet size 1024
        b"\x00\x02c2"  # client identifier
        b"\x0b"  # will property length 11
        b"\x01\x01"  # payload format indicator 1 (UTF-8)
        b"\x03\x00\x01t"  # content type "t"
        b"\x18\x00\x00\x00\x05"  # will delay interval 5
        b"\x00\x03w/t"  # will topic
        b"\x00\x03bye"  # will payload
        b"\x00\x01u"  # user name
        b"\x00\x01p",  # password
        Connect(
            client_id="c2",
            protocol_level=5,
            clean_session=False,
            keepalive=0x1234,
            will=Will(
                "w/t",
                b"bye",
                qos=1,
                retain=True,
                properties=Properties(
                    payload_format_indicator=1, content_type="t", will_delay_interval=5
                ),
            ),
            username="u",
            password=b"p",
            properties=Properties(
                session_expiry_interval=10,
                receive_maximum=20,
                user_properties=[("k", "v")],
                maximum_packet_size=1024,
            ),
        ),
    ),
    PacketCase(
        "CONNECT with a password but no user name (allowed in 5.0), authentication method",
        MQTT_5,
        b"\x10\x1b"  # remaining length 27 = 21 + 6
        b"\x00\x04MQTT\x05"
        b"\x42"  # password, clean start
        b"\x00\x00"  # keep alive 0
        b"\x0a"  # property length 10
        b"\x15\x00\x02ab"  # authentication method "ab"
        b"\x16\x00\x02\x01\x02"  # authentication data
        b"\x00\x00"  # empty client identifier
        b"\x00\x02pw",  # password
        Connect(
            client_id="",
            protocol_level=5,
            keepalive=0,
            password=b"pw",
            properties=Properties(authentication_method="ab", authentication_data=b"\x01\x02"),
        ),
    ),
    PacketCase(
        "CONNECT with a QoS 2 will without will properties",
        MQTT_5,
        b"\x10\x15"  # remaining length 21 = 11 + 10
        b"\x00\x04MQTT\x05"
        b"\x16"  # will QoS 2, will flag, clean start
        b"\xff\xff"
        b"\x00"
        b"\x00\x01c"
        b"\x00"  # will property length 0
        b"\x00\x02$w"
        b"\x00\x00",
        Connect(client_id="c", protocol_level=5, keepalive=65535, will=Will("$w", b"", qos=2)),
    ),
    # CONNACK (§3.2)
    PacketCase("CONNACK success", MQTT_5, b"\x20\x03\x00\x00\x00", ConnAck()),
    PacketCase(
        "CONNACK with properties, session present",
        MQTT_5,
        b"\x20\x1a"  # remaining length 26
        b"\x01"  # session present
        b"\x00"  # success
        b"\x17"  # property length 23
        b"\x11\x00\x00\x00\x3c"  # session expiry interval 60
        b"\x12\x00\x03abc"  # assigned client identifier
        b"\x21\x00\x0a"  # receive maximum 10
        b"\x22\x00\x05"  # topic alias maximum 5
        b"\x24\x01"  # maximum QoS 1
        b"\x25\x00"  # retain not available
        b"\x28\x01",  # wildcard subscriptions available
        ConnAck(
            0,
            True,
            Properties(
                session_expiry_interval=60,
                assigned_client_identifier="abc",
                receive_maximum=10,
                topic_alias_maximum=5,
                maximum_qos=1,
                retain_available=0,
                wildcard_subscription_available=1,
            ),
        ),
    ),
    PacketCase(
        "CONNACK not authorized, with a reason string",
        MQTT_5,
        b"\x20\x08\x00\x87\x05\x1f\x00\x02no",
        ConnAck(0x87, properties=Properties(reason_string="no")),
    ),
    PacketCase(
        "CONNACK unsupported protocol version",
        MQTT_5,
        b"\x20\x03\x00\x84\x00",
        ConnAck(0x84),
    ),
    # PUBLISH (§3.3)
    PacketCase(
        "PUBLISH QoS 0 without properties",
        MQTT_5,
        b"\x30\x0b\x00\x03a/b\x00hello",
        Publish("a/b", b"hello"),
    ),
    PacketCase(
        "PUBLISH QoS 1 with properties",
        MQTT_5,
        b"\x32\x21"  # remaining length 33 = 5 + 2 + 24 + 2
        b"\x00\x03a/b"
        b"\x00\x0a"  # packet identifier 10
        b"\x17"  # property length 23
        b"\x01\x01"  # payload format indicator 1
        b"\x02\x00\x00\x00\x1e"  # message expiry interval 30
        b"\x08\x00\x01r"  # response topic "r"
        b"\x09\x00\x02\xca\xfe"  # correlation data
        b"\x26\x00\x01a\x00\x01b"  # user property (a, b)
        b"hi",
        Publish(
            "a/b",
            b"hi",
            qos=1,
            packet_id=10,
            properties=Properties(
                payload_format_indicator=1,
                message_expiry_interval=30,
                response_topic="r",
                correlation_data=b"\xca\xfe",
                user_properties=[("a", "b")],
            ),
        ),
    ),
    PacketCase(
        "PUBLISH QoS 2, DUP and RETAIN, subscription identifiers and a topic alias",
        MQTT_5,
        b"\x3d\x10"  # remaining length 16 = 3 + 2 + 9 + 2
        b"\x00\x01x"
        b"\xff\xff"
        b"\x08"  # property length 8
        b"\x0b\x01"  # subscription identifier 1
        b"\x0b\x80\x01"  # subscription identifier 128 (two-byte Variable Byte Integer)
        b"\x23\x00\x07"  # topic alias 7
        b"\x00\xff",
        Publish(
            "x",
            b"\x00\xff",
            qos=2,
            retain=True,
            dup=True,
            packet_id=65535,
            properties=Properties(subscription_identifiers=[1, 128], topic_alias=7),
        ),
    ),
    PacketCase(
        "PUBLISH with an empty topic name and a topic alias",
        MQTT_5,
        b"\x30\x07\x00\x00\x03\x23\x00\x01p",
        Publish("", b"p", properties=Properties(topic_alias=1)),
    ),
    PacketCase(
        "PUBLISH with a two-byte remaining length (128)",
        MQTT_5,
        b"\x30\x80\x01\x00\x01t\x00" + b"x" * 124,
        Publish("t", b"x" * 124),
    ),
    # PUBACK, PUBREC, PUBREL, PUBCOMP (§3.4 - §3.7)
    PacketCase("PUBACK success (remaining length 2)", MQTT_5, b"\x40\x02\x00\x01", PubAck(1)),
    PacketCase(
        "PUBACK no matching subscribers (remaining length 3)",
        MQTT_5,
        b"\x40\x03\x00\x01\x10",
        PubAck(1, 0x10),
    ),
    PacketCase(
        "PUBACK unspecified error with a reason string",
        MQTT_5,
        b"\x40\x08\x00\x01\x80\x04" + _REASON_E,
        PubAck(1, 0x80, Properties(reason_string="e")),
    ),
    PacketCase(
        "PUBACK success written with its reason code",
        MQTT_5,
        b"\x40\x03\x00\x01\x00",
        PubAck(1),
        decode_only=True,
    ),
    PacketCase(
        "PUBACK success with an empty property block",
        MQTT_5,
        b"\x40\x04\x00\x01\x00\x00",
        PubAck(1),
        decode_only=True,
    ),
    PacketCase("PUBREC success", MQTT_5, b"\x50\x02\x12\x34", PubRec(0x1234)),
    PacketCase(
        "PUBREC packet identifier in use", MQTT_5, b"\x50\x03\x12\x34\x91", PubRec(0x1234, 0x91)
    ),
    PacketCase(
        "PUBREC success with a user property",
        MQTT_5,
        b"\x50\x0b\x12\x34\x00\x07" + _USER_KV,
        PubRec(0x1234, 0, Properties(user_properties=[("k", "v")])),
    ),
    PacketCase("PUBREL success", MQTT_5, b"\x62\x02\xff\xff", PubRel(65535)),
    PacketCase(
        "PUBREL packet identifier not found",
        MQTT_5,
        b"\x62\x03\xff\xff\x92",
        PubRel(65535, reason_code=0x92),
    ),
    PacketCase(
        "PUBREL with an empty reason string",
        MQTT_5,
        b"\x62\x07\xff\xff\x92\x03\x1f\x00\x00",
        PubRel(65535, reason_code=0x92, properties=Properties(reason_string="")),
    ),
    PacketCase("PUBCOMP success", MQTT_5, b"\x70\x02\x00\x0a", PubComp(10)),
    PacketCase(
        "PUBCOMP packet identifier not found", MQTT_5, b"\x70\x03\x00\x0a\x92", PubComp(10, 0x92)
    ),
    PacketCase(
        "PUBCOMP success with a reason string",
        MQTT_5,
        b"\x70\x08\x00\x0a\x00\x04" + _REASON_E,
        PubComp(10, 0, Properties(reason_string="e")),
    ),
    # SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK (§3.8 - §3.11)
    PacketCase(
        "SUBSCRIBE with a subscription identifier and subscription options",
        MQTT_5,
        b"\x82\x1b"  # remaining length 27
        b"\x00\x01"  # packet identifier
        b"\x02\x0b\x05"  # property length 2: subscription identifier 5
        b"\x00\x03a/b\x00"  # QoS 0
        b"\x00\x01#\x05"  # QoS 1, No Local
        b"\x00\x05x/+/y\x2a"  # QoS 2, Retain As Published, Retain Handling 2
        b"\x00\x01s\x11",  # QoS 1, Retain Handling 1
        Subscribe(
            1,
            [("a/b", 0x00), ("#", 0x05), ("x/+/y", 0x2A), ("s", 0x11)],
            properties=Properties(subscription_identifiers=[5]),
        ),
    ),
    PacketCase(
        "SUBSCRIBE without properties",
        MQTT_5,
        b"\x82\x07\x00\x02\x00\x00\x01a\x01",
        Subscribe(2, [("a", 1)]),
    ),
    PacketCase(
        "SUBACK with every reason code",
        MQTT_5,
        b"\x90\x0f\x00\x01\x00\x00\x01\x02\x80\x83\x87\x8f\x91\x97\x9e\xa1\xa2",
        SubAck(1, [0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2]),
    ),
    PacketCase(
        "SUBACK with a reason string",
        MQTT_5,
        b"\x90\x08\x00\x07\x04\x1f\x00\x01x\x01",
        SubAck(7, [1], Properties(reason_string="x")),
    ),
    PacketCase(
        "UNSUBSCRIBE with a user property and two filters",
        MQTT_5,
        b"\xa2\x12\x00\x02\x07" + _USER_KV + b"\x00\x03a/b\x00\x01#",
        Unsubscribe(2, ["a/b", "#"], properties=Properties(user_properties=[("k", "v")])),
    ),
    PacketCase(
        "UNSUBSCRIBE without properties",
        MQTT_5,
        b"\xa2\x06\x00\x03\x00\x00\x01#",
        Unsubscribe(3, ["#"]),
    ),
    PacketCase(
        "UNSUBACK with every reason code",
        MQTT_5,
        b"\xb0\x0a\x00\x02\x00\x00\x11\x80\x83\x87\x8f\x91",
        UnsubAck(2, [0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91]),
    ),
    PacketCase(
        "UNSUBACK with an empty reason string",
        MQTT_5,
        b"\xb0\x07\x00\x03\x03\x1f\x00\x00\x00",
        UnsubAck(3, [0], Properties(reason_string="")),
    ),
    # PINGREQ, PINGRESP (§3.12, §3.13): as in 3.1.1
    PacketCase("PINGREQ", MQTT_5, b"\xc0\x00", PingReq()),
    PacketCase("PINGRESP", MQTT_5, b"\xd0\x00", PingResp()),
    # DISCONNECT (§3.14)
    PacketCase("DISCONNECT normal (remaining length 0)", MQTT_5, b"\xe0\x00", Disconnect()),
    PacketCase(
        "DISCONNECT with will message (remaining length 1)",
        MQTT_5,
        b"\xe0\x01\x04",
        Disconnect(4),
    ),
    PacketCase(
        "DISCONNECT session taken over, with a server reference and a reason string",
        MQTT_5,
        b"\xe0\x0c\x8e\x0a\x1c\x00\x01s\x1f\x00\x03bye",
        Disconnect(0x8E, Properties(server_reference="s", reason_string="bye")),
    ),
    PacketCase(
        "DISCONNECT normal with a session expiry interval",
        MQTT_5,
        b"\xe0\x07\x00\x05\x11\x00\x00\x00\x00",
        Disconnect(0, Properties(session_expiry_interval=0)),
    ),
    PacketCase(
        "DISCONNECT normal written with its reason code",
        MQTT_5,
        b"\xe0\x01\x00",
        Disconnect(),
        decode_only=True,
    ),
    PacketCase(
        "DISCONNECT normal with an empty property block",
        MQTT_5,
        b"\xe0\x02\x00\x00",
        Disconnect(),
        decode_only=True,
    ),
    # AUTH (§3.15)
    PacketCase("AUTH success (remaining length 0)", MQTT_5, b"\xf0\x00", Auth()),
    PacketCase(
        "AUTH continue authentication with a method and data",
        MQTT_5,
        b"\xf0\x0b\x18\x09\x15\x00\x01m\x16\x00\x02\x01\x02",
        Auth(0x18, Properties(authentication_method="m", authentication_data=b"\x01\x02")),
    ),
    PacketCase(
        "AUTH re-authenticate without properties",
        MQTT_5,
        b"\xf0\x02\x19\x00",
        Auth(0x19),
    ),
    PacketCase(
        "AUTH re-authenticate without a property length",
        MQTT_5,
        b"\xf0\x01\x19",
        Auth(0x19),
        decode_only=True,
    ),
]

CASES_5: list[PacketCase] = _CASES_5


def _connect5(flags: int, rest: bytes) -> bytes:
    """A level-5 CONNECT: name, version, `flags`, keep alive 60, then `rest` (the property
    block and the payload)."""
    body = b"\x00\x04MQTT\x05" + bytes((flags,)) + b"\x00\x3c" + rest
    return b"\x10" + bytes((len(body),)) + body


# Each packet type of 5.0 with its only valid flag nibble and a valid body.
_FLAG_BASES_5: list[tuple[str, bytes]] = [
    ("CONNACK", b"\x20\x03\x00\x00\x00"),
    ("PUBACK", b"\x40\x02\x00\x01"),
    ("PUBREC", b"\x50\x02\x00\x01"),
    ("PUBREL", b"\x62\x02\x00\x01"),
    ("PUBCOMP", b"\x70\x02\x00\x01"),
    ("SUBSCRIBE", b"\x82\x07\x00\x01\x00\x00\x01a\x00"),
    ("SUBACK", b"\x90\x04\x00\x01\x00\x00"),
    ("UNSUBSCRIBE", b"\xa2\x06\x00\x01\x00\x00\x01a"),
    ("UNSUBACK", b"\xb0\x04\x00\x01\x00\x00"),
    ("PINGREQ", b"\xc0\x00"),
    ("PINGRESP", b"\xd0\x00"),
    ("DISCONNECT", b"\xe0\x00"),
    ("AUTH", b"\xf0\x00"),
    ("CONNECT", _connect5(0x02, b"\x00\x00\x01c")),
]

_RESERVED_FLAG_CASES_5: list[MalformedCase] = [
    MalformedCase(
        f"{name} with flags {flags:04b}",
        MQTT_5,
        bytes(((base[0] & 0xF0) | flags,)) + base[1:],
        f"{name}: reserved flag bits are {flags:04b}, must be {base[0] & 0x0F:04b}",
    )
    for name, base in _FLAG_BASES_5
    for flags in (0b0000, 0b0001, 0b0010, 0b1000, 0b1111)
    if flags != base[0] & 0x0F
]


def _bad_code(name: str, raw: bytes, code: int) -> MalformedCase:
    return MalformedCase(
        f"{name} with reason code 0x{code:02X}",
        MQTT_5,
        raw,
        f"{name}: reason code 0x{code:02X} is not valid for {name}",
    )


_REASON_CODE_CASES_5: list[MalformedCase] = [
    _bad_code("CONNACK", b"\x20\x03\x00\x01\x00", 0x01),  # a 3.1.1 return code
    _bad_code("PUBACK", b"\x40\x03\x00\x01\x92", 0x92),
    _bad_code("PUBREC", b"\x50\x03\x00\x01\x04", 0x04),
    _bad_code("PUBREL", b"\x62\x03\x00\x01\x10", 0x10),
    _bad_code("PUBCOMP", b"\x70\x03\x00\x01\x80", 0x80),
    _bad_code("SUBACK", b"\x90\x05\x00\x01\x00\x00\x03", 0x03),
    _bad_code("UNSUBACK", b"\xb0\x05\x00\x01\x00\x00\x10", 0x10),
    _bad_code("DISCONNECT", b"\xe0\x01\x01", 0x01),
    _bad_code("AUTH", b"\xf0\x02\x80\x00", 0x80),
]

MALFORMED_CASES_5: list[MalformedCase] = [
    *_RESERVED_FLAG_CASES_5,
    *_REASON_CODE_CASES_5,
    # CONNECT
    MalformedCase(
        "CONNECT with reserved flag bit 0",
        MQTT_5,
        _connect5(0x03, b"\x00\x00\x01c"),
        "CONNECT: reserved flag bit 0 is set",
    ),
    MalformedCase(
        "CONNECT without a property length (a 3.1.1 body)",
        MQTT_5,
        _connect5(0x02, b"\x00\x04lvl1"),
        "CONNECT: field of 1132 bytes runs past the end of the packet",
    ),
    MalformedCase(
        "CONNECT with will QoS 3",
        MQTT_5,
        _connect5(0x1E, b"\x00\x00\x01c\x00\x00\x01w\x00\x00"),
        "CONNECT: will QoS 3 is invalid",
    ),
    MalformedCase(
        "CONNECT with will QoS but no will flag",
        MQTT_5,
        _connect5(0x0A, b"\x00\x00\x01c"),
        "CONNECT: will QoS/retain set without the will flag",
    ),
    MalformedCase(
        "CONNECT with will retain but no will flag",
        MQTT_5,
        _connect5(0x22, b"\x00\x00\x01c"),
        "CONNECT: will QoS/retain set without the will flag",
    ),
    MalformedCase(
        "CONNECT with a wildcard in the will topic",
        MQTT_5,
        _connect5(0x06, b"\x00\x00\x01c\x00\x00\x03a/#\x00\x00"),
        "CONNECT: will topic: wildcard in topic name",
    ),
    MalformedCase(
        "CONNECT without will properties",
        MQTT_5,
        _connect5(0x06, b"\x00\x00\x01c\x00\x01w\x00\x00"),
        "CONNECT: field of 375 bytes runs past the end of the packet",  # 0x0177: "\x01w"
    ),
    MalformedCase(
        "CONNECT with a will property in its own properties",
        MQTT_5,
        _connect5(0x02, b"\x05\x18\x00\x00\x00\x01\x00\x01c"),
        "CONNECT: will delay interval is not valid in this packet",
    ),
    MalformedCase(
        "CONNECT with a session expiry interval in the will properties",
        MQTT_5,
        _connect5(0x06, b"\x00\x00\x01c\x05\x11\x00\x00\x00\x01\x00\x01w\x00\x00"),
        "WILL: session expiry interval is not valid in this packet",
    ),
    MalformedCase(
        "CONNECT with authentication data but no method",
        MQTT_5,
        _connect5(0x02, b"\x04\x16\x00\x01x\x00\x01c"),
        "CONNECT: authentication data without an authentication method",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "CONNECT with a receive maximum of 0",
        MQTT_5,
        _connect5(0x02, b"\x03\x21\x00\x00\x00\x01c"),
        "receive maximum must not be 0",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "CONNECT with a property length past the packet",
        MQTT_5,
        _connect5(0x02, b"\x09\x11\x00\x00\x00\x01"),
        "CONNECT: 9 bytes of properties run past the packet",
    ),
    MalformedCase(
        "CONNECT with bytes after the payload",
        MQTT_5,
        _connect5(0x02, b"\x00\x00\x01c!"),
        "CONNECT: 1 unexpected bytes at the end",
    ),
    MalformedCase(
        "CONNECT client identifier holds U+0000",
        MQTT_5,
        _connect5(0x02, b"\x00\x00\x01\x00"),
        "CONNECT: client identifier contains U+0000",
    ),
    # CONNACK
    MalformedCase(
        "CONNACK without a property length",
        MQTT_5,
        b"\x20\x02\x00\x00",
        "CONNACK: remaining length must be at least 3, got 2",
    ),
    MalformedCase(
        "CONNACK with reserved acknowledge flags",
        MQTT_5,
        b"\x20\x03\x02\x00\x00",
        "CONNACK: reserved acknowledge flags are set",
    ),
    MalformedCase(
        "CONNACK with a topic alias",
        MQTT_5,
        b"\x20\x06\x00\x00\x03\x23\x00\x01",
        "CONNACK: topic alias is not valid in this packet",
    ),
    MalformedCase(
        "CONNACK with a reason string twice",
        MQTT_5,
        b"\x20\x0b\x00\x80\x08\x1f\x00\x01a\x1f\x00\x01b",
        "CONNACK: reason string is included twice",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "CONNACK with a maximum QoS of 2",
        MQTT_5,
        b"\x20\x05\x00\x00\x02\x24\x02",
        "maximum qos must be 0 or 1",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "CONNACK with bytes after the properties",
        MQTT_5,
        b"\x20\x04\x00\x00\x00\x00",
        "CONNACK: 1 unexpected bytes after the properties",
    ),
    # PUBLISH
    MalformedCase(
        "PUBLISH QoS 3", MQTT_5, b"\x36\x08\x00\x03a/b\x00\x01\x00", "PUBLISH: QoS 3 is invalid"
    ),
    MalformedCase(
        "PUBLISH QoS 0 with DUP", MQTT_5, b"\x38\x06\x00\x03a/b\x00", "PUBLISH: DUP must be 0"
    ),
    MalformedCase(
        "PUBLISH without a property length (a 3.1.1 body)",
        MQTT_5,
        b"\x30\x05\x00\x03a/b",
        "PUBLISH: packet ends before the properties",
    ),
    MalformedCase(
        "QoS 1 PUBLISH without a property length",
        MQTT_5,
        b"\x32\x07\x00\x03a/b\x00\x01",
        "PUBLISH: packet ends before the properties",
    ),
    MalformedCase(
        "PUBLISH with an empty topic name and no topic alias",
        MQTT_5,
        b"\x30\x04\x00\x00\x00x",
        "PUBLISH: empty topic name without a topic alias",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "PUBLISH with an empty topic name and only other properties",
        MQTT_5,
        b"\x30\x05\x00\x00\x02\x01\x00",
        "PUBLISH: empty topic name without a topic alias",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "PUBLISH with a topic alias of 0",
        MQTT_5,
        b"\x30\x07\x00\x01t\x03\x23\x00\x00",
        "topic alias must not be 0",
        TOPIC_ALIAS_INVALID,
    ),
    MalformedCase(
        "PUBLISH with a subscription identifier of 0",
        MQTT_5,
        b"\x30\x06\x00\x01t\x02\x0b\x00",
        "subscription identifier must not be 0",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "PUBLISH with a session expiry interval",
        MQTT_5,
        b"\x30\x09\x00\x01t\x05\x11\x00\x00\x00\x01",
        "PUBLISH: session expiry interval is not valid in this packet",
    ),
    MalformedCase(
        "PUBLISH with an unknown property identifier",
        MQTT_5,
        b"\x30\x06\x00\x01t\x01\x04p",
        "PUBLISH: unknown property identifier 0x04",
    ),
    MalformedCase(
        "PUBLISH with a property length past the packet",
        MQTT_5,
        b"\x30\x06\x00\x01t\x05\x01\x01",
        "PUBLISH: 5 bytes of properties run past the packet",
    ),
    MalformedCase(
        "PUBLISH QoS 1 with packet identifier 0",
        MQTT_5,
        b"\x32\x08\x00\x03a/b\x00\x00\x00",
        "PUBLISH: packet identifier 0 is invalid",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "PUBLISH with a wildcard in the topic",
        MQTT_5,
        b"\x30\x06\x00\x03a/#\x00",
        "PUBLISH: wildcard in topic name",
    ),
    MalformedCase(
        "PUBLISH topic is not UTF-8",
        MQTT_5,
        b"\x30\x05\x00\x02\xc3\x28\x00",
        "PUBLISH: topic name is not valid UTF-8",
    ),
    # PUBACK, PUBREC, PUBREL, PUBCOMP
    MalformedCase(
        "PUBACK with remaining length 1",
        MQTT_5,
        b"\x40\x01\x00",
        "PUBACK: remaining length must be at least 2, got 1",
    ),
    MalformedCase(
        "PUBREC with packet identifier 0",
        MQTT_5,
        b"\x50\x02\x00\x00",
        "PUBREC: packet identifier 0 is invalid",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "PUBREL with bytes after the properties",
        MQTT_5,
        b"\x62\x05\x00\x01\x00\x00\xff",
        "PUBREL: 1 unexpected bytes after the properties",
    ),
    MalformedCase(
        "PUBCOMP with a property length past the packet",
        MQTT_5,
        b"\x70\x04\x00\x01\x00\x05",
        "PUBCOMP: 5 bytes of properties run past the packet",
    ),
    MalformedCase(
        "PUBACK with a topic alias",
        MQTT_5,
        b"\x40\x07\x00\x01\x00\x03\x23\x00\x01",
        "PUBACK: topic alias is not valid in this packet",
    ),
    # SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK
    MalformedCase(
        "SUBSCRIBE with reserved bit 6 of the subscription options",
        MQTT_5,
        b"\x82\x07\x00\x01\x00\x00\x01a\x40",
        "SUBSCRIBE: reserved bits of the subscription options are set",
    ),
    MalformedCase(
        "SUBSCRIBE with reserved bit 7 of the subscription options",
        MQTT_5,
        b"\x82\x07\x00\x01\x00\x00\x01a\x81",
        "SUBSCRIBE: reserved bits of the subscription options are set",
    ),
    MalformedCase(
        "SUBSCRIBE with maximum QoS 3",
        MQTT_5,
        b"\x82\x07\x00\x01\x00\x00\x01a\x03",
        "SUBSCRIBE: maximum QoS 3 is invalid",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "SUBSCRIBE with retain handling 3",
        MQTT_5,
        b"\x82\x07\x00\x01\x00\x00\x01a\x31",
        "SUBSCRIBE: retain handling 3 is invalid",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "SUBSCRIBE without topic filters",
        MQTT_5,
        b"\x82\x03\x00\x01\x00",
        "SUBSCRIBE: no topic filter",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "SUBSCRIBE without a property length",
        MQTT_5,
        b"\x82\x02\x00\x01",
        "SUBSCRIBE: packet ends before the properties",
    ),
    MalformedCase(
        "SUBSCRIBE with two subscription identifiers",
        MQTT_5,
        b"\x82\x0b\x00\x01\x04\x0b\x01\x0b\x02\x00\x01a\x00",
        "SUBSCRIBE: subscription identifier is included twice",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "SUBSCRIBE with an empty filter",
        MQTT_5,
        b"\x82\x06\x00\x01\x00\x00\x00\x00",
        "SUBSCRIBE: empty topic filter",
    ),
    MalformedCase(
        "SUBSCRIBE filter without its options",
        MQTT_5,
        b"\x82\x06\x00\x01\x00\x00\x01a",
        "SUBSCRIBE: packet ends early",
    ),
    MalformedCase(
        "SUBSCRIBE with packet identifier 0",
        MQTT_5,
        b"\x82\x07\x00\x00\x00\x00\x01a\x00",
        "SUBSCRIBE: packet identifier 0 is invalid",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "SUBACK without reason codes", MQTT_5, b"\x90\x03\x00\x01\x00", "SUBACK: no reason code"
    ),
    MalformedCase(
        "UNSUBSCRIBE without topic filters",
        MQTT_5,
        b"\xa2\x03\x00\x01\x00",
        "UNSUBSCRIBE: no topic filter",
        PROTOCOL_ERROR,
    ),
    MalformedCase(
        "UNSUBSCRIBE with an empty filter",
        MQTT_5,
        b"\xa2\x05\x00\x01\x00\x00\x00",
        "UNSUBSCRIBE: empty topic filter",
    ),
    MalformedCase(
        "UNSUBSCRIBE with a subscription identifier",
        MQTT_5,
        b"\xa2\x08\x00\x01\x02\x0b\x01\x00\x01a",
        "UNSUBSCRIBE: subscription identifier is not valid in this packet",
    ),
    MalformedCase(
        "UNSUBACK without reason codes (a 3.1.1 body)",
        MQTT_5,
        b"\xb0\x02\x00\x01",
        "UNSUBACK: packet ends before the properties",
    ),
    MalformedCase(
        "UNSUBACK without reason codes",
        MQTT_5,
        b"\xb0\x03\x00\x01\x00",
        "UNSUBACK: no reason code",
    ),
    # DISCONNECT, AUTH, PINGREQ
    MalformedCase(
        "DISCONNECT with bytes after the properties",
        MQTT_5,
        b"\xe0\x03\x00\x00\x00",
        "DISCONNECT: 1 unexpected bytes after the properties",
    ),
    MalformedCase(
        "DISCONNECT with a topic alias",
        MQTT_5,
        b"\xe0\x05\x00\x03\x23\x00\x01",
        "DISCONNECT: topic alias is not valid in this packet",
    ),
    MalformedCase(
        "AUTH with a session expiry interval",
        MQTT_5,
        b"\xf0\x07\x18\x05\x11\x00\x00\x00\x01",
        "AUTH: session expiry interval is not valid in this packet",
    ),
    MalformedCase(
        "AUTH with a property length past the packet",
        MQTT_5,
        b"\xf0\x03\x18\x04\x15",
        "AUTH: 4 bytes of properties run past the packet",
    ),
    MalformedCase(
        "PINGREQ with remaining length 1",
        MQTT_5,
        b"\xc0\x01\x00",
        "PINGREQ: remaining length must be 0, got 1",
    ),
]
