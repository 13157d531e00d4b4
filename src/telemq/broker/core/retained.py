"""Retained messages: the last publication kept per topic and subscription point.

Theory of operation
-------------------
`RetainedMessages` is the only code that changes retained state. A publication with RETAIN
replaces the topic's message, one with an empty payload removes it (MQTT 3.1.1 §3.3.1.3);
MQ's DeletePub removes one by name and an MQ expiry removes it when due. Every change goes
into the committer's pending batch in the same call, so memory and store never differ after
a commit. `$SYS/` topics are kept in memory only: they are recomputed at every start.

Finding the messages a new subscription matches costs the part of the tree its filter
covers, not everything stored, as in Mosquitto: besides the topic -> message map of each
subscription point, a tree of topic levels (`TopicIndex`) is walked along the filter. An
exact level is one dictionary lookup, `+` visits the children of its level, `#` the branch
below it; a filter whose first levels match nothing costs a lookup or two however many
messages are retained. Matches come back in the order the topics were first retained, as
the map keeps them.

Quotas: the retained messages (outside `$SYS/`) are counted, with their bytes (topic and
payload). A publication that would pass `max_retained_messages` (a new topic) or
`max_retained_bytes` is routed and journaled as usual but not retained; the topic keeps what
it had. Refusals are counted in `$SYS` and logged the first time and every 1,000th.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Final

from ...store import Op, RetainedRow
from .committer import Committer
from .message import Message

if TYPE_CHECKING:
    from .stats import BrokerStats

log = logging.getLogger("telemq.broker")

SYS_PREFIX = "$SYS/"
_json_text: Final = json.encoder.encode_basestring  # a str as JSON text (not ASCII-escaped)


class _Level:
    """One level of a `TopicIndex`: the deeper levels, and the topic ending here, if any."""

    __slots__ = ("children", "order")

    def __init__(self) -> None:
        # Most levels are a topic's last (a leaf): they share one empty map, which only
        # `TopicIndex.add` replaces (never adds to), so a retained topic costs no dict.
        self.children: dict[str, _Level] = NO_CHILDREN
        self.order = 0  # > 0: a topic ends here, retained first as the order-th of its tree


NO_CHILDREN: Final[dict[str, _Level]] = {}


class TopicIndex:
    """The topics of one subscription point as a tree of levels (see module docstring)."""

    __slots__ = ("_next_order", "_root")

    def __init__(self) -> None:
        self._root = _Level()
        self._next_order = 1

    def add(self, topic: str) -> None:
        level = self._root
        for name in topic.split("/"):
            children = level.children
            child = children.get(name)
            if child is None:
                if children is NO_CHILDREN:
                    children = level.children = {}
                child = children[name] = _Level()
            level = child
        if not level.order:
            level.order = self._next_order
            self._next_order += 1

    def remove(self, topic: str) -> None:
        path: list[tuple[_Level, str]] = []
        level = self._root
        for name in topic.split("/"):
            child = level.children.get(name)
            if child is None:
                return
            path.append((level, name))
            level = child
        level.order = 0
        for parent, name in reversed(path):  # prune the levels nothing ends under any more
            child = parent.children[name]
            if child.order or child.children:
                break
            del parent.children[name]

    def match(self, topic_filter: str) -> list[str]:
        """The topics `topic_filter` matches (`protocol.topic_matches`), oldest first."""
        found: list[tuple[int, str]] = []
        filter_levels = topic_filter.split("/")
        last = len(filter_levels)
        # (level, index of the filter level to match below it, the topic so far)
        stack: list[tuple[_Level, int, str]] = [(self._root, 0, "")]
        while stack:
            level, index, prefix = stack.pop()
            if index == last:
                if level.order:
                    found.append((level.order, prefix))
                continue
            wanted = filter_levels[index]
            if wanted == "#":
                if level.order and index:  # "a/#" matches "a" itself
                    found.append((level.order, prefix))
                self._collect(level, prefix, index == 0, found)
            elif wanted == "+":
                for name, child in level.children.items():
                    if index == 0 and name.startswith("$"):
                        continue  # wildcards do not match $ topics [MQTT-4.7.2-1]
                    stack.append((child, index + 1, name if index == 0 else f"{prefix}/{name}"))
            else:
                exact = level.children.get(wanted)
                if exact is not None:
                    topic = wanted if index == 0 else f"{prefix}/{wanted}"
                    stack.append((exact, index + 1, topic))
        found.sort()
        return [topic for _, topic in found]

    @staticmethod
    def _collect(level: _Level, prefix: str, at_root: bool, found: list[tuple[int, str]]) -> None:
        """Every topic below `level` (for `#`)."""
        stack: list[tuple[_Level, str, bool]] = [(level, prefix, at_root)]
        while stack:
            node, path, root = stack.pop()
            for name, child in node.children.items():
                if root and name.startswith("$"):
                    continue
                topic = name if root else f"{path}/{name}"
                if child.order:
                    found.append((child.order, topic))
                if child.children:
                    stack.append((child, topic, False))


class RetainedMessages:
    """Sub point -> topic -> the retained `Message` (see module docstring)."""

    __slots__ = (
        "_by_point",
        "_committer",
        "_count",
        "_indexes",
        "_max_bytes",
        "_max_messages",
        "_stats",
        "bytes",
    )

    def __init__(
        self, committer: Committer, stats: BrokerStats, max_messages: int = 0, max_bytes: int = 0
    ) -> None:
        """`max_messages`, `max_bytes`: the quotas (0: none)."""
        self._committer = committer
        self._stats = stats
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._by_point: dict[str, dict[str, Message]] = {}
        self._indexes: dict[str, TopicIndex] = {}
        self._count = 0  # outside $SYS/
        self.bytes = 0  # topic and payload bytes outside $SYS/

    def _point(self, sub_point: str) -> dict[str, Message]:
        """The topic -> message map of `sub_point`, made (with its index) when first used."""
        retained = self._by_point.get(sub_point)
        if retained is None:
            retained = self._by_point[sub_point] = {}
            self._indexes[sub_point] = TopicIndex()
        return retained

    def _fits(self, message: Message, old: Message | None) -> str | None:
        """None when retaining `message` in place of `old` (the topic's message, if any)
        stays within the quotas; else which one it passes."""
        if old is None and self._max_messages and self._count >= self._max_messages:
            return f"limits.max_retained_messages ({self._max_messages})"
        grown = self.bytes + message.size - (0 if old is None else old.size)
        if self._max_bytes and grown > self._max_bytes:
            return f"limits.max_retained_bytes ({self._max_bytes})"
        return None

    def _store(self, message: Message, retained: dict[str, Message], old: Message | None) -> None:
        """Keep `message` in its point's map `retained`, in place of `old`."""
        if old is None:
            self._indexes[message.sub_point].add(message.topic)
        retained[message.topic] = message
        if not message.topic.startswith(SYS_PREFIX):
            if old is None:
                self._count += 1
            else:
                self.bytes -= old.size
            self.bytes += message.size

    def _drop(self, sub_point: str, topic: str) -> bool:
        retained = self._by_point.get(sub_point)
        old = None if retained is None else retained.pop(topic, None)
        if old is None:
            return False
        self._indexes[sub_point].remove(topic)
        if not topic.startswith(SYS_PREFIX):
            self._count -= 1
            self.bytes -= old.size
        return True

    def keep(self, message: Message) -> None:
        """A publication with RETAIN: it replaces the topic's message, or removes it when
        its payload is empty."""
        pending = self._committer.pending
        durable = not message.topic.startswith(SYS_PREFIX)
        if not message.payload:
            if self._drop(message.sub_point, message.topic) and durable:
                pending.delete_retained(message.sub_point, message.topic)
            return
        retained = self._point(message.sub_point)
        old = retained.get(message.topic)
        if durable:
            beyond = self._fits(message, old)
            if beyond is not None:
                stats = self._stats
                stats.retained_refused += 1
                if stats.retained_refused % 1000 == 1:
                    log.warning(
                        "publication on %.100r not retained: beyond %s (%d refused so far)",
                        message.topic,
                        beyond,
                        stats.retained_refused,
                    )
                return
        self._store(message, retained, old)
        if durable:  # WriteBatch.put_retained_row, inlined: once per retained publication
            pending.ops.append((Op.PUT_RETAINED_ROW, (_retained_row(message),)))

    def restore(self, message: Message) -> str | None:
        """A retained message loaded from the store (nothing to write). Beyond the quotas
        it is not kept: returns which quota, for restore.py to quarantine it."""
        retained = self._point(message.sub_point)
        old = retained.get(message.topic)
        beyond = self._fits(message, old)
        if beyond is None:
            self._store(message, retained, old)
        return beyond

    def delete(self, sub_point: str, topic: str) -> bool:
        """Remove one retained message (MQ DeletePub); False when there was none."""
        if not self._drop(sub_point, topic):
            return False
        self._committer.pending.delete_retained(sub_point, topic)
        self._committer.schedule()
        return True

    def get(self, sub_point: str, topic: str) -> Message | None:
        """The retained message of one topic, if any."""
        retained = self._by_point.get(sub_point)
        return None if retained is None else retained.get(topic)

    def matching(self, sub_point: str, topic_filter: str) -> list[Message]:
        """The retained messages of `sub_point` on the topics `topic_filter` matches."""
        retained = self._by_point.get(sub_point)
        if not retained:
            return []
        if "+" in topic_filter or "#" in topic_filter:
            return [retained[t] for t in self._indexes[sub_point].match(topic_filter)]
        exact = retained.get(topic_filter)
        return [exact] if exact is not None else []

    def expire(self, now: float) -> int:
        """Drop the messages whose MQ expiry (UTC seconds) has passed; returns how many."""
        count = 0
        pending = self._committer.pending
        for sub_point, retained in self._by_point.items():
            doomed = [
                topic
                for topic, message in retained.items()
                if message.expiry_at and message.expiry_at <= now
            ]
            for topic in doomed:
                self._drop(sub_point, topic)
                pending.delete_retained(sub_point, topic)
            count += len(doomed)
        if count:
            self._committer.schedule()
        return count

    def count(self) -> int:
        """Retained messages outside `$SYS/` (what `$SYS/broker/retained messages/count` says)."""
        return self._count


def _retained_row(message: Message) -> RetainedRow:
    """The store's row of a retained publication (`RetainedRow`). Its `data` (JSON) says
    who published it, when it expires (restore.py reads both back) and, when it was made
    at another broker, which one; an expiry that is not a finite number is never (null)."""
    expiry = message.expiry_at
    data = (
        f'{{"client_id":{_json_text(message.client_id)},'
        f'"user_id":{_json_text(message.user_id)},'
        f'"expiry_at":{repr(expiry) if expiry - expiry == 0.0 else "null"}'
    )
    if message.origin:
        data += f',"origin":{_json_text(message.origin)}'
    properties = message.properties
    return (
        message.sub_point,
        message.topic,
        bytearray(message.payload),
        message.qos,
        message.ts_us,
        data + "}",
        bytearray(properties) if properties else 0,
        1 if message.local_only else 0,
    )
