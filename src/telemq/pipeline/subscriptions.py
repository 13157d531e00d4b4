"""A broker's stored subscriptions as Spark conditions, for `telemq pipeline replay`.

Subscriptions are read from the store's ``subscriptions`` table with a read-only connection
(the pipeline imports neither the broker nor its registry). The broker keeps there every
subscription of a persistent session, MQTT SUBSCRIBE and MQ RegSub alike: a row is
``(client_id, key, data)`` where ``data`` is the registry's JSON form of the subscription,
of which replay needs ``queue`` (the MQ QName, the client id), ``topic``, ``sub_point``,
``filter`` (SQL text, empty for none) and ``name`` (the SubName). `find_subscriptions` looks a
name up as a SubName first, then as a queue (all of its subscriptions).

Over the journal service there is no store file to read: `subscriptions_from_api` asks the
broker's admin API instead (`JournalClient.subscriptions`), whose listing has the same fields
under the same names, and looks the name up by the same rule. It lists what the broker holds
in memory, so it also finds the subscriptions of clean sessions, which are never stored; and
it answers administrators only.

`match_column` turns subscriptions into one Spark condition: a publication matches a queue
when any of its subscriptions matches (topic filter, subscription point and SQL filter), and
counts once, as the broker delivers one copy per session.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..filters import compile_filter
from ..journal.client import JournalClient
from ..protocol import topic_filter_error
from ..store import JournalReader

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "StoredSubscription",
    "find_subscriptions",
    "match_column",
    "subscriptions_from_api",
    "topic_regex",
]


@dataclass(frozen=True, slots=True)
class StoredSubscription:
    queue: str
    topic_filter: str
    filter: str | None = None
    sub_point: str = ""
    name: str | None = None


def _text(data: dict[str, object], *keys: str) -> str | None:
    for key in keys:
        value = data.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def find_subscriptions(data_dir: str | os.PathLike[str], name: str) -> list[StoredSubscription]:
    """The subscriptions named `name` (SubName), else those of queue `name`; maybe none."""
    with JournalReader(data_dir) as reader:
        rows = reader.subscriptions()
    found: list[StoredSubscription] = []
    for row in rows:
        client_id, key, raw = row.client_id, row.key, row.data
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            continue
        if not isinstance(data, dict):
            data = {}
        found.append(_subscription(data, client_id, key))
    return _named(found, name)


def subscriptions_from_api(client: JournalClient, name: str) -> list[StoredSubscription]:
    """`find_subscriptions` over the broker's admin API (see the module docstring); a
    `JournalServiceError` when the API refuses (403: not an administrator)."""
    listed = client.subscriptions(search=name)
    found = [_subscription(data, "", "") for data in listed if isinstance(data, dict)]
    return _named([s for s in found if s.queue and s.topic_filter], name)


def _subscription(data: dict[str, object], client_id: str, key: str) -> StoredSubscription:
    """One subscription from its JSON form (the store's record, or the admin API's)."""
    return StoredSubscription(
        queue=_text(data, "queue") or client_id,
        topic_filter=_text(data, "topic") or key,
        filter=_text(data, "filter"),
        sub_point=_text(data, "sub_point") or "",
        name=_text(data, "name"),
    )


def _named(found: list[StoredSubscription], name: str) -> list[StoredSubscription]:
    """Those with SubName `name`, else those of queue `name`."""
    named = [s for s in found if s.name == name]
    return named or [s for s in found if s.queue == name]


def _quote(text: str) -> str:
    """`text` as a literal in a Java regular expression."""
    return "\\Q" + text.replace("\\E", "\\E\\\\E\\Q") + "\\E" if text else ""


def topic_regex(topic_filter: str) -> str:
    """A Java regular expression matching exactly the topics `topic_filter` matches."""
    error = topic_filter_error(topic_filter)
    if error is not None:
        raise ValueError(error)
    levels = topic_filter.split("/")
    parts: list[str] = []
    tail = ""
    for index, level in enumerate(levels):
        if level == "#":
            tail = "(/.*)?" if index else ".*"
            break
        parts.append("[^/]*" if level == "+" else _quote(level))
    body = "/".join(parts) + tail
    guard = r"(?!\$)" if topic_filter[:1] in ("+", "#") else ""
    return rf"(?s)\A{guard}{body}\z"


def match_column(subscriptions: Sequence[StoredSubscription]) -> Column:
    """True for the journal rows any of `subscriptions` matches (NULL/False otherwise)."""
    from pyspark.sql import functions as F

    from ..filters.spark import to_columns

    if not subscriptions:
        return F.lit(False)
    # compiled together: their Metric[...] share one Sparkplug decoding per row
    texts = [sub.filter for sub in subscriptions if sub.filter]
    filters = iter(to_columns([compile_filter(text) for text in texts]))
    conditions = []
    for sub in subscriptions:
        condition = F.col("topic").rlike(topic_regex(sub.topic_filter)) & (
            F.col("sub_point") == F.lit(sub.sub_point)
        )
        if sub.filter:
            condition = condition & F.coalesce(next(filters), F.lit(False))
        conditions.append(condition)
    result = conditions[0]
    for condition in conditions[1:]:
        result = result | condition
    return result
