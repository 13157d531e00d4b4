"""Control messages on `$link/control` (docs/network.md §5): the JSON codec, its errors, and
the splitting of a proxy set into `sync` parts."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from telemq.network.control import (
    CONTROL_TOPIC,
    SYNC_PART_BYTES,
    ControlError,
    ControlMessage,
    DeleteRetained,
    ProxyChange,
    Reach,
    RetainedDone,
    Sync,
    decode,
    encode,
    sync_parts,
)

EXAMPLES: dict[str, tuple[ControlMessage, bytes]] = {
    "sync": (
        Sync(3, 0, True, (("", "a/#"), ("scores", "b/+"))),
        b'{"epoch":3,"last":true,"op":"sync","part":0,"subs":[["","a/#"],["scores","b/+"]]}',
    ),
    "sync, empty": (
        Sync(0, 2, False, ()),
        b'{"epoch":0,"last":false,"op":"sync","part":2,"subs":[]}',
    ),
    "add": (
        ProxyChange("add", 7, "", "a/b"),
        b'{"epoch":7,"filter":"a/b","op":"add","sp":""}',
    ),
    "remove": (
        ProxyChange("remove", 7, "scores", "x/#"),
        b'{"epoch":7,"filter":"x/#","op":"remove","sp":"scores"}',
    ),
    "retained-done": (
        RetainedDone(1, "", "#"),
        b'{"epoch":1,"filter":"#","op":"retained-done","sp":""}',
    ),
    "reach": (
        Reach([["hub"], ["hub", "edge-2"]]),
        b'{"op":"reach","paths":[["hub"],["hub","edge-2"]]}',
    ),
    "delete-retained": (
        DeleteRetained("", "a/b", "edge-1"),
        b'{"op":"delete-retained","origin":"edge-1","sp":"","topic":"a/b"}',
    ),
    "non-ASCII": (
        ProxyChange("add", 1, "spé", 'quote"back\\slash/€/😀'),
        '{"epoch":1,"filter":"quote\\"back\\\\slash/€/😀","op":"add","sp":"spé"}'.encode(),
    ),
}


def test_topic() -> None:
    assert CONTROL_TOPIC == "$link/control"


@pytest.mark.parametrize(("message", "payload"), EXAMPLES.values(), ids=EXAMPLES.keys())
def test_encode_is_compact_sorted_utf8(message: ControlMessage, payload: bytes) -> None:
    assert encode(message) == payload


@pytest.mark.parametrize(("message", "payload"), EXAMPLES.values(), ids=EXAMPLES.keys())
def test_round_trip(message: ControlMessage, payload: bytes) -> None:
    assert decode(payload) == message
    assert decode(encode(message)) == message


def test_decode_takes_any_key_order_and_spacing_and_ignores_unknown_fields() -> None:
    payload = b'{ "sp" : "s", "future": [1, 2], "filter": "f", "epoch": 2, "op": "remove" }'
    assert decode(payload) == ProxyChange("remove", 2, "s", "f")


def test_reach_with_no_paths() -> None:
    assert decode(encode(Reach([]))) == Reach([])


# ---------------------------------------------------------------------------
# Errors


def payload(**fields: object) -> bytes:
    return json.dumps(fields).encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # Not a message at all.
        (b"\xff{}", "control message is not UTF-8"),
        (b"", "control message is not JSON"),
        (b"{op: add}", "control message is not JSON"),
        (b'{"op": "add"', "control message is not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "control message is not JSON"),
        (b"1" * 5000, "control message is not JSON"),  # too many digits for an int
        (b'["sync"]', "control message is not a JSON object: list"),
        (b'"sync"', "control message is not a JSON object: str"),
        (b"null", "control message is not a JSON object: NoneType"),
        # The op.
        (b"{}", "control message has no 'op'"),
        (payload(op=1), "control message: field 'op' must be a string"),
        (payload(op="frobnicate"), "control message: unknown op 'frobnicate'"),
        (payload(op="ADD"), "unknown op 'ADD'"),
        # Missing fields.
        (payload(op="add", epoch=1, sp=""), "control message 'add': field 'filter' is missing"),
        (payload(op="remove", sp="", filter="f"), "'remove': field 'epoch' is missing"),
        (payload(op="sync", epoch=1, part=0, last=True), "'sync': field 'subs' is missing"),
        (payload(op="sync", epoch=1, part=0, subs=[]), "'sync': field 'last' is missing"),
        (payload(op="retained-done", epoch=1, filter="f"), "field 'sp' is missing"),
        (payload(op="reach"), "control message 'reach': field 'paths' is missing"),
        (payload(op="delete-retained", sp="", topic="t"), "field 'origin' is missing"),
        # Mistyped fields.
        (
            payload(op="add", epoch=1, sp="", filter=5),
            "control message 'add': field 'filter' must be a string",
        ),
        (payload(op="add", epoch=1, sp=None, filter="f"), "field 'sp' must be a string"),
        (payload(op="add", epoch=1, sp="", filter=""), "field 'filter' must not be empty"),
        (payload(op="add", epoch="1", sp="", filter="f"), "field 'epoch' must be a non-negative"),
        (payload(op="add", epoch=1.0, sp="", filter="f"), "field 'epoch' must be a non-negative"),
        (payload(op="add", epoch=True, sp="", filter="f"), "field 'epoch' must be a non-negative"),
        (payload(op="add", epoch=-1, sp="", filter="f"), "field 'epoch' must be a non-negative"),
        (b'{"op":"add","epoch":NaN,"sp":"","filter":"f"}', "field 'epoch' must be a non-negat"),
        (payload(op="add", epoch=1, sp="", filter="a\x00b"), "field 'filter' contains U\\+0000"),
        (payload(op="add", epoch=1, sp="\x07", filter="f"), "field 'sp' contains U\\+0007"),
        (payload(op="add", epoch=1, sp="\udc80", filter="f"), "field 'sp' is not valid Unicode"),
        (
            payload(op="sync", epoch=1, part="0", last=True, subs=[]),
            "'sync': field 'part' must be a non-negative integer",
        ),
        (
            payload(op="sync", epoch=1, part=0, last=1, subs=[]),
            "'sync': field 'last' must be true or false",
        ),
        (payload(op="sync", epoch=1, part=0, last=True, subs={}), "field 'subs' must be a list"),
        (
            payload(op="sync", epoch=1, part=0, last=True, subs=[["", "a"], "b"]),
            "field 'subs' item 1 must be a pair \\[sub point, filter\\] of strings",
        ),
        (payload(op="sync", epoch=1, part=0, last=True, subs=[[""]]), "item 0 must be a pair"),
        (payload(op="sync", epoch=1, part=0, last=True, subs=[["", 1]]), "item 0 must be a pair"),
        (payload(op="sync", epoch=1, part=0, last=True, subs=[["", ""]]), "the filter not empty"),
        (
            payload(op="sync", epoch=1, part=0, last=True, subs=[["", "a", "b"]]),
            "item 0 must be a pair",
        ),
        (
            payload(op="sync", epoch=1, part=0, last=True, subs=[["\x01", "a"]]),
            "field 'subs' item 0 contains U\\+0001",
        ),
        (payload(op="retained-done", epoch=1, sp="", filter=[]), "field 'filter' must be a str"),
        (payload(op="reach", paths="hub"), "'reach': field 'paths' must be a list"),
        (payload(op="reach", paths=[[]]), "field 'paths' item 0 must be a non-empty list"),
        (payload(op="reach", paths=["hub"]), "field 'paths' item 0 must be a non-empty list"),
        (payload(op="reach", paths=[["hub"], ["hub", 3]]), "'paths' item 1: not a string"),
        (payload(op="reach", paths=[["hub", ""]]), "'paths' item 0: empty broker name"),
        (payload(op="reach", paths=[["a b"]]), "'paths' item 0: 'a b' is not a broker name"),
        (
            payload(op="delete-retained", sp="", topic="", origin="A"),
            "'delete-retained': field 'topic' must not be empty",
        ),
        (
            payload(op="delete-retained", sp="", topic="t", origin="A/B"),
            "field 'origin': 'A/B' is not a broker name",
        ),
        (payload(op="delete-retained", sp="", topic="t", origin=""), "field 'origin': empty"),
    ],
)
def test_decode_errors(data: bytes, message: str) -> None:
    with pytest.raises(ControlError, match=message) as caught:
        decode(data)
    assert str(caught.value).startswith("control message")
    assert isinstance(caught.value, ValueError)


# ---------------------------------------------------------------------------
# sync parts


def pairs(count: int, rng: random.Random | None = None) -> list[tuple[str, str]]:
    rng = rng or random.Random(7)
    return [
        (rng.choice(["", "scores", "spé"]), f"site/{index}/" + "x" * rng.randint(0, 40))
        for index in range(count)
    ]


def check_parts(parts: list[Sync], epoch: int, subs: list[tuple[str, str]], limit: int) -> None:
    assert parts, "at least one part"
    assert [p.part for p in parts] == list(range(len(parts)))
    assert [p.last for p in parts] == [False] * (len(parts) - 1) + [True]
    assert all(p.epoch == epoch for p in parts)
    assert all(len(encode(p)) <= limit for p in parts)
    assert [pair for p in parts for pair in p.subs] == subs
    assert all(decode(encode(p)) == p for p in parts)


def test_empty_set_is_one_last_part() -> None:
    assert sync_parts(5, []) == [Sync(5, 0, True, ())]


def test_small_set_is_one_part() -> None:
    subs = pairs(10)
    assert sync_parts(1, subs) == [Sync(1, 0, True, tuple(subs))]


def test_default_limit_is_256_kib() -> None:
    assert SYNC_PART_BYTES == 256 * 1024
    subs = pairs(20_000)
    parts = sync_parts(9, subs)
    assert len(parts) > 1
    check_parts(parts, 9, subs, SYNC_PART_BYTES)
    # Parts are filled: each but the last would overflow with the next pair.
    for part, following in itertools.pairwise(parts):
        grown = Sync(part.epoch, part.part, part.last, (*part.subs, following.subs[0]))
        assert len(encode(grown)) > SYNC_PART_BYTES


@pytest.mark.parametrize("limit", [120, 200, 1000, 4096])
def test_small_limits(limit: int) -> None:
    subs = pairs(300)
    subs = [(sp, f[:40]) for sp, f in subs]  # every pair fits a 120-byte part alone
    parts = sync_parts(123456, subs, max_bytes=limit)
    check_parts(parts, 123456, subs, limit)


def test_exact_fit() -> None:
    """A part exactly at the limit is kept; one byte less and the pair moves on."""
    subs = [("", "a"), ("", "b")]
    whole = len(encode(Sync(0, 0, False, tuple(subs))))
    assert len(sync_parts(0, subs, max_bytes=whole)) == 1
    assert len(sync_parts(0, subs, max_bytes=whole - 1)) == 2


def test_pair_too_large_for_a_part() -> None:
    with pytest.raises(ValueError, match="does not fit a part of 100 bytes"):
        sync_parts(0, [("", "a"), ("", "x" * 100)], max_bytes=100)
    with pytest.raises(ValueError, match="cannot hold even an empty part"):
        sync_parts(0, [], max_bytes=10)


def test_takes_any_iterable() -> None:
    subs = pairs(50)
    assert sync_parts(2, iter(subs), max_bytes=500) == sync_parts(2, subs, max_bytes=500)


# ---------------------------------------------------------------------------
# Randomised


def random_text(rng: random.Random, low: int = 0) -> str:
    alphabet = "ab/+#$ é€😀\"\\'{}[],:-_."
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, 16)))


def random_name(rng: random.Random) -> str:
    return "".join(rng.choice("ABCxyz019._-") for _ in range(rng.randint(1, 48)))


def random_message(rng: random.Random) -> ControlMessage:
    epoch = rng.choice([0, 1, rng.randint(0, 2**40)])
    kind = rng.randrange(5)
    if kind == 0:
        subs = tuple((random_text(rng), random_text(rng, 1)) for _ in range(rng.randint(0, 8)))
        return Sync(epoch, rng.randint(0, 1000), rng.random() < 0.5, subs)
    if kind == 1:
        return ProxyChange(
            rng.choice(["add", "remove"]), epoch, random_text(rng), random_text(rng, 1)
        )
    if kind == 2:
        return RetainedDone(epoch, random_text(rng), random_text(rng, 1))
    if kind == 3:
        return Reach(
            [[random_name(rng) for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(0, 5))]
        )
    return DeleteRetained(random_text(rng), random_text(rng, 1), random_name(rng))


def test_randomised_round_trip() -> None:
    rng = random.Random(0x7E1E)
    for _ in range(2000):
        message = random_message(rng)
        data = encode(message)
        assert decode(data) == message
        assert encode(decode(data)) == data  # stable bytes
        json.loads(data.decode("utf-8"))  # plain JSON, UTF-8


def test_randomised_sync_parts() -> None:
    rng = random.Random(20240603)
    for _ in range(200):
        subs = [(random_text(rng), random_text(rng, 1)) for _ in range(rng.randint(0, 60))]
        limit = rng.randint(300, 2000)
        epoch = rng.randint(0, 2**31)
        check_parts(sync_parts(epoch, subs, max_bytes=limit), epoch, subs, limit)
