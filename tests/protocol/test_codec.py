"""The codec against golden bytes: every packet type at both protocol levels, the seed's
worked example, remaining-length boundaries, the maximum packet size and malformed input."""

from __future__ import annotations

import pytest
from packet_cases import (
    CASES,
    LEVELS,
    MALFORMED_CASES,
    MQTT_3_1,
    MQTT_3_1_1,
    SEED_PUBLISH_VARIABLE_HEADER,
    MalformedCase,
    PacketCase,
    cases_for,
    golden_stream,
    packet_types,
)

from telemq.protocol import (
    MAX_REMAINING_LENGTH,
    Connect,
    Decoder,
    MalformedPacket,
    PacketType,
    PingReq,
    Publish,
    RemoteProtocolError,
    decode_packet,
    encode,
    encode_publish,
    encode_remaining_length,
)


def decode_all(data: bytes, level: int = MQTT_3_1_1) -> list[object]:
    decoder = Decoder(protocol_level=level)
    packets = decoder.feed(data)
    assert decoder.buffered == 0
    return list(packets)


# ---------------------------------------------------------------------------
# Golden packets


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_decode_golden(case: PacketCase) -> None:
    assert decode_packet(case.raw, case.level) == case.packet


@pytest.mark.parametrize(
    "case", [case for case in CASES if not case.decode_only], ids=lambda case: case.id
)
def test_encode_golden(case: PacketCase) -> None:
    assert encode(case.packet) == case.raw


@pytest.mark.parametrize("level", LEVELS)
def test_golden_table_covers_every_packet_type(level: int) -> None:
    covered = {case.packet.packet_type for case in cases_for(level) if not case.decode_only}
    assert covered == packet_types(level)  # all but AUTH, which is MQTT 5.0's


@pytest.mark.parametrize("level", LEVELS)
def test_golden_stream_decodes_in_one_feed(level: int) -> None:
    raw, expected = golden_stream(level)
    assert decode_all(raw, level) == expected


@pytest.mark.parametrize("level", LEVELS)
def test_golden_stream_decodes_byte_by_byte(level: int) -> None:
    raw, expected = golden_stream(level)
    decoder = Decoder(protocol_level=level)
    packets = []
    for index in range(len(raw)):
        packets += decoder.feed(raw[index : index + 1])
    assert packets == expected
    assert decoder.buffered == 0


@pytest.mark.parametrize("level", LEVELS)
def test_golden_stream_decodes_at_every_split_point(level: int) -> None:
    raw, expected = golden_stream(level)
    for cut in range(len(raw) + 1):
        decoder = Decoder(protocol_level=level)
        assert decoder.feed(raw[:cut]) + decoder.feed(raw[cut:]) == expected, cut


def test_partial_packet_waits_for_more() -> None:
    decoder = Decoder()
    assert decoder.feed(b"\x32\x07\x00\x03a/") == []
    assert decoder.buffered == 6
    assert decoder.feed(b"b\x00") == []
    assert decoder.feed(b"\x0a\xc0") == [Publish("a/b", qos=1, packet_id=10)]
    assert decoder.buffered == 1  # the first byte of the next packet
    assert decoder.feed(b"\x00") == [PingReq()]
    assert decoder.buffered == 0


def test_decode_packet_wants_exactly_one_packet() -> None:
    with pytest.raises(MalformedPacket, match="expected exactly one packet, got 2"):
        decode_packet(b"\xc0\x00\xc0\x00")
    with pytest.raises(MalformedPacket, match="got 0 and 1 extra bytes"):
        decode_packet(b"\xc0")


def test_connect_switches_the_decoder_to_its_level() -> None:
    """Before CONNECT the 3.1.1 rules apply; a 3.1 CONNECT relaxes them for what follows."""
    connect_3_1 = cases_for(MQTT_3_1)[0]
    subscribe_with_dup = b"\x8a\x06\x00\x01\x00\x01a\x00"
    decoder = Decoder()
    packets = decoder.feed(connect_3_1.raw + subscribe_with_dup)
    assert [packet.packet_type for packet in packets] == [PacketType.CONNECT, PacketType.SUBSCRIBE]
    assert decoder.protocol_level == MQTT_3_1
    with pytest.raises(MalformedPacket, match="reserved flag bits are 1010"):
        Decoder().feed(subscribe_with_dup)


# ---------------------------------------------------------------------------
# The seed's worked example: PUBLISH, topic "a/b", QoS 1, message id 10


def test_seed_worked_example_byte_for_byte() -> None:
    publish = Publish("a/b", b"", qos=1, packet_id=10)
    assert bytes([0x00, 0x03, 0x61, 0x2F, 0x62, 0x00, 0x0A]) == SEED_PUBLISH_VARIABLE_HEADER
    expected = bytes([0x32, 0x07]) + SEED_PUBLISH_VARIABLE_HEADER
    assert encode(publish) == expected
    assert encode_publish(b"a/b", b"", 1, False, False, 10) == expected
    for level in LEVELS:
        assert decode_packet(expected, level) == publish


def test_seed_worked_example_with_a_payload() -> None:
    payload = b"temperature=21.5"
    raw = encode(Publish("a/b", payload, qos=1, packet_id=10))
    assert raw[0] == 0x32  # PUBLISH, DUP 0, QoS 1, RETAIN 0
    assert raw[1] == len(SEED_PUBLISH_VARIABLE_HEADER) + len(payload)
    assert raw[2:9] == SEED_PUBLISH_VARIABLE_HEADER
    assert raw[9:] == payload


def test_encode_publish_matches_encode() -> None:
    for topic, payload, qos, retain, dup, packet_id in [
        ("a/b", b"x" * 200, 2, True, True, 513),
        ("t", b"", 0, True, False, 0),
        ("é/$", b"\x00", 1, False, True, 65535),
    ]:
        packet = Publish(topic, payload, qos, retain, dup, packet_id)
        assert encode_publish(topic.encode(), payload, qos, retain, dup, packet_id) == encode(
            packet
        )


def test_encode_rejects_what_is_not_a_packet() -> None:
    # From source the codec says so itself; compiled, the argument's type check does.
    with pytest.raises(TypeError, match=r"not an MQTT packet|object expected; got str"):
        encode("PINGREQ")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Remaining length

REMAINING_LENGTHS = [
    (0, b"\x00"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (16383, b"\xff\x7f"),
    (16384, b"\x80\x80\x01"),
    (2097151, b"\xff\xff\x7f"),
    (2097152, b"\x80\x80\x80\x01"),
    (268435455, b"\xff\xff\xff\x7f"),
]


@pytest.mark.parametrize(("length", "encoded"), REMAINING_LENGTHS)
def test_encode_remaining_length(length: int, encoded: bytes) -> None:
    assert encode_remaining_length(length) == encoded


@pytest.mark.parametrize("length", [-1, MAX_REMAINING_LENGTH + 1])
def test_encode_remaining_length_out_of_range(length: int) -> None:
    assert MAX_REMAINING_LENGTH == 268435455
    with pytest.raises(ValueError, match="out of range"):
        encode_remaining_length(length)


@pytest.mark.parametrize(
    ("length", "encoded"),
    [(length, encoded) for length, encoded in REMAINING_LENGTHS if 5 <= length <= 2097152],
)
def test_publish_with_boundary_remaining_length_round_trips(length: int, encoded: bytes) -> None:
    publish = Publish("a/b", b"\xa5" * (length - 5))  # 2 + 3 bytes of topic
    raw = encode(publish)
    assert raw[: 1 + len(encoded)] == b"\x30" + encoded
    assert len(raw) == 1 + len(encoded) + length
    assert decode_packet(raw) == publish


def test_zero_remaining_length_packet() -> None:
    assert decode_packet(b"\xc0\x00") == PingReq()


@pytest.mark.parametrize(("length", "encoded"), REMAINING_LENGTHS[1:])
def test_header_of_a_large_packet_waits_for_its_body(length: int, encoded: bytes) -> None:
    decoder = Decoder()
    header = b"\x30" + encoded
    assert decoder.feed(header) == []
    assert decoder.buffered == len(header)
    assert decoder.feed(b"\x00\x03a/b") == []
    assert decoder.buffered == len(header) + 5


def test_header_of_the_largest_packet_is_rejected_by_a_max_size() -> None:
    decoder = Decoder(max_packet_size=1024 * 1024)
    with pytest.raises(MalformedPacket, match="packet of 268435460 bytes exceeds the maximum"):
        decoder.feed(b"\x30\xff\xff\xff\x7f")


def test_incomplete_remaining_length_waits() -> None:
    decoder = Decoder()
    for byte in b"\x30\xff\xff\xff":
        assert decoder.feed(bytes([byte])) == []
    assert decoder.buffered == 4


# ---------------------------------------------------------------------------
# Maximum packet size, checked from the fixed header alone


def test_packet_at_the_max_size_is_accepted() -> None:
    publish = Publish("a/b", b"x" * 95)  # 2 + 100 bytes
    raw = encode(publish)
    assert len(raw) == 102
    assert Decoder(max_packet_size=102).feed(raw) == [publish]


def test_packet_one_byte_over_the_max_size_is_rejected() -> None:
    raw = encode(Publish("a/b", b"x" * 96))
    with pytest.raises(
        MalformedPacket, match="packet of 103 bytes exceeds the maximum packet size"
    ):
        Decoder(max_packet_size=102).feed(raw)


@pytest.mark.parametrize("level", LEVELS)
def test_oversized_packet_is_rejected_before_its_body_arrives(level: int) -> None:
    decoder = Decoder(max_packet_size=1024, protocol_level=level)
    header = b"\x30" + encode_remaining_length(1024)  # 1 + 2 + 1024 bytes in all
    with pytest.raises(
        MalformedPacket, match="packet of 1027 bytes exceeds the maximum packet size of 1024"
    ):
        decoder.feed(header)


def test_oversized_packet_is_rejected_when_its_header_completes() -> None:
    decoder = Decoder(max_packet_size=1024)
    assert decoder.feed(b"\xc0\x00\x30\x80") == [PingReq()]
    with pytest.raises(MalformedPacket, match="exceeds the maximum packet size"):
        decoder.feed(b"\x08")


# ---------------------------------------------------------------------------
# Malformed packets


@pytest.mark.parametrize("case", MALFORMED_CASES, ids=lambda case: case.id)
def test_malformed(case: MalformedCase) -> None:
    with pytest.raises(MalformedPacket) as excinfo:
        Decoder(protocol_level=case.level).feed(case.raw)
    assert case.message in str(excinfo.value)
    assert isinstance(excinfo.value, RemoteProtocolError)


@pytest.mark.parametrize("case", MALFORMED_CASES, ids=lambda case: case.id)
def test_malformed_after_a_valid_packet_split_anywhere(case: MalformedCase) -> None:
    """The error is the same however the bytes arrive; a packet completed by an earlier
    feed is still returned."""
    stream = b"\xc0\x00" + case.raw
    for cut in range(1, len(stream)):
        decoder = Decoder(protocol_level=case.level)
        packets = []
        with pytest.raises(MalformedPacket) as excinfo:
            for chunk in (stream[:cut], stream[cut:]):
                packets += decoder.feed(chunk)
        assert case.message in str(excinfo.value)
        if cut in (2, 3):
            assert packets == [PingReq()]


def test_five_byte_remaining_length_is_rejected_before_the_fifth_byte() -> None:
    decoder = Decoder()
    assert decoder.feed(b"\x30\x80\x80\x80") == []
    with pytest.raises(MalformedPacket, match="remaining length is longer than 4 bytes"):
        decoder.feed(b"\x80")


@pytest.mark.parametrize("first_byte", [0x00, 0x0F, 0xF0, 0xFF])
def test_reserved_packet_types(first_byte: int) -> None:
    with pytest.raises(MalformedPacket, match=f"reserved packet type {first_byte >> 4}"):
        decode_packet(bytes([first_byte, 0]))


@pytest.mark.parametrize("level", LEVELS)
def test_connect_password_without_user_name_is_malformed_at_both_levels(level: int) -> None:
    """mq-reference §8.1: a password needs a user name, in 3.1 as in 3.1.1."""
    name = b"MQIsdp" if level == MQTT_3_1 else b"MQTT"
    body = (
        len(name).to_bytes(2, "big")
        + name
        + bytes([level, 0x42])  # password flag, clean session; no user name flag
        + b"\x00\x3c"
        + b"\x00\x01c"
        + b"\x00\x02pw"
    )
    raw = b"\x10" + bytes([len(body)]) + body
    with pytest.raises(MalformedPacket, match="password flag set without the user name flag"):
        decode_packet(raw, level)


def test_connect_with_an_unsupported_level_is_decoded_for_the_connack() -> None:
    """Unknown levels, and a level-5 CONNECT that does not parse as 5.0 (here a 3.1.1 body)
    for an owner without 5.0 (`mqtt5=False`), come back as a stub: the connection answers
    CONNACK 1, so the decoder must not reject the packet."""
    for name, level in [(b"MQTT", 5), (b"MQTT", 2), (b"MQIsdp", 5)]:
        body = len(name).to_bytes(2, "big") + name + bytes([level]) + b"\x02\x00\x3c\x00\x00\x00"
        packet = decode_packet(b"\x10" + bytes([len(body)]) + body)
        assert isinstance(packet, Connect)
        assert packet.protocol_level == level
        assert packet.protocol_name == name.decode()


@pytest.mark.parametrize("level", [3, 4])
def test_a_plain_qos0_publish_keeps_its_bytes_to_forward(level: int) -> None:
    plain = encode(Publish("a/b", b"payload", 0))
    decoder = Decoder(protocol_level=level)
    (packet,) = decoder.feed(plain)
    assert isinstance(packet, Publish)
    assert packet.frame == plain
    assert packet == Publish("a/b", b"payload", 0)  # frame is not part of equality
    # What a subscriber would be sent is exactly those bytes.
    assert encode_publish(b"a/b", packet.payload, 0, False, False, 0) == plain


@pytest.mark.parametrize(
    "packet",
    [
        Publish("a/b", b"x", 0, retain=True),
        Publish("a/b", b"x", 1, packet_id=7),
        Publish("a/b", b"x", 2, packet_id=7),
    ],
)
def test_other_publishes_carry_no_frame(packet: Publish) -> None:
    (decoded,) = Decoder(protocol_level=4).feed(encode(packet))
    assert isinstance(decoded, Publish)
    assert decoded.frame is None


def test_topic_names_are_checked_once_each_and_the_memory_of_them_is_bounded() -> None:
    """Valid PUBLISH topic names are remembered (a bounded dict, `wire.VALID_TOPICS`);
    an invalid one never is, so it is refused every time."""
    from telemq.protocol import wire

    decoder = Decoder()
    wire.VALID_TOPICS.clear()
    for n in range(wire.VALID_TOPICS_KEPT + 10):
        (packet,) = decoder.feed(encode(Publish(f"memo/{n}", b"x")))
        assert isinstance(packet, Publish) and packet.topic == f"memo/{n}"
    assert 0 < len(wire.VALID_TOPICS) <= wire.VALID_TOPICS_KEPT
    for _ in range(2):
        with pytest.raises(MalformedPacket, match=r"U\+0007 in topic name"):
            Decoder().feed(b"\x30\x05\x00\x03a\x07b")
    assert "a\x07b" not in wire.VALID_TOPICS
