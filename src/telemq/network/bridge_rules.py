"""Bridge topic rules, in Mosquitto's syntax: which topics cross a bridge, which way, how renamed.

Theory of operation
-------------------
A bridge to a broker that is not telemq has no proxy subscriptions: its configuration says
what crosses, one rule per line, as in `mosquitto.conf`:

    topic PATTERN [[[out | in | both] QOS] LOCAL_PREFIX REMOTE_PREFIX]

The direction defaults to `out` and the QoS to 0. A topic is `LOCAL_PREFIX + T` here and
`REMOTE_PREFIX + T` there, for every `T` that PATTERN matches. `""` stands for an empty
prefix (or pattern). An empty pattern needs both prefixes: the prefixes are then the whole
topic names on each side, as Mosquitto allows. Rules are parsed once, at configuration
time, so a mistake stops the broker with a line that names the rule and the problem.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

DIRECTIONS = ("out", "in", "both")


class BridgeRuleError(ValueError):
    """A `topics` line that is not a valid rule; the message says why."""


@dataclass(frozen=True, slots=True)
class BridgeRule:
    pattern: str
    direction: str = "out"  # "out": local to remote; "in": remote to local; "both"
    qos: int = 0
    local_prefix: str = ""
    remote_prefix: str = ""

    @property
    def outgoing(self) -> bool:
        return self.direction in ("out", "both")

    @property
    def incoming(self) -> bool:
        return self.direction in ("in", "both")

    @property
    def local_filter(self) -> str:
        """What the bridge subscribes to here (for `out`)."""
        return self.local_prefix + self.pattern

    @property
    def remote_filter(self) -> str:
        """What the bridge subscribes to on the remote broker (for `in`)."""
        return self.remote_prefix + self.pattern

    def to_remote(self, local_topic: str) -> str | None:
        """The remote name of a local topic this rule sends; None if the prefix differs."""
        if not local_topic.startswith(self.local_prefix):
            return None
        return self.remote_prefix + local_topic[len(self.local_prefix) :]

    def to_local(self, remote_topic: str) -> str | None:
        """The local name of a remote topic this rule receives; None if the prefix differs."""
        if not remote_topic.startswith(self.remote_prefix):
            return None
        return self.local_prefix + remote_topic[len(self.remote_prefix) :]


def parse_rule(line: str) -> BridgeRule:
    """One rule (without the leading `topic` keyword, which is accepted too)."""
    try:
        words = shlex.split(line)
    except ValueError as error:  # an unclosed quote
        raise BridgeRuleError(f"{line!r}: {error}") from None
    if words and words[0] == "topic":
        words = words[1:]
    if not words:
        raise BridgeRuleError(f"{line!r}: a rule needs at least a topic pattern")
    if len(words) > 5:
        raise BridgeRuleError(
            f"{line!r}: too many words (PATTERN [[[out|in|both] QOS] LOCAL_PREFIX REMOTE_PREFIX])"
        )
    if len(words) == 4:
        raise BridgeRuleError(f"{line!r}: a local prefix needs a remote prefix after it")
    pattern = words[0]
    direction = words[1] if len(words) > 1 else "out"
    if direction not in DIRECTIONS:
        raise BridgeRuleError(f"{line!r}: direction must be in, out or both, not {direction!r}")
    qos = 0
    if len(words) > 2:
        if words[2] not in ("0", "1", "2"):
            raise BridgeRuleError(f"{line!r}: qos {words[2]} is not 0, 1 or 2")
        qos = int(words[2])
    local_prefix, remote_prefix = (words[3], words[4]) if len(words) == 5 else ("", "")
    if not pattern and not (local_prefix and remote_prefix):
        raise BridgeRuleError(f"{line!r}: an empty pattern needs both prefixes")
    for name, prefix in (("local", local_prefix), ("remote", remote_prefix)):
        if "+" in prefix or "#" in prefix:
            raise BridgeRuleError(f"{line!r}: the {name} prefix may not contain + or #")
    _check_filter(line, local_prefix + pattern)
    _check_filter(line, remote_prefix + pattern)
    return BridgeRule(pattern, direction, qos, local_prefix, remote_prefix)


def _check_filter(line: str, topic_filter: str) -> None:
    """The filters a rule subscribes with must be valid MQTT topic filters."""
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if ("#" in level and (level != "#" or index != len(levels) - 1)) or (
            "+" in level and level != "+"
        ):
            raise BridgeRuleError(f"{line!r}: {topic_filter!r} is not a valid topic filter")
