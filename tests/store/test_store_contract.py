"""The store contract (telemq.store.base), run against every store implementation."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import pytest
from store_harness import Harness

from telemq.store import (
    ConsumerOffset,
    DeliveryRecord,
    DeliveryState,
    IncomingRecord,
    IncomingRow,
    JournalRecord,
    MemoryStore,
    RetainedRecord,
    RetainedRow,
    SessionRecord,
    SqliteStore,
    Store,
    StoredMessage,
    StoreError,
    StoreState,
    SubscriptionRecord,
    SyncMode,
    WriteBatch,
    _codec,
    open_store,
)
from telemq.store.base import JOURNAL_CHUNK_ROWS
from telemq.store.sqlite_writes import BOUND_FAST

Step = tuple[Any, ...]  # (WriteBatch method name, *arguments)


def commit(store: Store, *steps: Step) -> None:
    batch = WriteBatch()
    for name, *args in steps:
        getattr(batch, name)(*args)
    store.commit(batch)


def message(mid: int, topic: str = "t/a", payload: bytes = b"hello", qos: int = 1) -> StoredMessage:
    return StoredMessage(mid, topic, payload, qos, False, "sp", "publisher", "user", 1_000 + mid)


def journal(seq: int, topic: str = "t/a", payload: bytes = b"hello") -> JournalRecord:
    return JournalRecord(seq, 1_000 + seq, topic, "", 1, seq % 2 == 0, payload, "pub", "user")


def delivery(did: int, client: str, mid: int, qos: int = 1, **kw: Any) -> DeliveryRecord:
    return DeliveryRecord(did, client, mid, qos, **kw)


def incoming(client: str, packet_id: int, mid: int, payload: bytes = b"q2") -> IncomingRecord:
    return IncomingRecord(
        client, packet_id, StoredMessage(mid, "in/t", payload, 2, True, "", client)
    )


def held_row(record: IncomingRecord) -> IncomingRow:
    """`record` as the broker hands it over (`WriteBatch.put_incoming_row`)."""
    return cast(IncomingRow, _codec.incoming_row(record, **BOUND_FAST))


def rich_state(store: Store) -> None:
    """A bit of everything, over three batches."""
    commit(
        store,
        ("put_session", SessionRecord("alice", {"clean": False, "will": {"topic": "w", "qos": 1}})),
        ("put_session", SessionRecord("bob")),
        ("put_subscription", SubscriptionRecord("alice", "a/#", {"qos": 1})),
        ("put_subscription", SubscriptionRecord("alice", "b/+", {})),
        ("put_subscription", SubscriptionRecord("bob", "a/#", {"qos": 2, "filter": "x > 1"})),
        ("put_retained", RetainedRecord("", "a/1", b"r1", 1, 5, {"props": [1, 2]})),
        ("put_retained", RetainedRecord("sp", "a/1", b"r2", 0)),
    )
    commit(
        store,
        ("append_journal", journal(1)),
        ("put_message", message(1)),
        ("put_delivery", delivery(1, "alice", 1)),
        ("put_delivery", delivery(2, "bob", 1, state=DeliveryState.INFLIGHT, packet_id=7)),
        ("append_journal", journal(2)),
        ("put_message", message(2, qos=2)),
        ("put_delivery", delivery(3, "alice", 2, qos=2, retain=True, data={"dup": True})),
    )
    commit(store, ("put_incoming", incoming("bob", 42, 3)), ("append_journal", journal(3)))


def test_fresh_store_loads_empty(harness: Harness) -> None:
    assert harness.store.load() == StoreState()


def test_every_put_round_trips(harness: Harness) -> None:
    rich_state(harness.store)
    state = harness.reopen().load()
    assert state.sessions == [
        SessionRecord("alice", {"clean": False, "will": {"topic": "w", "qos": 1}}),
        SessionRecord("bob"),
    ]
    assert state.subscriptions == [
        SubscriptionRecord("alice", "a/#", {"qos": 1}),
        SubscriptionRecord("alice", "b/+"),
        SubscriptionRecord("bob", "a/#", {"qos": 2, "filter": "x > 1"}),
    ]
    assert state.retained == [
        RetainedRecord("", "a/1", b"r1", 1, 5, {"props": [1, 2]}),
        RetainedRecord("sp", "a/1", b"r2", 0),
    ]
    assert state.messages == {1: message(1), 2: message(2, qos=2)}
    assert state.deliveries == [
        delivery(1, "alice", 1),
        delivery(2, "bob", 1, state=DeliveryState.INFLIGHT, packet_id=7),
        delivery(3, "alice", 2, qos=2, retain=True, data={"dup": True}),
    ]
    assert type(state.deliveries[1].state) is DeliveryState
    assert state.incoming == [incoming("bob", 42, 3)]
    assert (state.next_seq, state.next_message_id, state.next_delivery_id) == (4, 4, 4)
    assert state.quarantined == 0
    assert harness.store.read_journal(1, 10) == [journal(1), journal(2), journal(3)]


def test_every_delete_removes_its_record(harness: Harness) -> None:
    rich_state(harness.store)
    commit(
        harness.store,
        ("delete_subscription", "alice", "b/+"),
        ("delete_subscription", "nobody", "x"),  # deleting what is not there is no error
        ("delete_retained", "sp", "a/1"),
        ("delete_delivery", 3),
        ("delete_message", 2),
        ("delete_incoming", "bob", 42),
        ("delete_session", "bob"),
    )
    state = harness.reopen().load()
    assert [s.client_id for s in state.sessions] == ["alice"]
    assert [(s.client_id, s.key) for s in state.subscriptions] == [("alice", "a/#")]
    assert [(r.sub_point, r.topic) for r in state.retained] == [("", "a/1")]
    assert list(state.messages) == [1]
    assert [d.delivery_id for d in state.deliveries] == [1]
    assert state.incoming == []


def test_puts_replace_except_messages(harness: Harness) -> None:
    store = harness.store
    rich_state(store)
    commit(
        store,
        ("put_session", SessionRecord("bob", {"expiry": 60})),
        ("put_subscription", SubscriptionRecord("alice", "a/#", {"qos": 0})),
        ("put_retained", RetainedRecord("", "a/1", b"new", 2)),
        ("put_delivery", delivery(1, "alice", 1, state=DeliveryState.RELEASED, packet_id=9)),
        ("put_incoming", incoming("bob", 42, 3, payload=b"again")),
        ("put_message", message(1, payload=b"a different payload")),  # immutable: ignored
    )
    state = harness.reopen().load()
    assert state.sessions[1] == SessionRecord("bob", {"expiry": 60})
    assert state.subscriptions[0] == SubscriptionRecord("alice", "a/#", {"qos": 0})
    assert state.retained[0] == RetainedRecord("", "a/1", b"new", 2)
    assert state.deliveries[0] == delivery(1, "alice", 1, state=DeliveryState.RELEASED, packet_id=9)
    assert state.incoming == [incoming("bob", 42, 3, payload=b"again")]
    assert state.messages[1].payload == b"hello"
    assert harness.store.stats().messages == 2


def test_a_delivery_can_move_to_another_client(harness: Harness) -> None:
    commit(harness.store, ("put_message", message(1)), ("put_delivery", delivery(1, "a", 1)))
    commit(harness.store, ("put_delivery", delivery(1, "b", 1)))
    commit(harness.store, ("delete_session", "a"))
    assert harness.reopen().load().deliveries == [delivery(1, "b", 1)]


def test_ops_apply_in_batch_order(harness: Harness) -> None:
    store = harness.store
    commit(store, ("put_session", SessionRecord("s", {"v": 1})), ("put_message", message(1)))
    commit(
        store,
        ("delete_session", "s"),
        ("put_session", SessionRecord("s", {"v": 2})),
        ("put_delivery", delivery(1, "s", 1)),
        ("delete_delivery", 1),
        ("put_delivery", delivery(2, "gone", 1)),
        ("put_subscription", SubscriptionRecord("gone", "x")),
        ("put_incoming", incoming("gone", 1, 5)),
        ("delete_session", "gone"),
        ("put_subscription", SubscriptionRecord("gone", "y")),
        ("put_delivery", delivery(3, "s", 1)),
        ("put_retained", RetainedRecord("", "r", b"1", 0)),
        ("delete_retained", "", "r"),
        ("put_retained", RetainedRecord("", "r", b"2", 0)),
    )
    state = harness.reopen().load()
    assert state.sessions == [SessionRecord("s", {"v": 2})]
    assert state.subscriptions == [SubscriptionRecord("gone", "y")]
    assert state.deliveries == [delivery(3, "s", 1)]
    assert state.incoming == []
    assert state.retained == [RetainedRecord("", "r", b"2", 0)]
    assert state.next_delivery_id == 4
    assert state.next_message_id == 6  # incoming message 5 was committed, then deleted


def test_delete_session_cascades_to_its_rows_only(harness: Harness) -> None:
    rich_state(harness.store)
    commit(harness.store, ("delete_session", "alice"))
    state = harness.reopen().load()
    assert [s.client_id for s in state.sessions] == ["bob"]
    assert [(s.client_id, s.key) for s in state.subscriptions] == [("bob", "a/#")]
    assert [d.delivery_id for d in state.deliveries] == [2]
    assert [i.client_id for i in state.incoming] == ["bob"]
    # Message 2 lost its last delivery: load drops it as garbage (not damage).
    assert list(state.messages) == [1]
    assert state.quarantined == 0
    assert harness.store.stats().messages == 1


def test_delete_session_without_a_session_row_still_cascades(harness: Harness) -> None:
    commit(
        harness.store,
        ("put_message", message(1)),
        ("put_delivery", delivery(1, "queue", 1)),
        ("put_subscription", SubscriptionRecord("queue", "k")),
    )
    commit(harness.store, ("delete_session", "queue"))
    state = harness.reopen().load()
    assert state.deliveries == [] and state.subscriptions == [] and state.messages == {}


@pytest.mark.parametrize(
    "bad_step",
    [
        ("append_journal", journal(2)),  # duplicate seq
        ("put_message", message(9, qos=3)),
        ("put_delivery", DeliveryRecord(9, "c", 1, 1, packet_id=70_000)),
        ("put_incoming", IncomingRecord("c", 0, message(9))),
        ("put_session", SessionRecord("c", {"x": object()})),  # not JSON
        ("put_session", SessionRecord("c", {"x": float("nan")})),  # not strict JSON
        ("put_retained", RetainedRecord("", "t", "text, not bytes", 0)),  # type: ignore[arg-type]
        ("put_retained_row", ("", "t", "text, not bytes", 0, 0, 0, 0, 0)),
        ("put_retained_row", ("", "t", bytearray(b"x"), 3, 0, 0, 0, 0)),
        ("put_incoming_row", held_row(IncomingRecord("c", 0, message(9)))),
        ("put_incoming_row", ("c", 1, 9, "t", "text", 1, 0, "", "c", "u", 1, 0, 0, 0)),
        ("put_incoming_row", (*held_row(IncomingRecord("c", 1, message(9)))[:13], 2)),
    ],
    ids=[
        "dup-seq",
        "qos",
        "packet-id",
        "packet-id-0",
        "json",
        "nan",
        "payload-type",
        "row-payload-type",
        "row-qos",
        "held-row-packet-id-0",
        "held-row-payload-type",
        "held-row-released",
    ],
)
def test_a_failing_batch_applies_nothing(harness: Harness, bad_step: Step) -> None:
    store = harness.store
    rich_state(store)
    before = harness.reopen().load()
    stats_before = harness.store.stats()
    good_steps: list[Step] = [
        ("delete_session", "alice"),
        ("put_session", SessionRecord("carol", {"n": 1})),
        ("put_subscription", SubscriptionRecord("bob", "new/#")),
        ("delete_subscription", "bob", "a/#"),
        ("put_retained", RetainedRecord("", "a/1", b"changed", 0)),
        ("delete_retained", "sp", "a/1"),
        ("append_journal", journal(4)),
        ("put_message", message(4)),
        ("put_delivery", delivery(4, "bob", 4)),
        ("put_delivery", delivery(2, "bob", 1, state=DeliveryState.RELEASED)),
        ("delete_delivery", 1),
        ("delete_message", 2),
        ("put_incoming", incoming("bob", 43, 5)),
        ("delete_incoming", "bob", 42),
    ]
    with pytest.raises(StoreError):
        commit(harness.store, *good_steps[:7], bad_step, *good_steps[7:])
    assert harness.store.load() == before
    assert harness.store.stats() == stats_before
    assert harness.reopen().load() == before
    # The store is still usable after the failure.
    commit(harness.store, *good_steps)
    assert [s.client_id for s in harness.reopen().load().sessions] == ["bob", "carol"]


def test_load_after_reopen_returns_equal_state(harness: Harness) -> None:
    rich_state(harness.store)
    first = harness.store.load()
    assert harness.reopen().load() == first
    assert harness.reopen().load() == first


def test_a_released_held_message_stays_marked_released(harness: Harness) -> None:
    commit(
        harness.store, ("put_incoming", incoming("c", 1, 0)), ("put_incoming", incoming("c", 2, 0))
    )
    commit(harness.store, ("release_incoming", "c", 1), ("release_incoming", "c", 9))
    state = harness.reopen().load()
    assert [(r.packet_id, r.released) for r in state.incoming] == [(1, True), (2, False)]
    # The id re-used for a new message is held again.
    commit(harness.store, ("put_incoming", incoming("c", 1, 0)))
    assert [r.released for r in harness.reopen().load().incoming] == [False, False]


def test_counters_never_go_backwards(harness: Harness) -> None:
    store = harness.store
    for i in range(1, 6):
        commit(
            store,
            ("append_journal", journal(i)),
            ("put_message", message(i)),
            ("put_delivery", delivery(i, "c", i)),
        )
    commit(store, *[("delete_delivery", i) for i in range(1, 6)])
    commit(store, *[("delete_message", i) for i in range(1, 6)])
    commit(store, ("put_incoming", incoming("c", 1, 9)))
    commit(store, ("delete_incoming", "c", 1))
    assert store.trim_journal(100) == 5
    state = harness.reopen().load()
    assert (state.next_seq, state.next_message_id, state.next_delivery_id) == (6, 10, 6)
    assert harness.store.stats().journal_rows == 0
    # And after more restarts with nothing in between.
    state = harness.reopen().load()
    assert (state.next_seq, state.next_message_id, state.next_delivery_id) == (6, 10, 6)
    commit(harness.store, ("append_journal", journal(6)))
    assert harness.reopen().load().next_seq == 7


def test_counters_follow_the_largest_id_not_the_last(harness: Harness) -> None:
    commit(harness.store, ("put_message", message(7)), ("put_delivery", delivery(7, "c", 7)))
    commit(harness.store, ("put_message", message(3)), ("put_delivery", delivery(3, "c", 3)))
    commit(harness.store, ("append_journal", journal(7)), ("append_journal", journal(3)))
    commit(harness.store, ("delete_delivery", 3), ("delete_message", 3))
    state = harness.reopen().load()
    assert (state.next_seq, state.next_message_id, state.next_delivery_id) == (8, 8, 8)
    assert [r.seq for r in harness.store.read_journal(0, 100)] == [3, 7]


def test_a_replaced_incoming_message_id_is_not_reused(harness: Harness) -> None:
    commit(harness.store, ("put_incoming", incoming("c", 1, 9)))
    commit(harness.store, ("put_incoming", incoming("c", 1, 2)))  # packet id 1 reused
    state = harness.reopen().load()
    assert [i.message.id for i in state.incoming] == [2]
    assert state.next_message_id == 10


def test_journal_read_ranges_and_limits(harness: Harness) -> None:
    store = harness.store
    commit(store, *[("append_journal", journal(seq)) for seq in range(1, 21)])

    def seqs(start: int, end: int, limit: int | None = None) -> list[int]:
        return [r.seq for r in store.read_journal(start, end, limit)]

    assert seqs(5, 10) == [5, 6, 7, 8, 9]
    assert seqs(5, 10, 3) == [5, 6, 7]
    assert seqs(5, 10, 0) == []
    assert seqs(0, 1_000) == list(range(1, 21))
    assert seqs(0, 1_000, 100) == list(range(1, 21))
    assert seqs(20, 21) == [20]
    assert seqs(21, 30) == []
    assert seqs(10, 5) == []
    assert store.read_journal(3, 4) == [journal(3)]

    assert store.trim_journal(8) == 7
    assert store.trim_journal(8) == 0
    assert seqs(0, 100) == list(range(8, 21))
    stats = store.stats()
    assert (stats.journal_rows, stats.journal_first_seq, stats.journal_last_seq) == (13, 8, 20)
    store = harness.reopen()
    assert seqs(0, 100, 2) == [8, 9]
    assert store.load().next_seq == 21


def test_journal_seq_since_finds_the_age_cut(harness: Harness) -> None:
    store = harness.store
    assert store.journal_seq_since(0) is None
    commit(store, *[("append_journal", journal(seq)) for seq in range(1, 11)])  # ts 1001..1010
    assert store.journal_seq_since(0) == 1
    assert store.journal_seq_since(1_005) == 5
    assert store.journal_seq_since(1_010) == 10
    assert store.journal_seq_since(1_011) is None
    store.trim_journal(7)
    assert store.journal_seq_since(1_002) == 7


def test_consumer_offsets_are_kept_replaced_deleted_and_survive_a_restart(
    harness: Harness,
) -> None:
    store = harness.store
    assert store.consumer_offsets() == []
    store.put_consumer_offset(ConsumerOffset("ingest-b", "reader", None, True, 10))
    store.put_consumer_offset(ConsumerOffset("ingest-a", "", 41, False, 20))
    store.put_consumer_offset(ConsumerOffset("ingest-b", "reader", 7, True, 30))  # replaces
    expected = [
        ConsumerOffset("ingest-a", "", 41, False, 20),
        ConsumerOffset("ingest-b", "reader", 7, True, 30),
    ]
    assert store.consumer_offsets() == expected
    # Offsets are their own transactions: journal commits and trims leave them alone.
    commit(store, *[("append_journal", journal(seq)) for seq in range(1, 4)])
    store.trim_journal(3)
    assert harness.reopen().consumer_offsets() == expected
    assert harness.store.delete_consumer_offset("ingest-a") is True
    assert harness.store.delete_consumer_offset("ingest-a") is False
    assert harness.reopen().consumer_offsets() == expected[1:]


def test_journal_appends_out_of_order_read_in_seq_order(harness: Harness) -> None:
    commit(harness.store, ("append_journal", journal(5)), ("append_journal", journal(2)))
    commit(harness.store, ("append_journal", journal(3)))
    assert [r.seq for r in harness.store.read_journal(0, 10)] == [2, 3, 5]
    assert [r.seq for r in harness.reopen().read_journal(0, 10)] == [2, 3, 5]


PAYLOADS = {
    "empty": b"",
    "nuls": b"\x00" * 3 + bytes(range(256)) + b"\x00",
    "1MiB": os.urandom(1 << 20),
}


@pytest.mark.parametrize("payload", list(PAYLOADS.values()), ids=list(PAYLOADS))
def test_payload_bytes_round_trip_exactly(harness: Harness, payload: bytes) -> None:
    commit(
        harness.store,
        ("append_journal", journal(1, payload=payload)),
        ("put_message", message(1, payload=payload)),
        ("put_delivery", delivery(1, "c", 1)),
        ("put_retained", RetainedRecord("", "t", payload, 1)),
        ("put_incoming", incoming("c", 1, 2, payload=payload)),
    )
    state = harness.reopen().load()
    for got in (
        state.messages[1].payload,
        state.retained[0].payload,
        state.incoming[0].message.payload,
        harness.store.read_journal(1, 2)[0].payload,
    ):
        assert type(got) is bytes
        assert got == payload


TOPICS = [
    "\N{GREEK SMALL LETTER ALPHA}/\N{GREEK SMALL LETTER BETA}/\N{GREEK SMALL LETTER OMEGA}",
    "日本/東京/温度",
    "emoji/😀/🚀",
    "mixed café/naïve",
    "$SYS/broker/x",
    "a//b/",
]


def test_unicode_names_round_trip(harness: Harness) -> None:
    steps: list[Step] = []
    for i, topic in enumerate(TOPICS, start=1):
        client = f"client-{topic}"
        steps += [
            ("append_journal", journal(i, topic=topic)),
            ("put_message", message(i, topic=topic)),
            ("put_delivery", delivery(i, client, i)),
            ("put_session", SessionRecord(client, {"topic": topic})),
            ("put_subscription", SubscriptionRecord(client, topic, {topic: topic})),
            ("put_retained", RetainedRecord(topic, topic, topic.encode(), 0)),
        ]
    commit(harness.store, *steps)
    state = harness.reopen().load()
    assert sorted(m.topic for m in state.messages.values()) == sorted(TOPICS)
    assert sorted(r.topic for r in state.retained) == sorted(TOPICS)
    assert sorted(s.key for s in state.subscriptions) == sorted(TOPICS)
    assert all(s.data == {s.key: s.key} for s in state.subscriptions)
    assert [s.client_id for s in state.sessions] == sorted(f"client-{t}" for t in TOPICS)
    assert [r.topic for r in harness.store.read_journal(1, 100)] == TOPICS


def test_records_are_copied_on_commit_and_load(harness: Harness) -> None:
    store = harness.store
    session = SessionRecord("c", {"list": [1], "nested": {"k": "v"}})
    sub = SubscriptionRecord("c", "k", {"opts": [1]})
    d = delivery(1, "c", 1, data={"n": 0})
    commit(
        store,
        ("put_session", session),
        ("put_subscription", sub),
        ("put_message", message(1)),
        ("put_delivery", d),
    )
    session.data["list"].append(2)
    session.data["nested"]["k"] = "changed"
    session.client_id = "other"
    sub.data["opts"].append(2)
    d.state = DeliveryState.INFLIGHT
    d.data["n"] = 1

    loaded = store.load()
    assert loaded.sessions == [SessionRecord("c", {"list": [1], "nested": {"k": "v"}})]
    assert loaded.subscriptions == [SubscriptionRecord("c", "k", {"opts": [1]})]
    assert loaded.deliveries == [delivery(1, "c", 1, data={"n": 0})]
    loaded.sessions[0].data["list"].append(3)
    loaded.deliveries[0].data["n"] = 5
    loaded.messages[1].topic = "mutated"
    again = store.load()
    assert again.sessions[0].data == {"list": [1], "nested": {"k": "v"}}
    assert again.deliveries[0].data == {"n": 0}
    assert again.messages[1].topic == "t/a"


def test_data_is_stored_as_json(harness: Harness) -> None:
    data = {"tuple": (1, 2), "int_key": {1: "one"}, "unicode": "ü", "null": None, "f": 1.5}
    commit(harness.store, ("put_session", SessionRecord("c", data)))
    loaded = harness.reopen().load().sessions[0].data
    assert loaded == {
        "tuple": [1, 2],
        "int_key": {"1": "one"},
        "unicode": "ü",
        "null": None,
        "f": 1.5,
    }


def test_deliveries_load_in_delivery_id_order(harness: Harness) -> None:
    commit(
        harness.store,
        ("put_message", message(1)),
        *[("put_delivery", delivery(i, f"c{i % 3}", 1)) for i in (9, 3, 5, 1, 7)],
    )
    assert [d.delivery_id for d in harness.reopen().load().deliveries] == [1, 3, 5, 7, 9]


def test_dangling_deliveries_are_quarantined_and_orphans_dropped(harness: Harness) -> None:
    commit(
        harness.store,
        ("put_message", message(1)),
        ("put_message", message(2)),
        ("put_delivery", delivery(1, "c", 1)),
        ("put_delivery", delivery(2, "c", 3)),  # message 3 never stored
    )
    state = harness.reopen().load()
    assert state.deliveries == [delivery(1, "c", 1)]
    assert list(state.messages) == [1]
    assert state.quarantined == 1
    assert harness.store.stats().quarantined == 1
    assert (harness.store.stats().messages, harness.store.stats().deliveries) == (1, 1)
    again = harness.reopen().load()
    assert again.quarantined == 0
    assert again.deliveries == state.deliveries and again.messages == state.messages
    assert again.next_delivery_id == 3 and again.next_message_id == 3


def test_stats_counts(harness: Harness) -> None:
    store = harness.store
    rich_state(store)
    stats = store.stats()
    assert (stats.messages, stats.deliveries, stats.quarantined) == (2, 3, 0)
    assert (stats.journal_rows, stats.journal_first_seq, stats.journal_last_seq) == (3, 1, 3)
    commit(store, ("delete_delivery", 3), ("delete_message", 2), ("delete_message", 99))
    stats = store.stats()
    assert (stats.messages, stats.deliveries) == (1, 2)
    if harness.kind == "sqlite":
        assert stats.bytes_on_disk > 0


def test_empty_batch_is_a_no_op(harness: Harness) -> None:
    harness.store.commit(WriteBatch())
    assert harness.store.load() == StoreState()


def test_closed_store_refuses_work(harness: Harness) -> None:
    store = harness.store
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError):
        commit(store, ("put_session", SessionRecord("c")))
    with pytest.raises(StoreError):
        store.commit(WriteBatch())
    for call in (
        store.load,
        store.stats,
        lambda: store.read_journal(0, 1),
        lambda: store.trim_journal(1),
    ):
        with pytest.raises(StoreError):
            call()


# -- open_store ------------------------------------------------------------------------------


def test_open_store_sqlite_creates_the_directory(tmp_path: Path) -> None:
    data_dir = tmp_path / "a" / "b"
    store = open_store("sqlite", data_dir, "normal")
    try:
        assert isinstance(store, SqliteStore)
        assert store.sync is SyncMode.NORMAL
        assert (data_dir / "telemq.db").is_file()
    finally:
        store.close()


def test_open_store_memory_needs_no_directory() -> None:
    store = open_store("memory", None)
    assert isinstance(store, MemoryStore)
    store.close()


@pytest.mark.parametrize(
    ("kind", "data_dir", "sync"),
    [("postgres", "d", "full"), ("sqlite", None, "full"), ("sqlite", "d", "sometimes")],
)
def test_open_store_rejects_bad_settings(
    tmp_path: Path, kind: str, data_dir: str | None, sync: str
) -> None:
    with pytest.raises(ValueError):
        open_store(kind, None if data_dir is None else tmp_path / data_dir, sync)


# -- large batches: multi-row statements and sealed journal chunks ------------------------


def test_large_batches_of_deletes_remove_exactly_their_rows(harness: Harness) -> None:
    """Runs of deletes are written many rows a statement: composite keys included."""
    store = harness.store
    steps: list[Step] = [("put_session", SessionRecord(f"c{i}")) for i in range(3)]
    for i in range(1, 301):
        client = f"c{i % 3}"
        steps.append(("put_incoming", incoming(client, i, 0)))
        steps.append(("put_retained", RetainedRecord("", f"r/{i}", b"r", 0)))
        steps.append(("put_message", message(i)))
        steps.append(("put_delivery", delivery(i, client, i)))
    commit(store, *steps)
    deleted = range(1, 301, 2)  # every other one, 150 rows a kind: 128 + 16 + 4 + 2
    commit(
        store,
        *[("delete_incoming", f"c{i % 3}", i) for i in deleted],
        ("delete_incoming", "nobody", 2),  # a key that matches nothing changes nothing
        *[("delete_retained", "", f"r/{i}") for i in deleted],
        *[("delete_delivery", i) for i in deleted],
        *[("delete_message", i) for i in deleted],
    )
    state = harness.reopen().load()
    kept = set(range(2, 301, 2))
    assert {(r.client_id, r.packet_id) for r in state.incoming} == {(f"c{i % 3}", i) for i in kept}
    assert {r.topic for r in state.retained} == {f"r/{i}" for i in kept}
    assert {d.delivery_id for d in state.deliveries} == kept
    assert set(state.messages) == kept
    assert harness.store.stats().messages == len(kept)


@pytest.mark.parametrize("rows", [1, 2, 3, 10, 31, 32, 33, 70])
def test_runs_of_any_size_write_exactly_their_rows(harness: Harness, rows: int) -> None:
    """Small runs are one statement of their exact size, larger ones a few: same result."""
    ids = range(1, rows + 1)
    commit(
        harness.store,
        *[("put_incoming", incoming("c", i, 0, payload=b"p%d" % i)) for i in ids],
        *[("put_message", message(i)) for i in ids],
        *[("put_delivery", delivery(i, "c", i)) for i in ids],
        *[("append_journal", journal(i)) for i in ids],
    )
    gone = ids[::2]
    commit(
        harness.store,
        *[("delete_incoming", "c", i) for i in gone],
        *[("delete_delivery", i) for i in gone],
        *[("delete_message", i) for i in gone],
    )
    state = harness.reopen().load()
    kept = set(ids) - set(gone)
    assert {(r.packet_id, r.message.payload) for r in state.incoming} == {
        (i, b"p%d" % i) for i in kept
    }
    assert set(state.messages) == {d.message_id for d in state.deliveries} == kept
    assert [r.seq for r in harness.store.read_journal(1, rows + 1)] == list(ids)
    assert state.next_message_id == state.next_delivery_id == state.next_seq == rows + 1


def test_deleting_the_largest_incoming_ids_in_one_run_keeps_the_mark(harness: Harness) -> None:
    commit(
        harness.store, *[("put_incoming", incoming("c", pid, 100 + pid)) for pid in range(1, 41)]
    )
    commit(harness.store, *[("delete_incoming", "c", pid) for pid in range(1, 41)])
    assert harness.reopen().load().next_message_id == 141


def test_journal_rows_in_sealed_chunks_and_loose_rows_all_land(harness: Harness) -> None:
    batch = WriteBatch()
    total = JOURNAL_CHUNK_ROWS * 2 + 37
    for seq in range(1, JOURNAL_CHUNK_ROWS + 11):
        batch.append_journal(journal(seq))
    batch.seal_journal()
    assert len(batch.journal_chunks) == 1
    assert len(batch) == JOURNAL_CHUNK_ROWS + 10
    for seq in range(JOURNAL_CHUNK_ROWS + 11, total + 1):
        batch.append_journal(journal(seq))
    batch.seal_journal()
    assert len(batch.journal_chunks) == 2
    assert len(batch) == total
    harness.store.commit(batch)
    records = harness.reopen().read_journal(0, total + 10)
    assert [r.seq for r in records] == list(range(1, total + 1))
    assert records[-1] == journal(total)
    assert harness.store.stats().journal_rows == total


def test_a_bad_journal_row_in_a_sealed_chunk_rolls_back_the_whole_batch(harness: Harness) -> None:
    commit(harness.store, ("append_journal", journal(5)))
    batch = WriteBatch()
    batch.put_session(SessionRecord("x"))
    for seq in range(6, JOURNAL_CHUNK_ROWS + 6):
        batch.append_journal(journal(seq))
    batch.append_journal(journal(5))  # duplicate seq, in the loose rows
    batch.seal_journal()
    with pytest.raises(StoreError):
        harness.store.commit(batch)
    state = harness.reopen().load()
    assert state.sessions == []
    assert [r.seq for r in harness.store.read_journal(0, 10**6)] == [5]


@pytest.mark.parametrize("rows", [1, 7, 8, 9, 300])
def test_batches_of_journal_rows_alone_land_whole_or_not_at_all(
    harness: Harness, rows: int
) -> None:
    """A batch of nothing but journal rows (PostgreSQL: one COPY from a few rows on) lands
    whole; one duplicate seq among them, first or last, and none of its rows land."""
    commit(harness.store, *[("append_journal", journal(seq)) for seq in range(1, rows + 1)])
    fresh = range(rows + 1, 2 * rows + 1)
    for duplicate in {1, rows}:
        steps = [("append_journal", journal(seq)) for seq in fresh]
        where = 0 if duplicate == 1 else len(steps)
        steps.insert(where, ("append_journal", journal(duplicate)))
        with pytest.raises(StoreError):
            commit(harness.store, *steps)
    records = harness.reopen().read_journal(0, 10 * rows)
    assert [r.seq for r in records] == list(range(1, rows + 1))
    assert records[-1] == journal(rows)
    commit(harness.store, *[("append_journal", journal(seq)) for seq in fresh])
    assert [r.seq for r in harness.store.read_journal(0, 10 * rows)] == list(range(1, 2 * rows + 1))
    assert harness.reopen().load().next_seq == 2 * rows + 1


def test_interleaved_runs_keep_each_tables_order(harness: Harness) -> None:
    """A publication's "message, delivery", many times in one batch, with the same ids put
    twice (a delivery: the last put stays; a message: the first), deleted and put again,
    and expiry times as ints and floats (PostgreSQL writes such runs table by table, as one
    statement over arrays each)."""
    store = harness.store
    commit(store, *[("put_message", message(i)) for i in (90, 91)])
    steps: list[Step] = []
    for i in range(1, 9):
        expiring = StoredMessage(i, "t", b"m%d" % i, 1, False, "", "p", "u", i, b"", i + 0.5)
        steps += [
            ("put_message", expiring if i % 2 else message(i)),
            ("put_delivery", delivery(i, "c", i)),
            ("put_delivery", delivery(i, "c", i, packet_id=i)),  # replaces the one before
        ]
    steps += [
        ("put_message", message(1, payload=b"ignored")),  # immutable: the first stays
        ("delete_delivery", 2),
        ("delete_message", 2),
        ("delete_message", 90),
        ("put_message", message(90, payload=b"again")),  # deleted, then put: the new one
        ("delete_delivery", 3),
        ("put_delivery", delivery(3, "d", 3)),
        ("put_message", StoredMessage(20, "t", b"x", 1, False, "", "p", "u", 1, b"", 7)),
        ("put_message", message(21)),
        ("put_message", message(22)),
        ("put_message", message(23)),
        *[("put_delivery", delivery(30 + i, "e", i)) for i in (20, 21, 22, 23, 90, 91)],
        *[("put_retained", RetainedRecord("", f"r/{i % 3}", b"%d" % i, 1, i)) for i in range(7)],
        ("put_retained", RetainedRecord("sp", "r/0", b"other", 0, local_only=True)),
    ]
    commit(store, *steps)
    state = harness.reopen().load()
    kept = [1, 3, 4, 5, 6, 7, 8]
    assert [(d.delivery_id, d.client_id, d.packet_id) for d in state.deliveries][:7] == [
        (i, "d" if i == 3 else "c", 0 if i == 3 else i) for i in kept
    ]
    assert sorted(state.messages) == [1, 3, 4, 5, 6, 7, 8, 20, 21, 22, 23, 90, 91]
    assert state.messages[1].payload == b"m1" and state.messages[1].expiry_at == 1.5
    assert state.messages[4].expiry_at == 0
    assert state.messages[20].expiry_at == 7
    assert state.messages[90].payload == b"again"
    assert harness.store.stats().messages == 13
    assert [(r.sub_point, r.topic, r.payload) for r in state.retained] == [
        ("", "r/0", b"6"),
        ("", "r/1", b"4"),
        ("", "r/2", b"5"),
        ("sp", "r/0", b"other"),
    ]
    assert state.retained[3].local_only
    assert state.next_message_id == 92 and state.next_delivery_id == 122


def bound(record: RetainedRecord) -> RetainedRow:
    """`record` as the broker hands it over (`WriteBatch.put_retained_row`)."""
    return cast(RetainedRow, _codec.retained_row(record, **BOUND_FAST))


PUBLISHER = {"client_id": 'c\u00e9"1', "user_id": "u", "expiry_at": 1_900_000_000.5}


def test_a_retained_row_loads_back_as_its_record(harness: Harness) -> None:
    """What the broker writes as a row (no data, properties or local scope: 0) is what the
    record would have written."""
    records = [
        RetainedRecord("", "a/1", b"r1", 1, 5, PUBLISHER),
        RetainedRecord("", "a/2", b"", 0),
        RetainedRecord("sp", "p/5", b"\x00\xff", 2, 7, {"origin": "edge"}, b"\x01\x01", True),
    ]
    commit(harness.store, *[("put_retained_row", bound(r)) for r in records])
    assert harness.reopen().load().retained == records


def test_retained_rows_and_records_replace_each_other_in_batch_order(harness: Harness) -> None:
    """Rows and records are one table's puts: runs of either kind (long enough to be one
    statement over arrays in PostgreSQL, the same key repeated) keep the batch's order."""
    store = harness.store
    commit(store, ("put_retained", RetainedRecord("", "k/0", b"stored", 0)))
    steps: list[Step] = []
    for i in range(12):
        record = RetainedRecord("", f"k/{i % 3}", b"%d" % i, 1, i, PUBLISHER if i % 2 else {})
        as_row = i // 4 % 2 == 1  # four records, four rows, four records
        steps.append(("put_retained_row", bound(record)) if as_row else ("put_retained", record))
    steps += [
        ("delete_retained", "", "k/2"),
        ("put_retained_row", bound(RetainedRecord("", "k/3", b"row", 0))),
        ("put_retained", RetainedRecord("", "k/3", b"record", 0, local_only=True)),
    ]
    commit(store, *steps)
    assert harness.reopen().load().retained == [
        RetainedRecord("", "k/0", b"9", 1, 9, PUBLISHER),
        RetainedRecord("", "k/1", b"10", 1, 10),
        RetainedRecord("", "k/3", b"record", 0, local_only=True),
    ]


def test_a_held_row_loads_back_as_its_record(harness: Harness) -> None:
    """What the broker writes as a row (no properties and no expiry: 0) is what the record
    would have written, and its message id raises the mark as the record's did."""
    records = [
        incoming("c", 1, 0),
        IncomingRecord(
            "cé",
            65535,
            StoredMessage(77, "in/ü", b"\x00\xff", 2, True, "sp", "cé", "u", 9, b"\x01\x01", 1.9e9),
            released=True,
        ),
    ]
    commit(harness.store, *[("put_incoming_row", held_row(r)) for r in records])
    state = harness.reopen().load()
    assert sorted(state.incoming, key=lambda r: r.packet_id) == records
    assert state.next_message_id == 78


def test_held_rows_and_records_merge_with_releases_and_deletes(harness: Harness) -> None:
    """Rows are one table's puts with records: in a batch long enough to be merged key by
    key (PostgreSQL), each key ends as its last op says."""
    store = harness.store
    commit(store, *[("put_incoming_row", held_row(incoming("c", pid, 0))) for pid in (1, 2)])
    commit(
        store,
        ("put_incoming_row", held_row(incoming("c", 3, 0, payload=b"row"))),
        ("put_incoming", incoming("c", 3, 0, payload=b"record")),
        ("release_incoming", "c", 1),
        ("put_incoming_row", held_row(incoming("c", 2, 0, payload=b"row again"))),
        ("put_incoming_row", held_row(incoming("d", 5, 0))),
        ("delete_incoming", "d", 5),
        ("put_incoming_row", held_row(incoming("d", 6, 0))),
        ("release_incoming", "d", 6),
    )
    held = {
        (r.client_id, r.packet_id): (r.message.payload, r.released)
        for r in harness.reopen().load().incoming
    }
    assert held == {
        ("c", 1): (b"q2", True),
        ("c", 2): (b"row again", False),
        ("c", 3): (b"record", False),
        ("d", 6): (b"q2", True),
    }


def test_held_messages_put_released_and_deleted_in_one_batch(harness: Harness) -> None:
    """A QoS 2 flow's ops on held messages, interleaved in one batch as the broker makes
    them, on keys already stored and new ones (PostgreSQL merges each key's ops and writes
    the result as a few statements over arrays)."""
    store = harness.store
    commit(store, *[("put_incoming", incoming("c", pid, 100 + pid)) for pid in range(1, 5)])
    commit(
        store,
        ("put_incoming", incoming("c", 10, 110)),
        ("release_incoming", "c", 1),
        ("put_incoming", incoming("c", 11, 500)),
        ("delete_incoming", "c", 2),
        ("release_incoming", "c", 10),
        ("release_incoming", "c", 11),
        ("put_incoming", incoming("c", 2, 202, payload=b"new")),
        ("delete_incoming", "c", 3),
        ("release_incoming", "c", 3),
        ("delete_incoming", "c", 11),
        ("release_incoming", "c", 4),
        ("put_incoming", incoming("c", 4, 204, payload=b"replaced")),
        ("release_incoming", "c", 99),
        ("put_incoming", incoming("c", 12, 112, payload=b"first")),
        ("put_incoming", incoming("c", 12, 113, payload=b"second")),
        ("put_incoming", incoming("d", 1, 301)),
        ("delete_incoming", "d", 1),
        ("put_incoming", incoming("d", 1, 302, payload=b"back")),
        ("release_incoming", "d", 1),
    )
    state = harness.reopen().load()
    held = {
        (r.client_id, r.packet_id): (r.message.id, r.message.payload, r.released)
        for r in state.incoming
    }
    assert held == {
        ("c", 1): (101, b"q2", True),
        ("c", 2): (202, b"new", False),
        ("c", 4): (204, b"replaced", False),
        ("c", 10): (110, b"q2", True),
        ("c", 12): (113, b"second", False),
        ("d", 1): (302, b"back", True),
    }
    assert state.next_message_id == 501  # the put that was deleted in the batch counts too
