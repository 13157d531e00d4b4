"""Fuzzing the decoder and the connection: mutated packet streams from valid ones.

Complements test_codec_properties.py (arbitrary bytes, mutated golden packets) with
whole-stream mutations: bit flips, truncation, splicing of two streams, corrupted
remaining-length fields and splits at every boundary, checked against `Decoder` and
`Connection.receive_data`. The oracle for each input:

* the only exception is `MalformedPacket`, with a message (`Connection` never raises: it
  reports `ConnectionClosed`);
* the result does not depend on how the stream is split: the same packets before the error,
  and the same error;
* nothing is buffered beyond `max_packet_size`: a packet declaring a larger remaining length
  is refused from its fixed header alone, before its body arrives;
* the connection stays consistent: at most one `ConnectionClosed`, as the last event; after it
  no event and no timer; everything it writes is well formed.

A deterministic mutation fuzzer (seeded corpus of valid sessions, a bounded number of
mutations per seed) runs the same oracle; fuzz/fuzz_broker.py shares its mutations and runs
them against a live broker.
"""

from __future__ import annotations

import itertools
import random

import pytest
from connection_helpers import connect_packet, decode_sent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packet_cases import LEVELS
from packet_strategies import client_packets, packet_strategies

from fuzz_loader import load_fuzz_module
from telemq.protocol import (
    MAX_REMAINING_LENGTH,
    Connection,
    ConnectionClosed,
    ConnectionState,
    ConnectRequested,
    Decoder,
    Event,
    Flows,
    MalformedPacket,
    MessageReceived,
    Packet,
    PacketType,
    encode,
    encode_remaining_length,
)

MAX_PACKET_SIZE = 512


fuzz_broker = load_fuzz_module()


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


# ---------------------------------------------------------------------------
# The oracle


def decode_in_chunks(
    chunks: list[bytes], level: int, max_packet_size: int = MAX_PACKET_SIZE
) -> tuple[list[Packet], str | None]:
    """Feed the chunks in order; the packets before the first error, and that error.

    Asserts after every chunk that the decoder holds no more than one packet's worth."""
    decoder = Decoder(max_packet_size=max_packet_size, protocol_level=level)
    packets: list[Packet] = []
    for chunk in chunks:
        decoded, error = decoder.feed_partial(chunk)
        packets += decoded
        if error is not None:
            assert isinstance(error, MalformedPacket)
            assert str(error), "a MalformedPacket names the problem"
            return packets, str(error)
        assert decoder.buffered <= max_packet_size, (
            f"{decoder.buffered} bytes buffered with a limit of {max_packet_size}"
        )
    return packets, None


def check_decoder(data: bytes, level: int, splits: list[list[bytes]]) -> None:
    """Every split gives the result of feeding the stream at once."""
    expected = decode_in_chunks([data], level)
    for chunks in splits:
        assert b"".join(chunks) == data
        assert decode_in_chunks(chunks, level) == expected, f"split {[len(c) for c in chunks]}"


def check_connection(chunks: list[bytes]) -> list[Event]:
    """Drive a server-side connection as the broker does (accepting any CONNECT)."""
    connection = Connection(now=0.0, max_packet_size=MAX_PACKET_SIZE)
    events: list[Event] = []
    accepted = False
    for now, chunk in enumerate(chunks, start=1):
        new = connection.receive_data(chunk, float(now))
        if any(isinstance(event, ConnectRequested) for event in new):
            assert connection.state is ConnectionState.CONNECTING
            connection.accept(False, Flows(), float(now))
            accepted = True
            new += connection.receive_data(b"", float(now))
        events += new
        if connection.closed:
            break
    closed = [index for index, event in enumerate(events) if isinstance(event, ConnectionClosed)]
    assert closed in ([], [len(events) - 1]), events
    if not accepted:
        assert not any(isinstance(event, MessageReceived) for event in events)
    # What the server wrote is always well formed (CONNACK, PINGRESP, PUBREL, ...).
    decode_sent(connection.data_to_send(), connection.protocol_level)
    if connection.closed:
        assert closed, "closed without reporting it"
        assert connection.closed_reason
        assert connection.receive_data(b"\xc0\x00", 99.0) == []
        assert connection.next_timer() is None
        assert connection.handle_timer(1e9) == []
    else:
        assert connection.state in (
            ConnectionState.AWAIT_CONNECT,
            ConnectionState.CONNECTING,
            ConnectionState.CONNECTED,
        )
        assert connection.next_timer() is not None or connection.keepalive == 0
    return events


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cut % (len(data) + 1) for cut in cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


# ---------------------------------------------------------------------------
# Hypothesis: mutated streams of valid packets


@st.composite
def valid_streams(draw: st.DrawFn, level: int, max_packets: int = 4) -> list[bytes]:
    """CONNECT and what a connected client sends, one encoded frame per packet."""
    connect = draw(packet_strategies(level)[PacketType.CONNECT])
    rest = draw(st.lists(client_packets(level), max_size=max_packets))
    return [encode(connect), *(encode(packet) for packet in rest)]


@st.composite
def length_fields(draw: st.DrawFn, body_length: int) -> bytes:
    """A wrong remaining-length field: off by a little, huge, 5 bytes long or never ending."""
    kind = draw(st.sampled_from(["near", "any", "max", "five", "non-minimal", "unfinished"]))
    if kind == "near":
        delta = draw(st.integers(min_value=-3, max_value=3))
        return encode_remaining_length(max(0, body_length + delta))
    if kind == "any":
        return encode_remaining_length(draw(st.integers(0, MAX_REMAINING_LENGTH)))
    if kind == "max":
        return encode_remaining_length(MAX_REMAINING_LENGTH)
    if kind == "five":
        return b"\xff\xff\xff\xff" + bytes([draw(st.integers(0, 255))])
    if kind == "non-minimal":
        return b"\x80" * draw(st.integers(1, 3)) + b"\x00"
    return encode_remaining_length(body_length)[:-1] + b"\x80"


@st.composite
def mutated_streams(draw: st.DrawFn, level: int) -> bytes:
    """A valid stream after 1 to 4 mutations (flips, truncation, splicing, lengths, ...)."""
    frames = draw(valid_streams(level))
    if draw(st.booleans()):
        index = draw(st.integers(0, len(frames) - 1))
        frame = frames[index]
        header = 1
        while header < 4 and frame[header] & 0x80:
            header += 1
        body = frame[1 + header :]
        frames[index] = frame[:1] + draw(length_fields(len(body))) + body
    data = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(1, 4))):
        operation = draw(st.sampled_from(["flip", "truncate", "splice", "insert", "delete"]))
        position = draw(st.integers(0, len(data)))
        if operation == "flip" and data:
            data[min(position, len(data) - 1)] ^= 1 << draw(st.integers(0, 7))
        elif operation == "truncate":
            del data[position:]
        elif operation == "splice":
            other = b"".join(draw(valid_streams(draw(st.sampled_from(LEVELS)), 2)))
            data = data[:position] + other[draw(st.integers(0, len(other))) :]
        elif operation == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif operation == "delete":
            del data[position : position + draw(st.integers(1, 4))]
    return bytes(data)


@fuzz(300)
@given(data=st.data(), level=st.sampled_from(LEVELS))
def test_mutated_streams_decode_the_same_in_any_split(data: st.DataObject, level: int) -> None:
    stream = data.draw(mutated_streams(level))
    cuts = data.draw(st.lists(st.lists(st.integers(min_value=0), max_size=6), max_size=3))
    check_decoder(stream, level, [split_at(stream, c) for c in cuts])


@fuzz(60)
@given(data=st.data(), level=st.sampled_from(LEVELS))
def test_split_at_every_boundary(data: st.DataObject, level: int) -> None:
    """Every two-chunk split of a (mutated or intact) stream, and byte by byte."""
    if data.draw(st.booleans()):
        stream = data.draw(mutated_streams(level))
    else:
        stream = b"".join(data.draw(valid_streams(level, 3)))
    splits = [[stream[:cut], stream[cut:]] for cut in range(len(stream) + 1)]
    splits.append([stream[i : i + 1] for i in range(len(stream))])
    check_decoder(stream, level, splits)


@fuzz(300)
@given(data=st.data(), level=st.sampled_from(LEVELS))
def test_connection_survives_mutated_streams(data: st.DataObject, level: int) -> None:
    stream = data.draw(mutated_streams(level))
    cuts = data.draw(st.lists(st.integers(min_value=0), max_size=4))
    check_connection(split_at(stream, cuts))


@fuzz(300)
@given(stream=st.binary(max_size=300), cuts=st.lists(st.integers(min_value=0), max_size=4))
def test_connection_survives_random_bytes(stream: bytes, cuts: list[int]) -> None:
    check_connection(split_at(stream, cuts))


@fuzz(100)
@given(level=st.sampled_from(LEVELS), data=st.data())
def test_intact_streams_are_accepted_whole(level: int, data: st.DataObject) -> None:
    """The corpus itself is valid: without mutation every packet decodes, nothing remains."""
    frames = data.draw(valid_streams(level))
    packets, error = decode_in_chunks([b"".join(frames)], level, max_packet_size=1 << 20)
    assert error is None
    assert len(packets) == len(frames)


# ---------------------------------------------------------------------------
# No unbounded buffering


@pytest.mark.parametrize(
    "header",
    [
        b"\x30\xff\xff\xff\x7f",  # PUBLISH of 268,435,455 bytes
        b"\x10\x80\x80\x80\x01",  # CONNECT of 2 MiB
        b"\x82" + encode_remaining_length(MAX_PACKET_SIZE),  # one byte over with the header
    ],
)
def test_a_huge_declared_length_is_refused_from_the_header(header: bytes) -> None:
    decoder = Decoder(max_packet_size=MAX_PACKET_SIZE)
    with pytest.raises(MalformedPacket, match="exceeds the maximum packet size"):
        decoder.feed(header)


@fuzz(200)
@given(
    length=st.integers(min_value=0, max_value=MAX_REMAINING_LENGTH),
    limit=st.integers(min_value=16, max_value=1 << 20),
    chunk=st.integers(min_value=1, max_value=4096),
)
def test_buffering_never_exceeds_the_limit(length: int, limit: int, chunk: int) -> None:
    """A PUBLISH declaring `length` bytes: refused at once if too large, else buffered
    only up to its own size while its body trickles in."""
    header = b"\x30" + encode_remaining_length(length)
    decoder = Decoder(max_packet_size=limit)
    if len(header) + length > limit:
        with pytest.raises(MalformedPacket, match="maximum packet size"):
            decoder.feed(header)
        return
    # Topic "a" and a payload; bodies under 3 bytes cannot hold a topic.
    body = b"\x00\x01a" + b"x" * (length - 3) if length >= 3 else b"\x00" * length
    packets: list[Packet] = []
    try:
        packets += decoder.feed(header)
        for start in range(0, len(body), chunk):
            assert decoder.buffered <= limit
            packets += decoder.feed(body[start : start + chunk])
    except MalformedPacket:
        assert length < 3
        return
    assert decoder.buffered == 0
    assert len(packets) == 1


def test_connection_refuses_a_huge_packet_before_its_body() -> None:
    connection = Connection(now=0.0, max_packet_size=1024)
    connect = encode(connect_packet(4))
    events = connection.receive_data(connect, 0.0)
    assert [type(event) for event in events] == [ConnectRequested]
    connection.accept(False, Flows(), 0.0)
    events = connection.receive_data(b"\x30\xff\xff\xff\x7f", 1.0)
    assert len(events) == 1 and isinstance(events[0], ConnectionClosed)
    assert "maximum packet size of 1024" in events[0].reason
    assert connection.closed


def test_connection_buffers_nothing_after_it_is_closed() -> None:
    connection = Connection(now=0.0, max_packet_size=1024)
    events = connection.receive_data(b"\x20\x02\x00\x00", 0.0)  # CONNACK from a client
    assert isinstance(events[-1], ConnectionClosed)
    for _ in range(100):
        assert connection.receive_data(b"\x00" * 4096, 1.0) == []
    assert not connection.has_buffered_input


# ---------------------------------------------------------------------------
# Deterministic mutation fuzzer (bounded here; fuzz/fuzz_broker.py runs it for longer)

SEEDS = (0, 1, 2, 3)
MUTATIONS_PER_STREAM = 12


@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_mutation_fuzzer(seed: int) -> None:
    corpus = fuzz_broker.make_corpus(seed, size=32)
    rng = random.Random(f"decoder:{seed}")
    outcomes = {"clean": 0, "malformed": 0, "closed": 0}
    for stream in corpus:
        whole = b"".join(stream)
        level = 3 if b"MQIsdp" in stream[0] else 4
        # The corpus is valid: it decodes completely.
        packets, error = decode_in_chunks([whole], level, max_packet_size=1 << 20)
        assert error is None and len(packets) == len(stream)
        for _ in range(MUTATIONS_PER_STREAM):
            data = fuzz_broker.mutate(stream, rng, corpus)
            splits = [fuzz_broker.split_points(data, rng) for _ in range(2)]
            check_decoder(data, level, splits)
            _, problem = decode_in_chunks([data], level)
            outcomes["malformed" if problem else "clean"] += 1
            events = check_connection(splits[0])
            if events and isinstance(events[-1], ConnectionClosed):
                outcomes["closed"] += 1
    total = len(corpus) * MUTATIONS_PER_STREAM
    assert sum(outcomes[k] for k in ("clean", "malformed")) == total
    # The mutations are neither all harmless nor all fatal: both paths were exercised.
    assert outcomes["malformed"] > total // 10, outcomes
    assert outcomes["clean"] > 0, outcomes


def test_mutations_are_reproducible() -> None:
    corpus = fuzz_broker.make_corpus(7, size=8)
    assert corpus == fuzz_broker.make_corpus(7, size=8)
    first = [fuzz_broker.mutate(s, random.Random(1), corpus) for s in corpus]
    second = [fuzz_broker.mutate(s, random.Random(1), corpus) for s in corpus]
    assert first == second
