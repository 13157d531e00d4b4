"""Store recovery: a damaged SQLite store never prevents start-up.

Each case fills the store of a broker through MQTT (retained messages, persistent sessions
with subscriptions, queued QoS 1 messages), stops the broker, damages ``telemq.db`` (or its
``-wal``) the way a disk or an operator could, and starts the broker again. Whatever the
damage, the broker starts and serves (a QoS 1 round trip and a retained update work); what it
set aside is logged and counted in ``$SYS/broker/store/quarantined``; and the data the damage
did not touch is still there:

* damage SQLite reports when the file is opened (a truncated file, a garbage header): the
  file is moved aside as ``telemq.db.corrupt-<UTC>`` and the broker starts empty, with one
  quarantined record;
* overwritten pages (random ones, a page of a loaded table, journal pages, which start-up
  does not read in full): the broker serves, and the damage is logged and counted;
* single records that decode badly: exactly those rows are quarantined, everything else loads;
* a lost or garbage ``-wal`` after a crash: the committed transactions it held are gone, the
  checkpointed state loads intact and nothing is called damaged.
"""

from __future__ import annotations

import random
import re
import sqlite3
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from testsupport.paho import sys_value

from .conftest import BrokerFactory
from .helpers import (
    BrokerProcess,
    RawClient,
    collect_until,
    raw_connected,
    unique,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(90)]

SEED = 20261122
SYS_QUARANTINED = "$SYS/broker/store/quarantined"
SYS_WAIT = 10.0  # for the first $SYS value (published every second here)
RETAINED_TOPICS = 40
RETAINED_SIZE = 1500  # bytes: the store spans dozens of pages
SESSIONS = 4
QUEUED_PER_SESSION = 15
PAGE_HEADER = 100  # the SQLite database header


@dataclass
class Filled:
    """What a store holds after `fill`: retained payloads by topic, queued payloads by
    session (each session subscribed to its own topic at QoS 1)."""

    retained: dict[str, bytes]
    queued: dict[str, list[bytes]]

    @staticmethod
    def topic_of(session: str) -> str:
        return f"rec/q/{session}"


def fill(
    port: int, tag: str, *, sessions: int = SESSIONS, retained: int = RETAINED_TOPICS
) -> Filled:
    """Publish retained messages and queue QoS 1 messages for offline persistent sessions."""
    rng = random.Random(f"{SEED}-{tag}")
    state = Filled({}, {})
    for i in range(sessions):
        session = f"rec-{tag}-{i}"
        with raw_connected(port, session, clean=False) as sub:
            assert sub.subscribe([(Filled.topic_of(session), 1)]) == [1]
            sub.disconnect()
        state.queued[session] = []
    with raw_connected(port) as pub:
        for i in range(retained):
            topic = f"rec/ret/{tag}/{i}"
            payload = f"{tag}:{i}:".encode() + rng.randbytes(RETAINED_SIZE // 2).hex().encode()
            pub.publish(topic, payload, qos=1, retain=True)
            state.retained[topic] = payload
        for session, queued in state.queued.items():
            for n in range(QUEUED_PER_SESSION):
                payload = f"{session}:{n}".encode()
                pub.publish(Filled.topic_of(session), payload, qos=1)
                queued.append(payload)
        pub.disconnect()
    return state


def retained_under(port: int, prefix: str) -> dict[str, bytes]:
    """The retained messages a new subscriber to ``prefix/#`` gets (a live sentinel published
    after the SUBACK marks the end of them)."""
    sentinel_topic = f"{prefix}/~sentinel/{uuid.uuid4().hex[:8]}"
    with raw_connected(port) as sub:
        sub.subscribe([(f"{prefix}/#", 1)])
        with raw_connected(port) as pub:
            pub.publish(sentinel_topic, b"end", qos=1)
            pub.disconnect()
        got = collect_until(sub, b"end", timeout=15)
        sub.disconnect()
    return {m.topic: m.payload for m in got if m.retain}


def drain_session(port: int, session: str, count: int) -> tuple[bool, list[bytes], list[bytes]]:
    """Resume a persistent session and receive ``count`` queued messages; then probe its
    subscription: a publication to its topic followed by a sentinel on a fresh topic.

    Returns (session present, the queued payloads, what the probe delivered before the
    sentinel: ``[b"probe"]`` while the session is still subscribed to its topic)."""
    probe_topic = f"rec/probe/{uuid.uuid4().hex[:8]}"
    with RawClient(port) as sub:
        present = bool(sub.connect(session, clean=False).session_present)
        queued = [m.payload for m in sub.collect(count, timeout=15)]
        assert sub.subscribe([(probe_topic, 1)]) == [1]
        with raw_connected(port) as pub:
            pub.publish(Filled.topic_of(session), b"probe", qos=1)
            pub.publish(probe_topic, b"end", qos=1)
            pub.disconnect()
        probed = [m.payload for m in collect_until(sub, b"end", timeout=15)[:-1]]
        sub.unsubscribe([probe_topic])
        sub.disconnect()
    return present, queued, probed


def assert_serves(port: int) -> None:
    """A QoS 1 round trip and a retained update work on the restarted broker."""
    topic = unique("rec/live/")
    with raw_connected(port) as sub, raw_connected(port) as pub:
        assert sub.subscribe([(topic, 1)]) == [1]
        pub.publish(topic, b"live", qos=1)
        pub.publish(f"{topic}/kept", b"kept", qos=1, retain=True)
        assert [m.payload for m in sub.collect(1)] == [b"live"]
        pub.disconnect()
        sub.disconnect()
    assert retained_under(port, topic) == {f"{topic}/kept": b"kept"}


def last_start_log(broker: BrokerProcess) -> str:
    """The broker's stderr since its last start."""
    text = broker.log_text()
    marker = f"--- start {broker.starts}:"
    return text[text.rindex(marker) :] if marker in text else text


def db_file(broker: BrokerProcess) -> Path:
    return broker.data_dir / "telemq.db"


def corrupt_files(broker: BrokerProcess) -> list[Path]:
    """Damaged store files set aside (their ``-wal`` / ``-shm`` companions not counted)."""
    return sorted(
        p
        for p in broker.data_dir.glob("telemq.db.corrupt-*")
        if not p.name.endswith(("-wal", "-shm"))
    )


# ---------------------------------------------------------------------------------------------
# Whole-file damage: SQLite reports the file corrupt or not a database
# ---------------------------------------------------------------------------------------------


def _truncate_to(fraction: float | None, extra: int = 0) -> Callable[[Path, random.Random], None]:
    def damage(path: Path, rng: random.Random) -> None:
        size = path.stat().st_size
        new_size = extra if fraction is None else int(size * fraction) + extra
        with path.open("r+b") as f:
            f.truncate(new_size)

    return damage


def _page_size(path: Path) -> int:
    with path.open("rb") as f:
        header = f.read(PAGE_HEADER)
    (size,) = struct.unpack(">H", header[16:18])
    return 65536 if size == 1 else int(size)


def _overwrite_pages(count: int) -> Callable[[Path, random.Random], None]:
    """Random bytes over ``count`` random pages other than the first (seeded)."""

    def damage(path: Path, rng: random.Random) -> None:
        page = _page_size(path)
        pages = path.stat().st_size // page
        assert pages > count + 1, f"store too small to damage: {pages} pages"
        with path.open("r+b") as f:
            for number in rng.sample(range(1, pages), count):  # 0-based: page 1 is kept
                f.seek(number * page)
                f.write(rng.randbytes(page))

    return damage


def _overwrite_table_page(table: str, which: str) -> Callable[[Path, random.Random], None]:
    """Random bytes over one leaf page of ``table`` (``which``: its "first", "middle" or
    "last" leaf; the last one is where new rows go), found with SQLite's ``dbstat``."""

    def damage(path: Path, rng: random.Random) -> None:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as conn:
            leaves = [
                int(row[0])
                for row in conn.execute(
                    "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY path",
                    (table,),
                )
            ]
        conn.close()
        assert len(leaves) >= 3, f"{table} has only {len(leaves)} leaf pages"
        number = {"first": leaves[0], "middle": leaves[len(leaves) // 2], "last": leaves[-1]}[which]
        page = _page_size(path)
        with path.open("r+b") as f:
            f.seek((number - 1) * page)
            f.write(rng.randbytes(page))

    return damage


def _overwrite_header(path: Path, rng: random.Random) -> None:
    with path.open("r+b") as f:
        f.write(rng.randbytes(PAGE_HEADER))


# Damage SQLite reports as soon as the file is opened.
FILE_DAMAGE: dict[str, Callable[[Path, random.Random], None]] = {
    "truncated to 100 bytes": _truncate_to(None, 100),
    "truncated to 1 page + 10 bytes": _truncate_to(None, 4096 + 10),
    "truncated to 1/3": _truncate_to(1 / 3),
    "truncated to 2/3 + 7 bytes": _truncate_to(2 / 3, 7),
    "header overwritten": _overwrite_header,
}

# Damage inside pages: SQLite reports it only when the page is read.
PAGE_DAMAGE: dict[str, Callable[[Path, random.Random], None]] = {
    "1 random page overwritten": _overwrite_pages(1),
    "8 random pages overwritten": _overwrite_pages(8),
    "a retained leaf page overwritten": _overwrite_table_page("retained", "middle"),
    "the last journal leaf page overwritten": _overwrite_table_page("journal", "last"),
    "a middle journal leaf page overwritten": _overwrite_table_page("journal", "middle"),
}


def _fill_stop_damage(
    broker_factory: BrokerFactory, damage: Callable[[Path, random.Random], None], case: str
) -> BrokerProcess:
    broker = broker_factory("--sys-interval", "1")
    fill(broker.port, "w")
    assert broker.stop() == 0
    path = db_file(broker)
    wal = Path(f"{path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # a clean stop checkpoints the WAL
    damage(path, random.Random(f"{SEED}-{case}"))
    broker.start()
    return broker


@pytest.mark.parametrize("case", list(FILE_DAMAGE))
def test_damaged_file_is_set_aside_and_the_broker_starts(
    broker_factory: BrokerFactory, case: str
) -> None:
    broker = _fill_stop_damage(broker_factory, FILE_DAMAGE[case], case)
    assert_serves(broker.port)
    log = last_start_log(broker)
    aside = corrupt_files(broker)
    # One damaged file set aside: renamed for an operator, logged, counted.
    assert len(aside) == 1, (aside, log)
    assert re.search(
        r"ERROR .*store .* is damaged .*moved it to telemq\.db\.corrupt-\d{8}T\d{6}Z", log
    ), log
    assert sys_value(broker.port, SYS_QUARANTINED, SYS_WAIT) == "1", log
    # Nothing of the damaged file was loaded (the new store starts empty).
    assert retained_under(broker.port, "rec/ret") == {}


@pytest.mark.parametrize("case", list(PAGE_DAMAGE))
def test_damaged_pages_are_reported_and_the_broker_serves(
    broker_factory: BrokerFactory, case: str
) -> None:
    """Wherever the pages are (tables loaded at start-up, the journal that is not, indexes,
    free pages), the broker starts and serves, and the damage is logged and counted."""
    broker = broker_factory("--sys-interval", "1")
    filled = fill(broker.port, "w")
    assert broker.stop() == 0
    PAGE_DAMAGE[case](db_file(broker), random.Random(f"{SEED}-{case}"))
    broker.start()
    assert_serves(broker.port)
    log = last_start_log(broker)
    quarantined = sys_value(broker.port, SYS_QUARANTINED, SYS_WAIT)
    assert quarantined is not None, f"no {SYS_QUARANTINED} within {SYS_WAIT} s\n{log}"
    counted = int(quarantined)
    assert counted >= 1, f"the damage was not counted\n{log}"
    assert re.search(r"ERROR .*damaged", log), log
    aside = corrupt_files(broker)
    assert len(aside) <= 1, aside
    if aside:  # the file was set aside: what could be read was salvaged, intact
        assert re.search(r"a new store holds the \d+ rows that could be read", log), log
    survivors = retained_under(broker.port, "rec/ret/w")
    assert all(filled.retained.get(topic) == payload for topic, payload in survivors.items())
    if "journal" in case:  # damage confined to the journal: every retained value survives
        assert survivors == filled.retained, log


def test_file_truncated_to_zero_bytes_starts_empty(broker_factory: BrokerFactory) -> None:
    """An empty file is what SQLite calls a new database: the broker starts and serves."""
    broker = broker_factory("--sys-interval", "1")
    fill(broker.port, "z", sessions=1, retained=5)
    assert broker.stop() == 0
    _truncate_to(None, 0)(db_file(broker), random.Random(SEED))
    broker.start()
    assert_serves(broker.port)
    assert retained_under(broker.port, "rec/ret") == {}


# ---------------------------------------------------------------------------------------------
# Record damage: single rows that decode badly are quarantined, the rest loads
# ---------------------------------------------------------------------------------------------


def test_bad_records_are_quarantined_and_the_rest_loads(broker_factory: BrokerFactory) -> None:
    broker = broker_factory("--sys-interval", "1")
    filled = fill(broker.port, "r")
    assert broker.stop() == 0

    sessions = sorted(filled.queued)
    bad_retained = "rec/ret/r/7"
    bad_utf8_retained = "rec/ret/r/8"
    session_bad_subscription = sessions[0]
    session_bad_delivery = sessions[1]
    with sqlite3.connect(db_file(broker), isolation_level=None) as conn:
        changed = [
            # Data that is not JSON.
            conn.execute(
                "UPDATE retained SET data = '{\"client_id\": ' WHERE topic = ?", (bad_retained,)
            ).rowcount,
            # A topic that is not UTF-8.
            conn.execute(
                "UPDATE retained SET topic = CAST(x'7265632f7265742f722fff' AS TEXT)"
                " WHERE topic = ?",
                (bad_utf8_retained,),
            ).rowcount,
            conn.execute(
                "UPDATE subscriptions SET data = '[not json' WHERE client_id = ?",
                (session_bad_subscription,),
            ).rowcount,
            # A delivery whose message is gone (the first queued message of that session).
            conn.execute(
                "UPDATE deliveries SET message_id = 987654321 WHERE delivery_id ="
                " (SELECT MIN(delivery_id) FROM deliveries WHERE client_id = ?)",
                (session_bad_delivery,),
            ).rowcount,
        ]
        assert changed == [1, 1, 1, 1]
    conn.close()

    broker.start()
    assert_serves(broker.port)
    log = last_start_log(broker)
    assert corrupt_files(broker) == []  # the file itself is fine
    for table in ("retained", "subscriptions", "deliveries"):
        assert f"quarantined a row of {table}" in log, log
    assert "set aside 4 damaged records" in log, log
    assert sys_value(broker.port, SYS_QUARANTINED, SYS_WAIT) == "4", log
    with sqlite3.connect(f"{db_file(broker).resolve().as_uri()}?mode=ro", uri=True) as conn:
        tables = sorted(row[0] for row in conn.execute("SELECT table_name FROM quarantine"))
    conn.close()
    assert tables == ["deliveries", "retained", "retained", "subscriptions"]

    # Every other retained message is intact.
    expected = {
        t: p for t, p in filled.retained.items() if t not in (bad_retained, bad_utf8_retained)
    }
    assert retained_under(broker.port, "rec/ret") == expected
    # Every session is back with its queue (only the damaged delivery is missing) and its
    # subscription, except the session whose subscription record was quarantined.
    for session in sessions:
        wanted = filled.queued[session]
        if session == session_bad_delivery:
            wanted = wanted[1:]
        present, queued, probed = drain_session(broker.port, session, len(wanted))
        assert (present, queued) == (True, wanted), session
        assert probed == ([] if session == session_bad_subscription else [b"probe"]), session


# ---------------------------------------------------------------------------------------------
# WAL damage after a crash
# ---------------------------------------------------------------------------------------------


def _delete_wal(path: Path, rng: random.Random) -> None:
    wal = Path(f"{path}-wal")
    assert wal.exists() and wal.stat().st_size > 0, "the crash left no WAL to damage"
    wal.unlink()


def _garbage_wal(path: Path, rng: random.Random) -> None:
    wal = Path(f"{path}-wal")
    size = wal.stat().st_size
    assert size > 0, "the crash left no WAL to damage"
    wal.write_bytes(rng.randbytes(size))


def _garbage_wal_tail(path: Path, rng: random.Random) -> None:
    """Keep the WAL header and the first half of the frames, garbage after."""
    wal = Path(f"{path}-wal")
    size = wal.stat().st_size
    assert size > 0, "the crash left no WAL to damage"
    keep = max(32, size // 2)
    with wal.open("r+b") as f:
        f.seek(keep)
        f.write(rng.randbytes(size - keep))


WAL_DAMAGE: dict[str, Callable[[Path, random.Random], None]] = {
    "-wal deleted": _delete_wal,
    "-wal all garbage": _garbage_wal,
    "-wal tail garbage": _garbage_wal_tail,
}


@pytest.mark.parametrize("case", list(WAL_DAMAGE))
def test_lost_or_garbage_wal_after_a_crash(broker_factory: BrokerFactory, case: str) -> None:
    """Phase 1 is checkpointed into the file by a clean stop; phase 2 lives only in the WAL
    when the broker is killed. After the damage phase 1 loads intact; phase 2 may be lost."""
    broker = broker_factory("--sys-interval", "1")
    before = fill(broker.port, "a", sessions=2)
    assert broker.stop() == 0
    broker.start()
    after = fill(broker.port, "b", sessions=2, retained=10)
    broker.kill()
    WAL_DAMAGE[case](db_file(broker), random.Random(f"{SEED}-{case}"))

    broker.start()
    assert_serves(broker.port)
    log = last_start_log(broker)
    assert corrupt_files(broker) == [], log
    assert sys_value(broker.port, SYS_QUARANTINED, SYS_WAIT) == "0", log
    assert retained_under(broker.port, "rec/ret/a") == before.retained
    for session, queued in before.queued.items():
        assert drain_session(broker.port, session, len(queued)) == (True, queued, [b"probe"])
    # What survives of phase 2 is a prefix of whole transactions: a retained topic has either
    # its published payload or nothing, never anything else.
    survived = retained_under(broker.port, "rec/ret/b")
    assert all(after.retained[t] == p for t, p in survived.items()), survived
