"""Golden packets: raw bytes and the packet they stand for, for both protocol levels.

`CASES` holds one entry per packet and protocol level: the bytes were written by hand from
the specifications (MQTT 3.1 for level 3, OASIS MQTT 3.1.1 for level 4), never produced by
telemq's encoder. Unless an entry is `decode_only`, encoding the packet gives exactly the
raw bytes, and decoding the raw bytes at that level gives the packet back.

`MALFORMED_CASES` holds bytes that must be refused, each with a substring the
`MalformedPacket` message has to contain. Codec tests, connection tests and fuzzers reuse
both tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from telemq.protocol import (
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
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
LEVELS = (MQTT_3_1, MQTT_3_1_1)


@dataclass(frozen=True)
class PacketCase:
    description: str
    level: int
    raw: bytes
    packet: Packet
    decode_only: bool = False  # accepted as input, but not what the encoder writes

    @property
    def id(self) -> str:
        return f"{'3.1' if self.level == MQTT_3_1 else '3.1.1'}: {self.description}"


@dataclass(frozen=True)
class MalformedCase:
    description: str
    level: int
    raw: bytes
    message: str  # a substring of the MalformedPacket message

    @property
    def id(self) -> str:
        return f"{'3.1' if self.level == MQTT_3_1 else '3.1.1'}: {self.description}"


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
    return [case for case in CASES if case.level == level]


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

_PACKET_ID_ZERO_CASES: list[MalformedCase] = [
    MalformedCase(f"{name} with packet identifier 0", level, raw, f"{name}: packet identifier 0")
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
