"""A client of the broker's journal service (`broker.http`), for readers on other hosts.

Theory of operation
-------------------
The Spark data source plans on the driver and reads on executors, which may be anywhere: so
the client is a plain value (a URL, credentials, TLS file names) that pickles to executors,
and every call opens its own connection with the standard library (`urllib`), nothing to
install on a node but pyarrow. A range arrives as an Arrow IPC stream and is handed on a
record batch at a time while the rest is still on the wire: an executor holds one batch,
and the broker reads the next only when the socket has taken the previous one.

Errors are `JournalServiceError` with the HTTP status and the broker's message; a range
retention already deleted (410) is its subclass `JournalTrimmed`, which the data source
turns into Spark's ``failOnDataLoss`` behaviour. A connection that cannot be made at all is
a `JournalServiceError` with status 0 naming the URL.

One call reads the broker's admin API instead (`subscriptions`, ``GET /api/v1/subscriptions``):
it is served by the same listener, to the same users over the same TLS, and
``telemq pipeline replay --subscription`` over the journal service needs a subscription's
topic filters and SQL filter, which only the broker knows. The API answers administrators
only; anyone else gets its 403 as a `JournalServiceError`.

Credentials are the broker's users (HTTP Basic): given as `user`/`password`, or in the URL
(``http://user:secret@host:port``; they are taken out of the URL before it is used or
shown). Over ``https``, `cafile` is the CA to trust (default: the system's), and
`certfile`/`keyfile` a client certificate for listeners that require one.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = ["JournalClient", "JournalServiceError", "JournalTrimmed"]

API = "/journal/v1"
ADMIN_API = "/api/v1"
ADMIN_PAGE = 1000  # the admin API's largest page
DEFAULT_TIMEOUT_S = 60.0
_READ_BUFFER = 1 << 20  # bytes pyarrow reads from the socket at a time


class JournalServiceError(Exception):
    """The journal service refused a request, or could not be reached (`status` 0)."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason or message  # the broker's own message, without the status


class JournalTrimmed(JournalServiceError):
    """The range asked for starts before the first seq still in the journal (410)."""


@dataclass(frozen=True, slots=True)
class JournalClient:
    """The journal service at `url` (``http[s]://host:port``), as one user."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S

    @classmethod
    def parse(cls, url: str, **settings: Any) -> JournalClient:
        """A client for `url`, its credentials (if any) moved into `user`/`password`;
        ValueError names what is wrong with the URL."""
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"journal {url!r}: expected http://host:port or https://host:port")
        try:
            parts.port  # noqa: B018 - raises ValueError for a port that is no number
        except ValueError as error:
            raise ValueError(f"journal {url!r}: {error}") from None
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"journal {url!r}: give the service's root, http://host:port")
        netloc = parts.netloc.rpartition("@")[2]
        client = cls(f"{parts.scheme}://{netloc}", **settings)
        if parts.username is not None and client.user is None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            client = replace(client, user=user, password=password)
        return client

    # -- the journal ---------------------------------------------------------------------

    def bounds(self, topics: Sequence[str] = ()) -> tuple[int, int]:
        """``(first, last)``: the first seq still in the journal and the last committed."""
        body = self._json("GET", "bounds", [("topic", t) for t in topics])
        return int(body["first"]), int(body["last"])

    def read_range(
        self, first: int, last: int, topics: Sequence[str] = ()
    ) -> Iterator[pa.RecordBatch]:
        """The rows ``first <= seq <= last`` (of `topics` only, when given), in seq order, as
        they arrive; `JournalTrimmed` when retention deleted the start of the range."""
        import pyarrow as pa

        query = [("from", str(first)), ("to", str(last)), *(("topic", t) for t in topics)]
        with self._open("GET", "range", query) as response:
            stream = pa.input_stream(pa.PythonFile(response, mode="r"), buffer_size=_READ_BUFFER)
            reader = pa.ipc.open_stream(stream)
            for batch in reader:
                if batch.num_rows:
                    yield batch

    # -- consumer offsets ------------------------------------------------------------------

    def commit_offset(
        self,
        consumer: str,
        committed_seq: int | None,
        *,
        running: bool = True,
        topics: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Record how far `consumer` has processed the journal (None: unchanged, a
        heartbeat); the broker's retention keeps what a live consumer has not committed."""
        body = {"committed_seq": committed_seq, "running": running, "topics": list(topics)}
        reply: dict[str, Any] = self._json("PUT", f"consumers/{_name(consumer)}", body=body)
        return reply

    def delete_offset(self, consumer: str) -> bool:
        """Forget `consumer`'s offset; whether there was one."""
        try:
            self._json("DELETE", f"consumers/{_name(consumer)}")
        except JournalServiceError as error:
            if error.status == 404:
                return False
            raise
        return True

    def offsets(self) -> list[dict[str, Any]]:
        """The offsets this user committed (an administrator's: everyone's)."""
        listed: list[dict[str, Any]] = self._json("GET", "consumers")["consumers"]
        return listed

    # -- the admin API ----------------------------------------------------------------------

    def subscriptions(self, search: str = "") -> list[dict[str, Any]]:
        """Every subscription the broker holds whose topic, SubName, queue or SQL filter
        contains `search`, as the admin API lists them (all its pages); for administrators
        only: a `JournalServiceError` 403 for any other user."""
        found: list[dict[str, Any]] = []
        while True:
            query = [("limit", str(ADMIN_PAGE)), ("offset", str(len(found)))]
            if search:
                query.append(("search", search))
            page = self._json("GET", "subscriptions", query, api=ADMIN_API)
            listed: list[dict[str, Any]] = page["subscriptions"]
            found.extend(listed)
            if not listed or len(found) >= int(page["total"]):
                return found

    # -- HTTP --------------------------------------------------------------------------------

    def _json(
        self,
        method: str,
        endpoint: str,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        *,
        api: str = API,
    ) -> Any:
        with self._open(method, endpoint, query, body, api=api) as response:
            data = response.read()
        return json.loads(data) if data else None

    def _open(
        self,
        method: str,
        endpoint: str,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        *,
        api: str = API,
    ) -> Any:
        url = f"{self.url}{api}/{endpoint}"
        if query:
            url += "?" + urllib.parse.urlencode(list(query))
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.user is not None:
            secret = f"{self.user}:{self.password or ''}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(secret).decode())
        try:
            return urllib.request.urlopen(request, timeout=self.timeout, context=self._tls())
        except urllib.error.HTTPError as error:
            raise _refusal(error, "journal service" if api == API else "admin API") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise JournalServiceError(0, f"journal service {self.url}: {reason}") from None

    def _tls(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https:"):
            return None
        context = ssl.create_default_context(cafile=self.cafile)
        if self.certfile is not None:
            context.load_cert_chain(self.certfile, self.keyfile)
        return context


def _refusal(error: urllib.error.HTTPError, service: str) -> JournalServiceError:
    """The broker's ``{"error": ...}`` message, with the status, as an exception."""
    try:
        message = str(json.loads(error.read())["error"])
    except (ValueError, KeyError, TypeError, OSError):
        message = str(error.reason)
    kind = JournalTrimmed if error.code == 410 else JournalServiceError
    return kind(error.code, f"{service}: {error.code} {message}", message)


def _name(consumer: str) -> str:
    return urllib.parse.quote(consumer, safe="")
