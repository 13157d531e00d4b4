"""Where the pipeline reads the journal from: a store file at hand, or the journal service.

Theory of operation
-------------------
The data source plans and reads in the same way wherever the journal is; only three things
differ, and `JournalLocation` is the seam for them:

- the bounds (planning, on the driver);
- a seq range as record batches (reading, on executors): `StoreFile` opens the store's file
  read-only (the broker's host, or an offline copy); `JournalService` asks the broker over
  HTTP (`telemq.journal.JournalClient`), so an executor on any host never opens a file of the
  broker's;
- the consumer's offset, which journal retention honours: a record file in the broker's data
  directory (`store.consumers`) for `StoreFile`, an offset the broker keeps in its store for
  `JournalService`.

Locations are plain values, pickled to executors with the reader. Writing an offset never
fails a query: a failure is logged, and the next commit or heartbeat tries again.

``where`` is a string in the jobs and `read_journal`: an ``http://`` or ``https://`` URL is
the journal service, anything else a data directory or store file (`locate`).
"""

from __future__ import annotations

import contextlib
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..filters import Filter
from ..journal.arrow import DEFAULT_CHUNK_ROWS, TopicMatcher
from ..journal.client import JournalClient, JournalServiceError, JournalTrimmed
from ..store import JournalReader, consumers
from .journal import data_dir_of, filter_mask, read_bounds, read_filtered

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = [
    "CREDENTIAL_OPTIONS",
    "DataLossError",
    "JournalLocation",
    "JournalService",
    "StoreFile",
    "is_service_url",
    "locate",
    "service_client",
]

log = logging.getLogger("telemq.pipeline")

CREDENTIAL_OPTIONS = ("user", "password", "cafile", "certfile", "keyfile")
"""The source options that configure the client of a journal service."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class DataLossError(RuntimeError):
    """Rows a query was to read were deleted by retention first (``failOnDataLoss``)."""

    def __init__(self, wanted: int, first: int) -> None:
        super().__init__(
            f"telemq source: journal rows from seq {wanted} to {first - 1} were deleted by"
            " retention before this query read them (set failOnDataLoss=false to skip them)"
        )


def is_service_url(where: str) -> bool:
    return where.strip().lower().startswith(("http://", "https://"))


class JournalLocation(ABC):
    """The journal of one broker, seen from the pipeline (see the module docstring)."""

    @abstractmethod
    def bounds(self) -> tuple[int, int]:
        """``(first, last)``: the first seq still in the journal and the last committed."""

    @abstractmethod
    def read(
        self,
        first: int,
        last: int,
        *,
        topics: Sequence[str] = (),
        flt: Filter | None = None,
        fail_on_data_loss: bool = True,
    ) -> Iterator[pa.RecordBatch]:
        """The rows ``first <= seq <= last`` of `topics` (all when empty) that `flt` keeps, in
        seq order; `DataLossError` when some were trimmed and `fail_on_data_loss`."""

    @abstractmethod
    def save_offset(self, consumer: str, committed_seq: int | None, running: bool) -> None:
        """Record a consumer's position (None: unchanged), never raising."""

    @abstractmethod
    def drop_offset(self, consumer: str) -> None:
        """Forget a consumer (an anonymous query that ended), never raising."""

    @abstractmethod
    def sweep(self, prefix: str) -> None:
        """Forget the dead consumers whose names start with `prefix` (anonymous queries
        that were killed), never raising."""


@dataclass(frozen=True, slots=True)
class StoreFile(JournalLocation):
    """A broker's data directory or store file, opened read-only by whoever reads it."""

    path: str

    def bounds(self) -> tuple[int, int]:
        return read_bounds(self.path)

    def read(
        self,
        first: int,
        last: int,
        *,
        topics: Sequence[str] = (),
        flt: Filter | None = None,
        fail_on_data_loss: bool = True,
    ) -> Iterator[pa.RecordBatch]:
        with JournalReader(self.path) as reader:
            if fail_on_data_loss:
                low, _ = reader.bounds()
                if low > first:
                    raise DataLossError(first, low)
            yield from read_filtered(
                reader,
                first,
                last,
                topics=TopicMatcher(topics) if topics else None,
                flt=flt,
                chunk_rows=DEFAULT_CHUNK_ROWS,
            )

    def save_offset(self, consumer: str, committed_seq: int | None, running: bool) -> None:
        try:
            data_dir = data_dir_of(self.path)
            consumers.update_record(data_dir, consumer, committed_seq, running=running)
        except OSError as exc:
            log.warning("cannot write the consumer record of %s: %s", consumer, exc)

    def drop_offset(self, consumer: str) -> None:
        with contextlib.suppress(OSError):
            consumers.remove_record(data_dir_of(self.path), consumer)

    def sweep(self, prefix: str) -> None:
        data_dir = data_dir_of(self.path)
        with contextlib.suppress(OSError):
            for old in consumers.read_records(data_dir):
                if old.consumer.startswith(prefix) and not consumers.is_live(old):
                    consumers.remove_record(data_dir, old.consumer)


@dataclass(frozen=True, slots=True)
class JournalService(JournalLocation):
    """A broker's journal service: every read and offset goes over HTTP (`JournalClient`).

    `topics` are the query's topic filters: the broker checks the user may read them, for
    ranges and for the offsets that hold its retention back alike."""

    client: JournalClient
    topics: tuple[str, ...] = field(default=())

    def bounds(self) -> tuple[int, int]:
        return self.client.bounds(self.topics)

    def read(
        self,
        first: int,
        last: int,
        *,
        topics: Sequence[str] = (),
        flt: Filter | None = None,
        fail_on_data_loss: bool = True,
    ) -> Iterator[pa.RecordBatch]:
        try:
            batches = self.client.read_range(first, last, topics)
            for batch in batches:
                if flt is not None:
                    batch = batch.filter(filter_mask(batch, flt))
                if batch.num_rows:
                    yield batch
        except JournalTrimmed:
            low, _ = self.client.bounds(topics)
            if fail_on_data_loss:
                raise DataLossError(first, low) from None
            if low <= last:
                yield from self.read(low, last, topics=topics, flt=flt, fail_on_data_loss=False)

    def save_offset(self, consumer: str, committed_seq: int | None, running: bool) -> None:
        try:
            self.client.commit_offset(
                _UNSAFE.sub("_", consumer), committed_seq, running=running, topics=self.topics
            )
        except JournalServiceError as exc:
            log.warning("cannot commit the offset of %s: %s", consumer, exc)

    def drop_offset(self, consumer: str) -> None:
        try:
            self.client.delete_offset(_UNSAFE.sub("_", consumer))
        except JournalServiceError as exc:
            log.warning("cannot delete the offset of %s: %s", consumer, exc)

    def sweep(self, prefix: str) -> None:
        try:
            for offset in self.client.offsets():
                if str(offset["name"]).startswith(prefix) and not offset["live"]:
                    self.client.delete_offset(str(offset["name"]))
        except (JournalServiceError, KeyError, TypeError) as exc:
            log.warning("cannot sweep the offsets of ended queries: %s", exc)


def locate(
    where: str, options: Mapping[str, str] | None = None, topics: Sequence[str] = ()
) -> JournalLocation:
    """The location `where` names: a journal service URL (`options` may hold
    `CREDENTIAL_OPTIONS`), else a data directory or store file."""
    if not is_service_url(where):
        return StoreFile(where)
    return JournalService(service_client(where, options), tuple(topics))


def service_client(where: str, options: Mapping[str, str] | None = None) -> JournalClient:
    """The client of the journal service at URL `where`, with the `CREDENTIAL_OPTIONS` of
    `options`."""
    settings = {k: str(v) for k, v in (options or {}).items() if k in CREDENTIAL_OPTIONS and v}
    return JournalClient.parse(where, **settings)
