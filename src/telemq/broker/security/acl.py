"""ACL rules: the actions a client asks for, the `[[acl]]` entries, and how they decide.

Theory of operation
-------------------
A client asks to do an `Action` on a topic: publish to a topic name, subscribe to a filter,
run an MQ command, use another user's queue, read the journal. The `[[acl]]` entries
(`AclRule`) are checked once, when the `Authorizer` (auth.py) is built, into `Rule`s
(`compile_rule`); `evaluate` then answers each request from them alone:

- With no rules every topic action is allowed (an open broker, the default); with rules the
  first matching rule decides and the default is deny.
- A subscription is a promise to deliver every topic its filter can match, so a filter is
  allowed only when one allow rule *covers* it (`filter_covers`) and no earlier deny rule
  *overlaps* it (`filters_overlap`): wildcards can never widen what the rules grant. Both
  run in time linear in the number of levels, whatever the wildcards.
- `%u` / `%c` in a rule stand for the user name / client id. A value that could change the
  shape of the pattern (`/`, `+`, `#`, U+0000, empty, or a leading `$` reaching the start of
  the pattern) never widens an allow rule and makes a deny rule deny everything: identities
  chosen by clients are not a way around the rules.
- The MQ command topics need the `command` permission: a publish check on them is a command
  check, so `publish` rules (even `#`) never grant commands.
- A queue (an MQTT session) belongs to the user who created it. Using another user's queue
  is the `queue` action, checked against the queue name; unlike the topic actions it is
  never allowed by default, even on a broker without rules.

Everything here is immutable once built, with no I/O, and safe from any thread.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ...protocol.topics import topic_filter_error, topic_matches, topic_name_error
from .users import ANONYMOUS, ANY_USER, AuthError, require_keys

__all__ = [
    "COMMAND_TOPICS",
    "AclRule",
    "Action",
    "Rule",
    "compile_rule",
    "evaluate",
    "filter_covers",
    "filters_overlap",
    "unsafe_value",
]

# Topics of the MQ command model (design §6); putting to them needs `command` permission.
COMMAND_TOPICS: Final = frozenset({"SYSTEM.BROKER.CONTROL.QUEUE", "SYSTEM.BROKER.DEFAULT.STREAM"})

_PLACEHOLDER: Final = re.compile(r"%([uc])")
_UNSAFE_CHARS: Final = frozenset("/+#\x00")


class Action(enum.StrEnum):
    """What a client asks to do; the topic of the request is named per action below."""

    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    COMMAND = "command"
    # Register subscriptions for (or put messages on) a queue another user owns; the
    # "topic" of the check is the queue name. Granted only by an explicit allow rule.
    QUEUE = "queue"
    # Read the journal over HTTP (docs/pipeline.md); the "topic" is a filter, checked as a
    # subscription is: a rule must cover every topic the reader asks for.
    JOURNAL = "journal"


RULE_ACTIONS: Final[Mapping[str, frozenset[Action]]] = {
    "publish": frozenset({Action.PUBLISH}),
    "subscribe": frozenset({Action.SUBSCRIBE}),
    "command": frozenset({Action.COMMAND}),
    "queue": frozenset({Action.QUEUE}),
    "journal": frozenset({Action.JOURNAL}),
    "all": frozenset(Action),
}


@dataclass(slots=True)
class AclRule:
    """One `[[acl]]` entry: `allow` (or deny) `action` on topics matching `topic` for `user`."""

    action: str  # "publish" | "subscribe" | "command" | "queue" | "journal" | "all"
    topic: str  # an MQTT topic filter; may contain %u (user name) and %c (client id)
    allow: bool = True
    user: str = ANY_USER  # "*", "anonymous" or a user name

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "acl[0]") -> AclRule:
        """Build from a TOML table; unknown or missing keys raise `AuthError` naming them."""
        require_keys(data, where, ("action", "topic"), ("allow", "user"))
        for key in ("action", "topic", "user"):
            if key in data and not isinstance(data[key], str):
                raise AuthError(f"{where}.{key}: expected a string, got {data[key]!r}")
        if "allow" in data and not isinstance(data["allow"], bool):
            raise AuthError(f"{where}.allow: expected true or false, got {data['allow']!r}")
        return cls(
            action=data["action"],
            topic=data["topic"],
            allow=data.get("allow", True),
            user=data.get("user", ANY_USER),
        )


# ---------------------------------------------------------------------------
# Topic filter algebra


def filter_covers(pattern: str, requested: str) -> bool:
    """True when every topic name `requested` can match is also matched by `pattern`.

    Both are valid MQTT topic filters. Linear in their number of levels. Follows
    `topic_matches`, including its `$` rule: a pattern starting with a wildcard covers no
    filter whose topics start with `$` (`#` does not cover `$SYS/#`).
    """
    return _covers_levels(pattern.split("/"), requested.split("/"))


def filters_overlap(first: str, second: str) -> bool:
    """True when some topic name is matched by both (valid) filters. Linear in levels."""
    return _overlap_levels(first.split("/"), second.split("/"))


def _is_wild(level: str) -> bool:
    return level == "+" or level == "#"


def _covers_levels(pattern: Sequence[str], requested: Sequence[str]) -> bool:
    """`filter_covers` on level lists: one pass, each level read a bounded number of times."""
    pattern_len = len(pattern)
    requested_len = len(requested)
    first_pattern = pattern[0]
    first_requested = requested[0]
    # Topics of `requested` start with `$` exactly when its first level is a literal `$...`;
    # a pattern starting with a wildcard matches none of them.
    if _is_wild(first_pattern) and first_requested.startswith("$"):
        return False
    index = 0
    while True:
        p = pattern[index] if index < pattern_len else None
        r = requested[index] if index < requested_len else None
        if p == "#":
            # Every topic of `requested` has at least `index` levels that matched so far.
            return True
        if r is None:
            # `requested` names topics of exactly `index` levels.
            return p is None
        if r == "#":
            # `requested` also names its parent (exactly `index` levels), which only a `#`
            # here could match. There is no parent at index 0, nor at index 1 after an empty
            # first level (the empty string is not a topic name): then `+/#` here is enough.
            if index != 0 and not (index == 1 and requested[0] == ""):
                return False
            return p == "+" and pattern_len == index + 2 and pattern[index + 1] == "#"
        if p is None:
            return False
        if p != "+" and p != r:
            # A literal pattern level covers only the identical literal level.
            return False
        index += 1


def _overlap_levels(first: Sequence[str], second: Sequence[str]) -> bool:
    """`filters_overlap` on level lists: one pass over the shorter prefix."""
    first_len = len(first)
    second_len = len(second)
    a0 = first[0]
    b0 = second[0]
    if (_is_wild(a0) and b0.startswith("$")) or (_is_wild(b0) and a0.startswith("$")):
        return False
    index = 0
    while True:
        a = first[index] if index < first_len else None
        b = second[index] if index < second_len else None
        if a == "#" or b == "#":
            # The other side can be completed into a topic (with at least `index` levels,
            # a `#` also matching its parent), and `#` matches it; unless the only such
            # topic is the empty one, which is not a topic name (`+` and `/#`).
            return not (
                index == 1 and (a is None or b is None) and (first[0] == "" or second[0] == "")
            )
        if a is None or b is None:
            return a is None and b is None
        if a != "+" and b != "+" and a != b:
            return False
        index += 1


# ---------------------------------------------------------------------------
# Rules, checked once and evaluated per request


class _Everything:
    """Marker: a deny rule whose placeholder could not be substituted safely matches all."""


_EVERYTHING: Final = _Everything()


@dataclass(frozen=True, slots=True)
class Rule:
    """An `AclRule` as checked (`compile_rule`): its actions resolved, its placeholders
    noted, and its place in `acl` kept for diagnostics (`Authorizer.deciding_rule`)."""

    index: int
    actions: frozenset[Action]
    user: str
    allow: bool
    pattern: str
    uses_user: bool
    uses_client: bool


def unsafe_value(value: str) -> bool:
    """A `%u`/`%c` value that could change the shape of a pattern if substituted."""
    return not value or not _UNSAFE_CHARS.isdisjoint(value)


def compile_rule(
    index: int,
    rule: AclRule,
    hashes: Mapping[str, object],
    warnings: list[str],
    certificate_names: str = "none",
) -> Rule:
    """Check `acl[index]` against the configured users (`hashes`, by name), appending to
    `warnings` what is legal but probably not what was meant; `AuthError` when invalid."""
    where = f"acl[{index}]"
    if not isinstance(rule, AclRule):
        raise AuthError(f"{where}: expected an ACL rule, got {type(rule).__name__}")
    actions = RULE_ACTIONS.get(rule.action) if isinstance(rule.action, str) else None
    if actions is None:
        raise AuthError(
            f"{where}: action {rule.action!r} is not publish, subscribe, command, queue, "
            "journal or all"
        )
    if not isinstance(rule.topic, str):
        raise AuthError(f"{where}: topic must be a string, got {rule.topic!r}")
    problem = topic_filter_error(rule.topic)
    if problem is not None:
        raise AuthError(f"{where}: topic is not a valid topic filter: {problem}")
    if not isinstance(rule.allow, bool):
        raise AuthError(f"{where}: allow must be true or false, got {rule.allow!r}")
    if not isinstance(rule.user, str) or not rule.user or "\x00" in rule.user:
        raise AuthError(f"{where}: user must be '*', 'anonymous' or a user name")
    uses_user = "%u" in rule.topic
    uses_client = "%c" in rule.topic
    named = rule.user not in (ANY_USER, ANONYMOUS)
    if named and hashes and rule.user not in hashes and certificate_names == "none":
        raise AuthError(f"{where}: user {rule.user!r} is not one of the configured [[users]]")
    if not hashes and (named or uses_user) and certificate_names != "all":
        warnings.append(
            f"{where}: no [[users]] are configured, so user names are not authenticated "
            "and any client can claim the name this rule relies on"
        )
    if rule.user == ANONYMOUS and uses_user:
        warnings.append(f"{where}: a %u rule for anonymous clients never matches")
    return Rule(
        index=index,
        actions=actions,
        user=rule.user,
        allow=rule.allow,
        pattern=rule.topic,
        uses_user=uses_user,
        uses_client=uses_client,
    )


def evaluate(
    rules: Sequence[Rule], action: Action, topic: str, user: str | None, client_id: str
) -> tuple[bool, int | None]:
    """May this client do `action` on `topic`, and the index of the rule that decided it
    (None: no rule did). See `Authorizer.allowed` for what `topic` is per action."""
    action = Action(action)
    reads = action is Action.SUBSCRIBE or action is Action.JOURNAL
    if reads:
        if topic_filter_error(topic) is not None:
            return False, None
    elif topic_name_error(topic) is not None:
        return False, None
    if action is Action.PUBLISH and topic in COMMAND_TOPICS:
        action = Action.COMMAND
    if not rules:
        # An open broker allows every topic, but another user's queue needs a grant.
        return action is not Action.QUEUE, None
    for rule in rules:
        if action not in rule.actions or not _user_matches(rule.user, user):
            continue
        pattern = _resolve(rule, user, client_id)
        if pattern is None:
            continue
        if isinstance(pattern, _Everything):
            return False, rule.index
        if reads:
            # Allow: the rule must cover every topic the filter can match.
            # Deny: any topic in common is enough to refuse the filter.
            decides = (
                filter_covers(pattern, topic) if rule.allow else filters_overlap(pattern, topic)
            )
        else:
            decides = topic_matches(pattern, topic)
        if decides:
            return rule.allow, rule.index
    return False, None


def _user_matches(rule_user: str, user: str | None) -> bool:
    """Does a rule for `rule_user` (`*`, `anonymous` or a name) apply to this client?"""
    if rule_user == ANY_USER:
        return True
    if rule_user == ANONYMOUS:
        return user is None
    return user == rule_user


def _resolve(rule: Rule, user: str | None, client_id: str) -> str | _Everything | None:
    """The rule's pattern for this client; None: the rule does not apply.

    Substitution is one pass, so a user name containing `%c` is not expanded again.
    """
    if not (rule.uses_user or rule.uses_client):
        return rule.pattern
    if rule.uses_user and user is None:
        return None
    unsafe = (rule.uses_user and unsafe_value(user or "")) or (
        rule.uses_client and unsafe_value(client_id)
    )
    if not unsafe:
        values = {"u": user or "", "c": client_id}
        pattern = _PLACEHOLDER.sub(lambda match: values[match.group(1)], rule.pattern)
        # A substituted value must not turn the rule into a `$` rule it did not name.
        if rule.pattern.startswith("$") or not pattern.startswith("$"):
            return pattern
    return None if rule.allow else _EVERYTHING
