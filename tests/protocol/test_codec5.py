"""The MQTT 5.0 codec (`codec5`, through `Decoder` and `encode(packet, 5)`).

Golden bytes written by hand from OASIS MQTT 5.0 chapter 3 (`packet_cases.CASES_5`) both ways,
every split of their stream, the malformed ones with their reason codes, the reason code
table of each packet against the specification's (`packet_strategies.REASON_CODES_5`), the
CONNECT that switches a decoder to level 5, the level-5 CONNECT of an owner without 5.0, and
Hypothesis round trips and splits of random valid packets.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packet_cases import (
    CASES_5,
    MALFORMED,
    MALFORMED_CASES_5,
    MQTT_5,
    MalformedCase,
    PacketCase,
    cases_for,
    golden_stream,
    packet_types,
)
from packet_strategies import REASON_CODES_5, packet_strategies, packets

from telemq.protocol import (
    VALID_REASON_CODES,
    Auth,
    ConnAck,
    Connect,
    Decoder,
    Disconnect,
    MalformedPacket,
    Packet,
    PacketType,
    Properties,
    PubAck,
    Publish,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    decode_packet,
    encode,
    encode_properties,
    encode_publish,
    encode_publish5,
    encode_remaining_length,
)
from telemq.protocol.codec5 import encode5
from telemq.protocol.properties import EMPTY_PROPERTIES_BYTES
from telemq.protocol.property_table import PropertyContext


def decode5(data: bytes) -> Packet:
    """One whole level-5 packet, decoded as an owner that speaks 5.0 does."""
    return decode_packet(data, MQTT_5, mqtt5=True)


def feed_all(decoder: Decoder, chunks: list[bytes]) -> list[Packet]:
    out: list[Packet] = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    return out


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cut % (len(data) + 1) for cut in cuts), len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


def reason_of(error: MalformedPacket) -> int:
    """The reason code a 5.0 connection would send for `error` (0x81 unless it says)."""
    return getattr(error, "reason", MALFORMED)


# ---------------------------------------------------------------------------
# Golden packets


@pytest.mark.parametrize("case", CASES_5, ids=lambda case: case.id)
def test_decode_golden(case: PacketCase) -> None:
    assert decode5(case.raw) == case.packet
    assert decode_packet(case.raw, MQTT_5) == case.packet  # an owner without 5.0 alike


@pytest.mark.parametrize(
    "case", [case for case in CASES_5 if not case.decode_only], ids=lambda case: case.id
)
def test_encode_golden(case: PacketCase) -> None:
    assert encode(case.packet, MQTT_5) == case.raw


def test_golden_table_covers_every_packet_type() -> None:
    covered = {case.packet.packet_type for case in cases_for(MQTT_5) if not case.decode_only}
    assert covered == packet_types(MQTT_5) == set(PacketType)


def test_golden_stream_decodes_in_one_feed_and_byte_by_byte() -> None:
    raw, expected = golden_stream(MQTT_5)
    decoder = Decoder(protocol_level=MQTT_5, mqtt5=True)
    assert decoder.feed(raw) == expected
    assert decoder.buffered == 0
    decoder = Decoder(protocol_level=MQTT_5, mqtt5=True)
    assert feed_all(decoder, [raw[index : index + 1] for index in range(len(raw))]) == expected
    assert decoder.buffered == 0


def test_golden_stream_decodes_at_every_split_point() -> None:
    raw, expected = golden_stream(MQTT_5)
    for cut in range(len(raw) + 1):
        decoder = Decoder(protocol_level=MQTT_5, mqtt5=True)
        assert decoder.feed(raw[:cut]) + decoder.feed(raw[cut:]) == expected, cut


def test_golden_stream_after_a_connect_at_every_split_point() -> None:
    """A decoder that starts at 3.1.1 reads the stream as 5.0 once a level-5 CONNECT has
    passed, wherever the bytes are cut."""
    connect = CASES_5[0]
    assert isinstance(connect.packet, Connect)
    raw, expected = golden_stream(MQTT_5)
    stream = connect.raw + raw
    for cut in range(0, len(stream) + 1, 3):
        decoder = Decoder(mqtt5=True)
        packets = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert packets == [connect.packet, *expected], cut
        assert decoder.protocol_level == MQTT_5


# ---------------------------------------------------------------------------
# Level switching and the frame of a plain QoS 0 PUBLISH


def test_a_level_5_connect_switches_the_decoder_in_the_same_feed() -> None:
    connect = encode(Connect("c", protocol_level=5))
    puback = b"\x40\x03\x00\x01\x10"  # 5.0's PUBACK with a reason code: malformed at 3.1.1
    decoder = Decoder()
    assert decoder.feed(connect + puback) == [Connect("c", protocol_level=5), PubAck(1, 0x10)]
    assert decoder.protocol_level == MQTT_5
    with pytest.raises(MalformedPacket, match="PUBACK: remaining length must be 2, got 3"):
        Decoder().feed(puback)


def test_auth_is_a_reserved_packet_type_before_level_5() -> None:
    for level in (3, 4):
        with pytest.raises(MalformedPacket, match="reserved packet type 15"):
            Decoder(protocol_level=level).feed(b"\xf0\x00")
    assert Decoder(protocol_level=5).feed(b"\xf0\x00") == [Auth()]


def test_a_plain_qos0_publish_keeps_no_frame_at_level_5() -> None:
    raw = b"\x30\x06\x00\x03a/b\x00"  # first byte 0x30, as the 3.1.1 shortcut expects
    (packet,) = Decoder(protocol_level=MQTT_5).feed(raw)
    assert packet == Publish("a/b")
    assert isinstance(packet, Publish)
    assert packet.frame is None
    # ... and after a CONNECT switched the level in the same feed.
    stream = encode(Connect("c", protocol_level=5)) + raw
    (_, packet) = Decoder().feed(stream)
    assert isinstance(packet, Publish)
    assert packet.frame is None


def test_a_3_1_1_connect_keeps_the_frame_shortcut() -> None:
    stream = encode(Connect("c")) + encode(Publish("a/b", b"x"))
    (_, packet) = Decoder(protocol_level=MQTT_5).feed(stream)
    assert isinstance(packet, Publish)
    assert packet.frame == encode(Publish("a/b", b"x"))


# ---------------------------------------------------------------------------
# A level-5 CONNECT, for an owner with and without 5.0


@pytest.mark.parametrize(
    "case",
    [case for case in MALFORMED_CASES_5 if case.raw[0] == 0x10 and "flag bits" not in case.message],
    ids=lambda case: case.id,
)
def test_a_malformed_level_5_connect_is_the_stub_for_an_owner_without_5(
    case: MalformedCase,
) -> None:
    """Such an owner answers CONNACK 1 whatever follows the level byte; a 5.0 owner gets the
    error (with its reason) to answer CONNACK 0x81 or 0x82."""
    decoder = Decoder()
    assert decoder.feed(case.raw) == [Connect(client_id="", protocol_level=5)]
    assert decoder.protocol_level == MQTT_5
    with pytest.raises(MalformedPacket):
        Decoder(mqtt5=True).feed(case.raw)


def test_the_protocol_name_of_3_1_with_level_5_is_not_mqtt_5() -> None:
    """MQTT 5.0 [MQTT-3.1.2-1]: with another name the packet is not 5.0's to parse."""
    body = b"\x00\x06MQIsdp\x05\x02\x00\x3c\x00\x00\x01c"
    raw = b"\x10" + bytes((len(body),)) + body
    for mqtt5 in (False, True):
        assert decode_packet(raw, mqtt5=mqtt5) == Connect(
            client_id="", protocol_level=5, protocol_name="MQIsdp"
        )


def test_connect_of_level_5_is_encoded_for_its_own_level() -> None:
    packet = Connect("c1", protocol_level=5, keepalive=60)
    assert encode(packet) == encode(packet, 4) == encode(packet, 5) == CASES_5[0].raw


# ---------------------------------------------------------------------------
# Malformed packets


@pytest.mark.parametrize("case", MALFORMED_CASES_5, ids=lambda case: case.id)
def test_malformed(case: MalformedCase) -> None:
    with pytest.raises(MalformedPacket) as caught:
        Decoder(protocol_level=MQTT_5, mqtt5=True).feed(case.raw)
    assert case.message in str(caught.value)
    assert reason_of(caught.value) == case.reason


@pytest.mark.parametrize("case", MALFORMED_CASES_5, ids=lambda case: case.id)
def test_malformed_after_a_valid_packet_split_anywhere(case: MalformedCase) -> None:
    stream = b"\xe0\x01\x04" + case.raw  # DISCONNECT with will message first
    for cut in range(1, len(stream)):
        decoder = Decoder(protocol_level=MQTT_5, mqtt5=True)
        packets: list[Packet] = []
        with pytest.raises(MalformedPacket) as caught:
            for chunk in (stream[:cut], stream[cut:]):
                packets += decoder.feed(chunk)
        assert case.message in str(caught.value)
        if cut >= 3:
            assert packets == [Disconnect(4)]


# A valid packet of each type that carries reason codes, with the offset of its (first)
# reason code and the packet's name in error messages.
_REASON_CARRIERS: list[tuple[PacketType, bytes, int]] = [
    (PacketType.CONNACK, b"\x20\x03\x00\x00\x00", 3),
    (PacketType.PUBACK, b"\x40\x03\x00\x01\x00", 4),
    (PacketType.PUBREC, b"\x50\x03\x00\x01\x00", 4),
    (PacketType.PUBREL, b"\x62\x03\x00\x01\x00", 4),
    (PacketType.PUBCOMP, b"\x70\x03\x00\x01\x00", 4),
    (PacketType.SUBACK, b"\x90\x04\x00\x01\x00\x00", 5),
    (PacketType.UNSUBACK, b"\xb0\x04\x00\x01\x00\x00", 5),
    (PacketType.DISCONNECT, b"\xe0\x01\x00", 2),
    (PacketType.AUTH, b"\xf0\x02\x00\x00", 2),
]


@pytest.mark.parametrize(
    ("kind", "base", "offset"), _REASON_CARRIERS, ids=[kind.name for kind, _, _ in _REASON_CARRIERS]
)
def test_reason_codes_are_the_specifications(kind: PacketType, base: bytes, offset: int) -> None:
    """Every byte value: decoded if chapter 3 lists it for the packet, malformed otherwise;
    the encoder refuses the same ones."""
    assert VALID_REASON_CODES[kind] == REASON_CODES_5[kind]
    for code in range(256):
        raw = base[:offset] + bytes((code,)) + base[offset + 1 :]
        if code in REASON_CODES_5[kind]:
            packet = decode5(raw)
            assert decode5(encode(packet, MQTT_5)) == packet
        else:
            with pytest.raises(MalformedPacket, match=f"reason code 0x{code:02X} is not valid"):
                decode5(raw)


# ---------------------------------------------------------------------------
# The encoder refuses what the decoder would


@pytest.mark.parametrize(
    ("packet", "message"),
    [
        (PubAck(1, 0x92), "reason code 146 is not valid"),
        (PubRel(1, reason_code=0x10), "reason code 16 is not valid"),
        (ConnAck(1), "reason code 1 is not valid"),
        (SubAck(1, [0, 3]), "reason code 3 is not valid"),
        (UnsubAck(1, [0x10]), "reason code 16 is not valid"),
        (Disconnect(1), "reason code 1 is not valid"),
        (Auth(0x80), "reason code 128 is not valid"),
        (PubRel(1, dup=True), "DUP exists only in MQTT 3.1"),
        (Subscribe(1, [("a", 1)], dup=True), "DUP exists only in MQTT 3.1"),
        (Unsubscribe(1, ["a"], dup=True), "DUP exists only in MQTT 3.1"),
        (Subscribe(1, [("a", 0x40)]), "invalid subscription options 0x40"),
        (Subscribe(1, [("a", 0x03)]), "invalid subscription options 0x03"),
        (Subscribe(1, [("a", 0x30)]), "invalid subscription options 0x30"),
        (Publish(""), "an empty topic name needs a topic alias"),
        (PubAck(1, properties=Properties(topic_alias=1)), "topic alias is not allowed here"),
        (Connect("c", protocol_level=4), "CONNECT of level 4 at level 5"),
    ],
)
def test_encoder_refuses(packet: Packet, message: str) -> None:
    """`encode(packet, 5)` is `encode5` but for CONNECT, written for its own level."""
    with pytest.raises(ValueError, match=message):
        encode5(packet)


def test_auth_cannot_be_encoded_before_level_5() -> None:
    for level in (3, 4):
        with pytest.raises(ValueError, match=r"AUTH exists only in MQTT 5\.0"):
            encode(Auth(), level)


def test_levels_3_and_4_ignore_the_fields_of_5() -> None:
    assert encode(PubAck(1, 0x10, Properties(reason_string="x"))) == b"\x40\x02\x00\x01"
    assert encode(Disconnect(0x8E)) == b"\xe0\x00"
    assert encode(UnsubAck(2, [0x11])) == b"\xb0\x02\x00\x02"


def test_empty_properties_are_written_as_none() -> None:
    assert encode(PubAck(1, 0, Properties()), MQTT_5) == b"\x40\x02\x00\x01"
    assert encode(Disconnect(0, Properties()), MQTT_5) == b"\xe0\x00"
    assert encode(Disconnect(4, Properties()), MQTT_5) == b"\xe0\x01\x04"
    assert encode(Auth(0x18, Properties()), MQTT_5) == b"\xf0\x02\x18\x00"
    assert encode(ConnAck(0, properties=Properties()), MQTT_5) == b"\x20\x03\x00\x00\x00"


# ---------------------------------------------------------------------------
# encode_publish5, the hot-path encoder of 5.0


def test_encode_publish5_takes_an_encoded_property_block() -> None:
    props = Properties(topic_alias=7, user_properties=[("k", "v")])
    block = encode_properties(props, PropertyContext.PUBLISH)
    assert block == b"\x0a\x23\x00\x07\x26\x00\x01k\x00\x01v"
    raw = encode_publish5(b"a/b", b"hi", 1, False, False, 10, block)
    assert raw == b"\x32\x14\x00\x03a/b\x00\x0a" + block + b"hi"  # 5 + 2 + 11 + 2
    assert decode5(raw) == Publish("a/b", b"hi", 1, packet_id=10, properties=props)
    # Without properties: the 3.1.1 bytes and a property length of 0.
    raw = encode_publish5(b"a/b", b"hi", 0, True, False, 0, EMPTY_PROPERTIES_BYTES)
    assert raw == b"\x31\x08\x00\x03a/b\x00hi"


@pytest.mark.parametrize("size", [120, 121, 122, 16380, 16381])
def test_encode_publish5_across_remaining_length_boundaries(size: int) -> None:
    payload = b"\xa5" * size
    raw = encode_publish5(b"t", payload, 0, False, False, 0, EMPTY_PROPERTIES_BYTES)
    length = 3 + 1 + size
    assert raw[: 1 + len(encode_remaining_length(length))] == b"\x30" + encode_remaining_length(
        length
    )
    assert decode5(raw) == Publish("t", payload)
    assert encode(Publish("t", payload), MQTT_5) == raw
    # The 3.1.1 bytes are the same but for the property length.
    plain = encode_publish(b"t", payload, 0, False, False, 0)
    assert plain[-size - 3 :] == raw[-size - 4 : -size - 1] + raw[-size:]


# ---------------------------------------------------------------------------
# Hypothesis


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


ROUND_TRIP_TYPES = sorted(packet_types(MQTT_5))


@pytest.mark.parametrize("kind", ROUND_TRIP_TYPES, ids=[kind.name for kind in ROUND_TRIP_TYPES])
@fuzz(40)
@given(data=st.data())
def test_round_trip(kind: PacketType, data: st.DataObject) -> None:
    packet = data.draw(packet_strategies(MQTT_5)[kind])
    assert packet.packet_type is kind
    raw = encode(packet, MQTT_5)
    assert decode5(raw) == packet
    if isinstance(packet, Publish):  # the hot-path encoder writes the same bytes
        assert raw == encode_publish5(
            packet.topic.encode(),
            packet.payload,
            packet.qos,
            packet.retain,
            packet.dup,
            packet.packet_id,
            encode_properties(packet.properties or Properties(), PropertyContext.PUBLISH),
        )


@fuzz(100)
@given(data=st.data())
def test_random_splits_decode_the_same_packets(data: st.DataObject) -> None:
    sent = data.draw(st.lists(packets(MQTT_5), max_size=8))
    stream = b"".join(encode(packet, MQTT_5) for packet in sent)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=12))
    decoder = Decoder(protocol_level=MQTT_5, mqtt5=True)
    assert feed_all(decoder, split(stream, cuts)) == sent
    assert decoder.buffered == 0


@fuzz(30)
@given(data=st.data())
def test_byte_by_byte_decodes_the_same_packets(data: st.DataObject) -> None:
    sent = data.draw(st.lists(packets(MQTT_5), min_size=1, max_size=4))
    stream = b"".join(encode(packet, MQTT_5) for packet in sent)
    decoder = Decoder(protocol_level=MQTT_5, mqtt5=True)
    assert feed_all(decoder, [stream[index : index + 1] for index in range(len(stream))]) == sent


def _decodes_or_malformed(data: bytes, cuts: list[int]) -> None:
    """Anything decodes, or raises MalformedPacket; what decodes encodes and decodes again."""
    decoder = Decoder(max_packet_size=4096, protocol_level=MQTT_5, mqtt5=True)
    try:
        decoded = feed_all(decoder, split(data, cuts))
    except MalformedPacket as error:
        assert str(error)
        assert reason_of(error) in (0x81, 0x82, 0x94, 0x95)
        return
    for packet in decoded:
        if isinstance(packet, Connect) and (
            packet.protocol_level != MQTT_5 or packet.protocol_name != "MQTT"
        ):
            break  # a 3.x CONNECT (what follows is read at its level) or another's stub
        assert decode5(encode(packet, MQTT_5)) == packet


@fuzz(500)
@given(data=st.binary(max_size=120), cuts=st.lists(st.integers(min_value=0), max_size=2))
def test_fuzz_arbitrary_bytes(data: bytes, cuts: list[int]) -> None:
    _decodes_or_malformed(data, cuts)


_SEEDS = [case.raw for case in CASES_5] + [case.raw for case in MALFORMED_CASES_5]


@st.composite
def mutated_packets(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(_SEEDS)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        index = draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))
        operation = draw(st.sampled_from(["flip", "set", "insert", "delete"]))
        if operation == "insert" or not data:
            data.insert(index, draw(st.integers(min_value=0, max_value=255)))
        elif operation == "flip":
            data[index] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif operation == "set":
            data[index] = draw(st.integers(min_value=0, max_value=255))
        else:
            del data[index]
    return bytes(data)


@fuzz(700)
@given(mutated=mutated_packets(), cuts=st.lists(st.integers(min_value=0), max_size=2))
def test_fuzz_mutated_golden_packets(mutated: bytes, cuts: list[int]) -> None:
    _decodes_or_malformed(mutated, cuts)
