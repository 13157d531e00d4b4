"""Hypothesis properties of the codec: round trips, arbitrary stream splits, and fuzzing
(arbitrary bytes and mutated golden packets either decode or raise MalformedPacket)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packet_cases import CASES, LEVELS, MALFORMED_CASES, packet_types
from packet_strategies import packet_strategies, packets

from telemq.protocol import (
    Connect,
    Connection,
    ConnectionClosed,
    Decoder,
    MalformedPacket,
    Packet,
    PacketType,
    Publish,
    decode_packet,
    encode,
    encode_publish,
    encode_remaining_length,
)


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


def feed_all(decoder: Decoder, chunks: list[bytes]) -> list[Packet]:
    """Feed every chunk; return the packets, or raise MalformedPacket (and nothing else)."""
    packets_out: list[Packet] = []
    for chunk in chunks:
        packets_out += decoder.feed(chunk)
    return packets_out


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cut % (len(data) + 1) for cut in cuts), len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


# ---------------------------------------------------------------------------
# Round trips

ROUND_TRIP_TYPES = [(level, kind) for level in LEVELS for kind in sorted(packet_types(level))]


@pytest.mark.parametrize(
    ("level", "kind"),
    ROUND_TRIP_TYPES,
    ids=[f"{'3.1' if level == 3 else '3.1.1'}-{kind.name}" for level, kind in ROUND_TRIP_TYPES],
)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_round_trip(level: int, kind: PacketType, data: st.DataObject) -> None:
    packet = data.draw(packet_strategies(level)[kind])
    assert packet.packet_type is kind
    assert decode_packet(encode(packet), level) == packet


@settings(max_examples=100, deadline=None)
@given(data=st.data(), level=st.sampled_from(LEVELS))
def test_publish_hot_path_encoder_matches_encode(data: st.DataObject, level: int) -> None:
    publish = data.draw(packet_strategies(level)[PacketType.PUBLISH])
    assert isinstance(publish, Publish)
    raw = encode_publish(
        publish.topic.encode("utf-8"),
        publish.payload,
        publish.qos,
        publish.retain,
        publish.dup,
        publish.packet_id,
    )
    assert raw == encode(publish)
    assert decode_packet(raw, level) == publish


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=268_435_455))
def test_remaining_length_round_trip(length: int) -> None:
    encoded = encode_remaining_length(length)
    assert 1 <= len(encoded) <= 4
    assert all(byte & 0x80 for byte in encoded[:-1])
    assert not encoded[-1] & 0x80
    assert sum((byte & 0x7F) << (7 * index) for index, byte in enumerate(encoded)) == length
    if not length:
        return
    # The decoder reads the same length from a header alone (it waits for the body).
    decoder = Decoder()
    header = b"\x30" + encoded
    assert decoder.feed(header) == []
    assert decoder.buffered == len(header)


# ---------------------------------------------------------------------------
# Any split of a stream gives the same packets


@settings(max_examples=150, deadline=None)
@given(level=st.sampled_from(LEVELS), data=st.data())
def test_random_splits_decode_the_same_packets(level: int, data: st.DataObject) -> None:
    sent = data.draw(st.lists(packets(level), max_size=8))
    # A CONNECT of the stream's own level keeps the decoder at that level.
    stream = b"".join(encode(packet) for packet in sent)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=12))
    decoder = Decoder(protocol_level=level)
    assert feed_all(decoder, split(stream, cuts)) == sent
    assert decoder.buffered == 0


@settings(max_examples=60, deadline=None)
@given(level=st.sampled_from(LEVELS), data=st.data())
def test_byte_by_byte_decodes_the_same_packets(level: int, data: st.DataObject) -> None:
    sent = data.draw(st.lists(packets(level), min_size=1, max_size=4))
    stream = b"".join(encode(packet) for packet in sent)
    decoder = Decoder(protocol_level=level)
    assert feed_all(decoder, [stream[index : index + 1] for index in range(len(stream))]) == sent


# ---------------------------------------------------------------------------
# Fuzzing: decode or MalformedPacket, never anything else


def assert_decodes_or_malformed(data: bytes, level: int, cuts: list[int] | None = None) -> None:
    decoder = Decoder(max_packet_size=4096, protocol_level=level)
    try:
        decoded = feed_all(decoder, split(data, cuts or []))
    except MalformedPacket as error:
        assert str(error)  # names the problem
        return
    for packet in decoded:
        # What decodes encodes again without error (CONNECT of an unknown level aside).
        if not (isinstance(packet, Connect) and packet.protocol_level not in LEVELS):
            encode(packet)


@fuzz(1500)
@given(data=st.binary(max_size=200), level=st.sampled_from(LEVELS))
def test_fuzz_arbitrary_bytes(data: bytes, level: int) -> None:
    assert_decodes_or_malformed(data, level)


@st.composite
def framed_packets(draw: st.DrawFn) -> bytes:
    """A plausible fixed header (any type and flags, a correct length) and random body."""
    first = draw(st.integers(min_value=0, max_value=255))
    body = draw(st.binary(max_size=60))
    return bytes([first]) + encode_remaining_length(len(body)) + body


@fuzz(700)
@given(
    frames=st.lists(framed_packets(), min_size=1, max_size=4),
    level=st.sampled_from(LEVELS),
    cuts=st.lists(st.integers(min_value=0), max_size=3),
)
def test_fuzz_framed_random_bodies(frames: list[bytes], level: int, cuts: list[int]) -> None:
    assert_decodes_or_malformed(b"".join(frames), level, cuts)


_SEEDS = [case.raw for case in CASES] + [case.raw for case in MALFORMED_CASES]


@st.composite
def mutated_packets(draw: st.DrawFn) -> bytes:
    """A golden (or malformed) packet with a few bytes flipped, inserted or deleted."""
    data = bytearray(draw(st.sampled_from(_SEEDS)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        operation = draw(st.sampled_from(["flip", "set", "insert", "delete"]))
        index = draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))
        if operation == "insert" or not data:
            data.insert(index, draw(st.integers(min_value=0, max_value=255)))
        elif operation == "flip":
            data[index] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif operation == "set":
            data[index] = draw(st.integers(min_value=0, max_value=255))
        else:
            del data[index]
    return bytes(data)


@fuzz(1000)
@given(
    mutated=mutated_packets(),
    level=st.sampled_from(LEVELS),
    cuts=st.lists(st.integers(min_value=0), max_size=2),
)
def test_fuzz_mutated_golden_packets(mutated: bytes, level: int, cuts: list[int]) -> None:
    assert_decodes_or_malformed(mutated, level, cuts)


@fuzz(300)
@given(
    level=st.sampled_from(LEVELS),
    tail=st.one_of(mutated_packets(), st.binary(max_size=80)),
)
def test_fuzz_connection_never_raises(level: int, tail: bytes) -> None:
    """A connection turns any input into events; a protocol error is ConnectionClosed."""
    connect = next(
        case.raw
        for case in CASES
        if case.level == level and isinstance(case.packet, Connect) and not case.decode_only
    )
    connection = Connection(now=0.0, max_packet_size=4096)
    events = connection.receive_data(connect + tail, 0.0)
    closed = [index for index, event in enumerate(events) if isinstance(event, ConnectionClosed)]
    assert closed in ([], [len(events) - 1])
    if closed:
        assert connection.closed
        assert connection.receive_data(b"\xc0\x00", 1.0) == []
        assert connection.next_timer() is None
