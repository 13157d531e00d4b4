"""Random histories give the same observable results on MemoryStore and SqliteStore.

The histories draw ids from small ranges, so they collide on purpose: replaced and deleted
rows, deliveries whose message is gone, duplicate journal seqs and invalid qos values (which
must fail the whole batch on both stores), trims, loads and restarts in between.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemq.store import (
    DeliveryRecord,
    DeliveryState,
    IncomingRecord,
    JournalRecord,
    MemoryStore,
    RetainedRecord,
    SessionRecord,
    SqliteStore,
    Store,
    StoredMessage,
    StoreError,
    SubscriptionRecord,
    SyncMode,
    WriteBatch,
    _codec,
)
from telemq.store.sqlite_writes import BOUND_FAST

clients = st.sampled_from(["a", "b", "ç"])
names = st.sampled_from(["t/1", "t/2", "ü/#"])
qos = st.sampled_from([0, 1, 2] * 6 + [3])  # 3 is invalid: the batch must fail on both stores
payloads = st.binary(max_size=12)
properties = st.sampled_from([b""] * 3) | st.binary(max_size=6)  # mostly none, as in MQTT 3.1.1
# Mostly never; negative values and NaN are invalid: the batch must fail on both stores.
expiries = (
    st.sampled_from([0.0] * 3)
    | st.floats(-1.0, 2e9)
    | st.integers(-1, 2**31)
    | st.just(float("nan"))
)
data = st.dictionaries(
    st.text(max_size=3),
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    max_size=2,
)
messages = st.builds(
    StoredMessage,
    st.integers(1, 6),
    names,
    payloads,
    qos,
    st.booleans(),
    names,
    clients,
    clients,
    st.integers(0, 10**12),
    properties,
    expiries,
)

ops = st.one_of(
    st.tuples(st.just("put_session"), st.builds(SessionRecord, clients, data)),
    st.tuples(st.just("delete_session"), clients),
    st.tuples(st.just("put_subscription"), st.builds(SubscriptionRecord, clients, names, data)),
    st.tuples(st.just("delete_subscription"), clients, names),
    st.tuples(
        st.just("put_retained"),
        st.builds(
            RetainedRecord, names, names, payloads, qos, st.integers(0, 99), data, properties
        ),
    ),
    st.tuples(
        st.just("put_retained_row"),  # as the broker binds it: bytearrays, 0 for NULL
        st.tuples(
            names,
            names,
            payloads.map(bytearray),
            qos,
            st.integers(0, 99),
            st.sampled_from([0, '{"client_id":"a","user_id":"","expiry_at":0.0}']),
            properties.map(lambda p: bytearray(p) if p else 0),
            st.sampled_from([0, 1]),
        ),
    ),
    st.tuples(st.just("delete_retained"), names, names),
    st.tuples(st.just("put_message"), messages),
    st.tuples(st.just("delete_message"), st.integers(1, 6)),
    st.tuples(
        st.just("put_delivery"),
        st.builds(
            DeliveryRecord,
            st.integers(1, 8),
            clients,
            st.integers(1, 6),
            qos,
            st.sampled_from(DeliveryState),
            st.integers(0, 3),
            st.booleans(),
            data,
        ),
    ),
    st.tuples(st.just("delete_delivery"), st.integers(1, 8)),
    st.tuples(
        st.just("put_incoming"), st.builds(IncomingRecord, clients, st.integers(1, 3), messages)
    ),
    st.tuples(
        st.just("put_incoming_row"),  # as the broker binds it: bytearrays, 0 for NULL
        st.builds(IncomingRecord, clients, st.integers(1, 3), messages, st.booleans()).map(
            lambda record: _codec.incoming_row(record, **BOUND_FAST)
        ),
    ),
    st.tuples(st.just("delete_incoming"), clients, st.integers(1, 3)),
    st.tuples(st.just("release_incoming"), clients, st.integers(1, 3)),
    st.tuples(
        st.just("append_journal"),
        st.builds(
            JournalRecord,
            st.integers(1, 15),
            st.integers(0, 99),
            names,
            names,
            qos,
            st.booleans(),
            payloads,
            clients,
            clients,
            properties,
        ),
    ),
)
actions = st.one_of(
    st.tuples(st.just("commit"), st.lists(ops, max_size=8)),
    st.tuples(st.just("trim"), st.integers(0, 17)),
    st.tuples(st.just("load")),
    st.tuples(st.just("reopen")),
)


def observe(store: Store, action: tuple[Any, ...]) -> object:
    """Run one action; return what a caller could see of it."""
    kind = action[0]
    if kind == "commit":
        batch = WriteBatch()
        for name, *args in action[1]:
            getattr(batch, name)(*args)
        try:
            store.commit(batch)
        except StoreError:
            return "failed"
        return "ok"
    if kind == "trim":
        return store.trim_journal(action[1])
    if kind == "load":
        return store.load()
    raise AssertionError(kind)


def snapshot(store: Store) -> object:
    stats = store.stats()
    # Sizes that differ by design: the memory store has no file, and SQLite's journal_rows
    # is `last - first + 1`, exact only while seq has no gaps (these histories make gaps).
    stats.bytes_on_disk = stats.journal_rows = 0
    return (store.read_journal(0, 100), store.read_journal(3, 9, 2), stats)


@settings(max_examples=200, deadline=None)
@given(st.lists(actions, max_size=12))
def test_memory_and_sqlite_agree(
    tmp_path_factory: pytest.TempPathFactory, history: list[tuple[Any, ...]]
) -> None:
    path = tmp_path_factory.mktemp("history") / "telemq.db"
    memory: Store = MemoryStore()
    sqlite: Store = SqliteStore(path, SyncMode.OFF)
    try:
        for action in history:
            if action[0] == "reopen":
                memory.close()
                sqlite.close()
                assert isinstance(memory, MemoryStore)
                memory, sqlite = memory.reopen(), SqliteStore(path, SyncMode.OFF)
                continue
            assert observe(memory, action) == observe(sqlite, action), action
            assert snapshot(memory) == snapshot(sqlite)
        assert memory.load() == sqlite.load()
    finally:
        memory.close()
        sqlite.close()
