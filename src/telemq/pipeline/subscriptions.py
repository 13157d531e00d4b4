"""A broker's stored subscriptions as Spark conditions, for `telemq pipeline replay`.

Subscriptions are read from the store's ``subscriptions`` table with a read-only connection
(the pipeline imports neither the broker nor its registry). The broker keeps there every
subscription of a persistent session, MQTT SUBSCRIBE and MQ RegSub alike: a row is
``(client_id, key, data)`` where ``data`` is the registry's JSON form of the subscription,
of which replay needs ``queue`` (the MQ QName, the client id), ``topic``, ``sub_point``,
``filter`` (SQL text, empty for none) and ``name`` (the SubName). `find_subscriptions` looks a
name up as a SubName first, then as a queue (all of its subscriptions).

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
from ..protocol import topic_filter_error
from ..store import JournalReader

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["StoredSubscription", "find_subscriptions", "match_column", "topic_regex"]


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
        found.append(
            StoredSubscription(
                queue=_text(data, "queue") or client_id,
                topic_filter=_text(data, "topic") or key,
                filter=_text(data, "filter"),
                sub_point=_text(data, "sub_point") or "",
                name=_text(data, "name"),
            )
        )
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

    from ..filters.spark import to_column

    if not subscriptions:
        return F.lit(False)
    conditions = []
    for sub in subscriptions:
        condition = F.col("topic").rlike(topic_regex(sub.topic_filter)) & (
            F.col("sub_point") == F.lit(sub.sub_point)
        )
        if sub.filter:
            condition = condition & F.coalesce(to_column(compile_filter(sub.filter)), F.lit(False))
        conditions.append(condition)
    result = conditions[0]
    for condition in conditions[1:]:
        result = result | condition
    return result
