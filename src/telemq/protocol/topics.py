"""Topic names and topic filters: validation and wildcard matching (MQTT 3.1.1 §4.7).

Rules: names and filters are at least one character, at most 65,535 UTF-8 bytes,
without U+0000 or a control character (U+0001..U+001F, U+007F..U+009F: MQTT 3.1.1 §1.5.3
lets a server close the connection for them, and Mosquitto does); names carry no
wildcard; in filters `#` stands alone as the last level and `+` fills a whole level; levels
may be empty (`a//b`, `/a`).
Filters starting with a wildcard do not match names starting with `$`
[MQTT-4.7.2-1]. `sport/#` also matches `sport`.

`TopicLimits` adds a server's own bounds on top (levels and bytes, as Mosquitto's 200-level
hierarchy limit): what a topic costs the broker grows with its levels, so a client must not
choose it freely. Both checks cost one length test for the topics real clients use.
"""

from __future__ import annotations

import re

MAX_TOPIC_BYTES = 65535
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f]")


def forbidden_character(text: str) -> str | None:
    """'U+00XX' for the first U+0000 or control character in `text`, or None.

    `str.isprintable` answers first: it is true of almost every real string, at C speed,
    and false of every character looked for (and of some allowed ones: U+00A0, U+2028).
    """
    if text.isprintable():
        return None
    found = _FORBIDDEN.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def topic_name_error(topic: str) -> str | None:
    """Why `topic` is not a valid PUBLISH topic name, or None when it is."""
    if not topic:
        return "empty topic name"
    forbidden = forbidden_character(topic)
    if forbidden is not None:
        return f"{forbidden} in topic name"
    if "+" in topic or "#" in topic:
        return f"wildcard in topic name {topic!r}"
    if len(topic) > MAX_TOPIC_BYTES // 4 and len(topic.encode("utf-8")) > MAX_TOPIC_BYTES:
        return "topic name longer than 65,535 bytes"
    return None


def topic_filter_error(topic_filter: str) -> str | None:
    """Why `topic_filter` is not a valid subscription filter, or None when it is."""
    if not topic_filter:
        return "empty topic filter"
    forbidden = forbidden_character(topic_filter)
    if forbidden is not None:
        return f"{forbidden} in topic filter"
    if (
        len(topic_filter) > MAX_TOPIC_BYTES // 4
        and len(topic_filter.encode("utf-8")) > MAX_TOPIC_BYTES
    ):
        return "topic filter longer than 65,535 bytes"
    if "+" not in topic_filter and "#" not in topic_filter:
        return None
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != last):
            return f"'#' must be a whole last level in {topic_filter!r}"
        if "+" in level and level != "+":
            return f"'+' must fill a whole level in {topic_filter!r}"
    return None


DEFAULT_MAX_TOPIC_LEVELS = 200


class TopicLimits:
    """A broker's bounds on topic names and filters (levels and UTF-8 bytes)."""

    __slots__ = ("max_bytes", "max_levels")

    def __init__(
        self, max_levels: int = DEFAULT_MAX_TOPIC_LEVELS, max_bytes: int = MAX_TOPIC_BYTES
    ) -> None:
        self.max_levels = max_levels
        self.max_bytes = max_bytes

    def size_error(self, topic: str) -> str | None:
        """Why `topic` (a valid name or filter) is beyond the limits, or None."""
        max_levels = self.max_levels
        # n characters hold at most n + 1 levels and 4n bytes: the counts are rarely needed.
        if len(topic) >= max_levels and topic.count("/") >= max_levels:
            return f"topic has {topic.count('/') + 1} levels (limit {max_levels})"
        max_bytes = self.max_bytes
        if len(topic) * 4 > max_bytes and len(topic.encode("utf-8")) > max_bytes:
            return f"topic is {len(topic.encode('utf-8')):,} bytes long (limit {max_bytes:,})"
        return None

    def name_error(self, topic: str) -> str | None:
        """`topic_name_error`, then the limits."""
        return topic_name_error(topic) or self.size_error(topic)

    def filter_error(self, topic_filter: str) -> str | None:
        """`topic_filter_error`, then the limits."""
        return topic_filter_error(topic_filter) or self.size_error(topic_filter)


SHARE_PREFIX = "$share/"


def shared_subscription(topic_filter: str) -> tuple[str, str] | None:
    """(share name, topic filter) of a shared subscription's `$share/{name}/{filter}`
    (MQTT 5.0 §4.8.2), or None for any other filter. `ValueError` when it starts like one
    but is not: an empty name, a name with a wildcard, no filter."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return None
    name, slash, rest = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not name or "+" in name or "#" in name:
        raise ValueError(f"invalid share name {name!r} in {topic_filter!r}")
    if not slash or not rest:
        raise ValueError(f"no topic filter after the share name in {topic_filter!r}")
    return name, rest


def is_wildcard_filter(topic_filter: str) -> bool:
    return "+" in topic_filter or "#" in topic_filter


def topic_matches(topic_filter: str, topic: str) -> bool:
    """True when the (valid) filter matches the (valid) topic name."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    if "+" not in topic_filter and "#" not in topic_filter:
        return topic_filter == topic
    filter_levels = topic_filter.split("/")
    topic_levels = topic.split("/")
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True
        if index >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[index]:
            return False
    return len(topic_levels) == len(filter_levels)
