"""What the broker stores for a retained publication: one `RetainedRow` per publication,
made from its own message (no record, no `data` dict), and what every store loads back
from it is the record the broker used to write: the publisher, the expiry, the origin, the
MQTT 5.0 properties and the local scope.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from telemq.broker.core.committer import Committer
from telemq.broker.core.message import Message
from telemq.broker.core.retained import RetainedMessages
from telemq.broker.core.stats import BrokerStats
from telemq.store import Op, RetainedRecord, Store


def stored_after_keep(store: Store, message: Message) -> RetainedRecord:
    """Keep `message` as retained, commit what that wrote and load it back."""
    loop = asyncio.new_event_loop()
    try:
        committer = Committer(store, loop, None, lambda error: None)
        RetainedMessages(committer, BrokerStats()).keep(message)
        assert [op for op, _ in committer.pending.ops] == [Op.PUT_RETAINED_ROW]
        store.commit(committer.pending)
    finally:
        loop.close()
    [record] = store.load().retained
    return record


def message(**fields: object) -> Message:
    kept = Message("a/b", b"kept", 1, True, "sp", 'pub-\u00e9"1', "user\\1", 1_234)
    for name, value in fields.items():
        setattr(kept, name, value)
    return kept


def test_a_plain_retained_publication(store_of_each_kind: Store) -> None:
    store = store_of_each_kind
    assert stored_after_keep(store, message()) == RetainedRecord(
        "sp",
        "a/b",
        b"kept",
        1,
        1_234,
        {"client_id": 'pub-\u00e9"1', "user_id": "user\\1", "expiry_at": 0.0},
    )


def test_everything_a_retained_publication_can_carry(store_of_each_kind: Store) -> None:
    store = store_of_each_kind
    made_elsewhere = message(
        expiry_at=1_900_000_000.25,
        properties=b"\x03\x00\x0atext/plain",
        local_only=True,
        origin="edge-\u00fc",
    )
    assert stored_after_keep(store, made_elsewhere) == RetainedRecord(
        "sp",
        "a/b",
        b"kept",
        1,
        1_234,
        {
            "client_id": 'pub-\u00e9"1',
            "user_id": "user\\1",
            "expiry_at": 1_900_000_000.25,
            "origin": "edge-\u00fc",
        },
        b"\x03\x00\x0atext/plain",
        True,
    )


@pytest.mark.parametrize("expiry", [math.inf, math.nan])
def test_an_expiry_that_is_not_a_number_is_stored_as_never(
    store_of_each_kind: Store, expiry: float
) -> None:
    """Strict JSON has no infinity or NaN: such an expiry is stored as null, which a restart
    reads as "never expires" (restore.py), instead of failing the commit."""
    store = store_of_each_kind
    record = stored_after_keep(store, message(expiry_at=expiry))
    assert record.data["expiry_at"] is None
    assert json.loads(json.dumps(record.data)) == record.data
