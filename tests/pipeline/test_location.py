"""Where the pipeline reads the journal from (`telemq.pipeline.location`), without Spark.

The same journal is read through a store file and through a broker subprocess's journal
service (HTTP, the standard library's client): the batches are the same; a range retention
deleted is `DataLossError`, or what is left with ``failOnDataLoss`` off; a consumer's offset
goes to the broker for the service and to a record file for the store file; wrong credentials
are refused with the broker's 401 message.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from telemq.filters import compile_filter
from telemq.journal.client import JournalClient, JournalServiceError
from telemq.pipeline.location import (
    DataLossError,
    JournalService,
    StoreFile,
    is_service_url,
    locate,
)
from telemq.store import consumers
from testsupport.process import users_and_acl, wait_until

from .helpers import Pub, journal_service, telemetry

pytestmark = pytest.mark.timeout(120)

PASSWORDS = {"reader": "reader-pw-1", "narrow": "narrow-pw-2"}
ACL = [("reader", "journal", "#", True), ("narrow", "journal", "sensors/room1/#", True)]


def _table(batches: Iterator[pa.RecordBatch]) -> pa.Table:
    from telemq.journal.arrow import JOURNAL_SCHEMA

    return pa.Table.from_batches(list(batches), schema=JOURNAL_SCHEMA)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    workdir = tmp_path_factory.mktemp("location")
    pubs = [*telemetry(3000), Pub("odd\x00topic", b"nul in the topic")]
    with journal_service(workdir, pubs, config_text=users_and_acl(PASSWORDS, ACL)) as (b, url):
        yield b.data_dir, url


def test_the_service_and_the_file_give_the_same_batches(served: tuple[Path, str]) -> None:
    data, url = served
    local = StoreFile(str(data))
    remote = locate(url, {"user": "reader", "password": PASSWORDS["reader"]})
    assert isinstance(remote, JournalService)
    assert remote.bounds() == local.bounds() == (1, 3001)
    for first, last, topics, flt in [
        (1, 3001, (), None),
        (17, 2000, ("sensors/room2/#",), None),
        (1, 3001, (), "temp > 20"),
        (2990, 3001, ("#",), None),  # the row with U+0000 takes the store's row path
    ]:
        f = compile_filter(flt) if flt else None
        expected = _table(local.read(first, last, topics=topics, flt=f))
        got = _table(remote.read(first, last, topics=topics, flt=f))
        assert got.num_rows > 0 and got.equals(expected), (first, last, topics, flt)


def test_credentials_and_rights_are_the_brokers(served: tuple[Path, str]) -> None:
    _, url = served
    with pytest.raises(JournalServiceError, match="401 bad user name or password"):
        locate(url, {"user": "reader", "password": "wrong"}).bounds()
    with pytest.raises(JournalServiceError, match="401 anonymous access is off"):
        locate(url).bounds()
    narrow = {"user": "narrow", "password": PASSWORDS["narrow"]}
    with pytest.raises(JournalServiceError, match="403 not authorized"):
        locate(url, narrow).bounds()  # every topic, by default
    allowed = locate(url, narrow, topics=["sensors/room1/#"])
    rows = _table(allowed.read(1, 3001, topics=["sensors/room1/#"]))
    assert set(rows.column("topic").to_pylist()) == {"sensors/room1/t"}
    # Credentials in the URL are taken out of it (and out of what is shown).
    client = JournalClient.parse(url.replace("//", f"//reader:{PASSWORDS['reader']}@"))
    assert (client.url, client.user) == (url, "reader")
    assert PASSWORDS["reader"] not in repr(client)
    assert client.bounds() == (1, 3001)


def test_offsets_go_to_the_broker_or_to_a_record_file(
    served: tuple[Path, str], tmp_path: Path
) -> None:
    data, url = served
    client = JournalClient(url, user="reader", password=PASSWORDS["reader"])
    remote = JournalService(client)
    remote.save_offset("job one", None, True)  # a name the broker would refuse is made safe
    remote.save_offset("job one", 120, True)
    (offset,) = [o for o in client.offsets() if o["name"] == "job_one"]
    assert (offset["committed_seq"], offset["running"]) == (120, True)
    assert consumers.read_records(data) == []  # nothing in the broker's directory
    remote.save_offset("query-dead", 5, False)
    remote.sweep("query-")  # ended anonymous queries go
    assert [o["name"] for o in client.offsets()] == ["job_one"]
    remote.drop_offset("job one")
    assert client.offsets() == []
    local = StoreFile(str(tmp_path))
    local.save_offset("job", 7, True)
    assert [(r.consumer, r.committed_seq) for r in consumers.read_records(tmp_path)] == [("job", 7)]


def test_a_trimmed_range_is_data_loss_or_what_is_left(tmp_path: Path) -> None:
    retention = "[journal]\nmax_rows = 100\nretention_interval = 0.2\n"
    with journal_service(tmp_path, telemetry(500), config_text=retention) as (_, url):
        remote = locate(url)
        assert wait_until(lambda: remote.bounds()[0] == 401, 15.0), remote.bounds()
        with pytest.raises(DataLossError, match="seq 1 to 400 were deleted by retention"):
            list(remote.read(1, 450))
        left = _table(remote.read(1, 450, fail_on_data_loss=False))
        assert left.column("seq").to_pylist() == list(range(401, 451))
        assert list(remote.read(1, 300, fail_on_data_loss=False)) == []


def test_where_is_a_service_url_or_a_path() -> None:
    assert is_service_url("http://h:1") and is_service_url(" HTTPS://h:1")
    assert not is_service_url("data") and not is_service_url("file:///data")
    assert isinstance(locate("some/dir"), StoreFile)
    with pytest.raises(ValueError, match="give the service's root"):
        locate("http://h:1/journal")
