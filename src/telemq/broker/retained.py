"""Retained messages: the last publication kept per topic and subscription point.

Theory of operation
-------------------
`RetainedMessages` is the only code that changes retained state. A publication with RETAIN
replaces the topic's message, one with an empty payload removes it (MQTT 3.1.1 §3.3.1.3);
MQ's DeletePub removes one by name and an MQ expiry removes it when due. Every change goes
into the committer's pending batch in the same call, so memory and store never differ after
a commit. `$SYS/` topics are kept in memory only: they are recomputed at every start.
"""

from __future__ import annotations

from ..protocol import topic_matches
from ..store import RetainedRecord
from .committer import Committer
from .session import Message

SYS_PREFIX = "$SYS/"


class RetainedMessages:
    """Sub point -> topic -> the retained `Message` (see module docstring)."""

    __slots__ = ("_by_point", "_committer")

    def __init__(self, committer: Committer) -> None:
        self._committer = committer
        self._by_point: dict[str, dict[str, Message]] = {}

    def keep(self, message: Message) -> None:
        """A publication with RETAIN: it replaces the topic's message, or removes it when
        its payload is empty."""
        pending = self._committer.pending
        retained = self._by_point.get(message.sub_point)
        if retained is None:
            retained = self._by_point[message.sub_point] = {}
        durable = not message.topic.startswith(SYS_PREFIX)
        if not message.payload:
            if retained.pop(message.topic, None) is not None and durable:
                pending.delete_retained(message.sub_point, message.topic)
            return
        retained[message.topic] = message
        if durable:
            pending.put_retained(
                RetainedRecord(
                    message.sub_point,
                    message.topic,
                    message.payload,
                    message.qos,
                    message.ts_us,
                    {
                        "client_id": message.client_id,
                        "user_id": message.user_id,
                        "expiry_at": message.expiry_at,
                    },
                )
            )

    def restore(self, message: Message) -> None:
        """A retained message loaded from the store (nothing to write)."""
        self._by_point.setdefault(message.sub_point, {})[message.topic] = message

    def delete(self, sub_point: str, topic: str) -> bool:
        """Remove one retained message (MQ DeletePub); False when there was none."""
        if self._by_point.get(sub_point, {}).pop(topic, None) is None:
            return False
        self._committer.pending.delete_retained(sub_point, topic)
        self._committer.schedule()
        return True

    def matching(self, sub_point: str, topic_filter: str) -> list[Message]:
        """The retained messages of `sub_point` on the topics `topic_filter` matches."""
        retained = self._by_point.get(sub_point)
        if not retained:
            return []
        if "+" in topic_filter or "#" in topic_filter:
            return [m for t, m in retained.items() if topic_matches(topic_filter, t)]
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
                del retained[topic]
                pending.delete_retained(sub_point, topic)
            count += len(doomed)
        if count:
            self._committer.schedule()
        return count

    def count(self) -> int:
        """Retained messages outside `$SYS/` (what `$SYS/broker/retained messages/count` says)."""
        return sum(
            1
            for point in self._by_point.values()
            for topic in point
            if not topic.startswith(SYS_PREFIX)
        )
