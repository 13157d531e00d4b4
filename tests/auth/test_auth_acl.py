"""ACL evaluation: first match, default deny, placeholders, `$` topics, commands, SUBSCRIBE."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemq.broker.security.acl import COMMAND_TOPICS, AclRule, Action
from telemq.broker.security.auth import Authorizer
from telemq.broker.security.passwords import hash_password
from telemq.broker.security.users import AuthError, UserConfig
from telemq.protocol.topics import topic_filter_error, topic_matches, topic_name_error

PUB, SUB, CMD = Action.PUBLISH, Action.SUBSCRIBE, Action.COMMAND
CONTROL = "SYSTEM.BROKER.CONTROL.QUEUE"
STREAM = "SYSTEM.BROKER.DEFAULT.STREAM"

_HASH = hash_password("pw", iterations=1_000)


def users(*names: str) -> list[UserConfig]:
    return [UserConfig(name, _HASH) for name in names]


def make(*rules: AclRule, names: Sequence[str] = ("alice", "bob")) -> Authorizer:
    return Authorizer(users(*names), rules)


def pub(authorizer: Authorizer, topic: str, user: str | None = "alice", cid: str = "c1") -> bool:
    return authorizer.allowed(PUB, topic, user=user, client_id=cid)


def sub(authorizer: Authorizer, topic: str, user: str | None = "alice", cid: str = "c1") -> bool:
    return authorizer.allowed(SUB, topic, user=user, client_id=cid)


def cmd(authorizer: Authorizer, topic: str, user: str | None = "alice", cid: str = "c1") -> bool:
    return authorizer.allowed(CMD, topic, user=user, client_id=cid)


# ---------------------------------------------------------------------------
# Basics


def test_action_values() -> None:
    assert [a.value for a in Action] == ["publish", "subscribe", "command", "queue", "journal"]
    assert Action("publish") is PUB


def test_another_users_queue_needs_an_explicit_grant() -> None:
    """The `queue` action is never open by default, unlike the topic actions."""
    open_broker = Authorizer()
    assert not open_broker.allowed(Action.QUEUE, "q1", user="bob", client_id="b")
    rules = [
        AclRule(action="queue", topic="shared/#", user="bob"),
        AclRule(action="queue", topic="%u-inbox"),
    ]
    authorizer = Authorizer(acl=rules)
    assert authorizer.allowed(Action.QUEUE, "shared/q", user="bob", client_id="b")
    assert not authorizer.allowed(Action.QUEUE, "shared/q", user="carol", client_id="c")
    assert authorizer.allowed(Action.QUEUE, "carol-inbox", user="carol", client_id="c")
    assert not authorizer.allowed(Action.QUEUE, "bob-inbox", user="carol", client_id="c")
    # A queue grant grants no topic.
    assert not authorizer.allowed(Action.SUBSCRIBE, "shared/q", user="bob", client_id="b")


def test_admin_users() -> None:
    user = UserConfig.from_mapping(
        {"name": "root", "password_hash": hash_password("pw", iterations=1000), "admin": True}
    )
    authorizer = Authorizer(users=[user, UserConfig("eve", hash_password("pw", iterations=1000))])
    assert authorizer.is_admin("root")
    assert not authorizer.is_admin("eve")
    assert not authorizer.is_admin(None)
    with pytest.raises(AuthError, match=r"users\[0\]\.admin: expected true or false"):
        UserConfig.from_mapping({"name": "x", "password_hash": "h", "admin": "yes"})


def test_no_rules_allows_everything() -> None:
    authorizer = Authorizer()
    assert authorizer.open
    for user in (None, "x"):
        assert pub(authorizer, "a/b", user)
        assert pub(authorizer, "$SYS/broker/uptime", user)
        assert sub(authorizer, "#", user)
        assert sub(authorizer, "$SYS/#", user)
        assert cmd(authorizer, CONTROL, user)
        assert pub(authorizer, STREAM, user)


def test_invalid_topics_are_refused_even_when_open() -> None:
    authorizer = Authorizer()
    assert not pub(authorizer, "a/#")
    assert not pub(authorizer, "")
    assert not pub(authorizer, "a\x00b")
    assert not sub(authorizer, "a/#/b")
    assert not sub(authorizer, "a+")
    assert not cmd(authorizer, "a/+")


def test_rules_default_deny() -> None:
    authorizer = make(AclRule("publish", "a/#"))
    assert not authorizer.open
    assert pub(authorizer, "a/b")
    assert not pub(authorizer, "b")
    assert not sub(authorizer, "a/b")  # no subscribe rule at all
    assert not cmd(authorizer, CONTROL)


def test_first_match_decides() -> None:
    authorizer = make(
        AclRule("publish", "a/secret/#", allow=False),
        AclRule("publish", "a/#"),
        AclRule("publish", "a/secret/ok"),  # never reached: the deny above matches first
    )
    assert pub(authorizer, "a/x")
    assert not pub(authorizer, "a/secret")
    assert not pub(authorizer, "a/secret/ok")
    assert authorizer.deciding_rule(PUB, "a/secret/ok", user="alice", client_id="c") == 0
    assert authorizer.deciding_rule(PUB, "a/x", user="alice", client_id="c") == 1
    assert authorizer.deciding_rule(PUB, "zzz", user="alice", client_id="c") is None


def test_allow_before_deny_wins() -> None:
    authorizer = make(AclRule("publish", "a/ok"), AclRule("publish", "a/#", allow=False))
    assert pub(authorizer, "a/ok")
    assert not pub(authorizer, "a/other")


def test_all_action() -> None:
    authorizer = make(AclRule("all", "x/#", user="alice"))
    assert pub(authorizer, "x/1")
    assert sub(authorizer, "x/+")
    assert cmd(authorizer, "x/1")
    assert not pub(authorizer, "x/1", user="bob")


def test_action_strings_are_accepted() -> None:
    authorizer = make(AclRule("publish", "a"))
    assert authorizer.allowed("publish", "a", user="alice", client_id="c")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Users and anonymous clients


def test_user_selectors() -> None:
    authorizer = Authorizer(
        users("alice", "bob"),
        [
            AclRule("publish", "only/alice", user="alice"),
            AclRule("publish", "only/anon", user="anonymous"),
            AclRule("publish", "everyone"),
        ],
        allow_anonymous=True,
    )
    assert pub(authorizer, "only/alice", "alice")
    assert not pub(authorizer, "only/alice", "bob")
    assert not pub(authorizer, "only/alice", None)
    assert pub(authorizer, "only/anon", None)
    assert not pub(authorizer, "only/anon", "alice")
    for user in ("alice", "bob", None):
        assert pub(authorizer, "everyone", user)


def test_anonymous_rule_does_not_match_user_named_anonymous() -> None:
    # With no users configured, a client may call itself "anonymous"; it is still a name.
    authorizer = Authorizer(acl=[AclRule("publish", "anon/#", user="anonymous")])
    assert pub(authorizer, "anon/x", None)
    assert not pub(authorizer, "anon/x", "anonymous")


def test_deny_for_one_user() -> None:
    authorizer = make(
        AclRule("publish", "#", allow=False, user="bob"),
        AclRule("publish", "#"),
    )
    assert pub(authorizer, "a", "alice")
    assert not pub(authorizer, "a", "bob")


# ---------------------------------------------------------------------------
# Placeholders


def test_user_and_client_substitution() -> None:
    authorizer = make(
        AclRule("publish", "users/%u/#"),
        AclRule("publish", "clients/%c/#"),
        AclRule("subscribe", "users/%u/#"),
        AclRule("publish", "both/%u-%c"),
    )
    assert pub(authorizer, "users/alice/x", "alice")
    assert not pub(authorizer, "users/bob/x", "alice")
    assert pub(authorizer, "clients/c1/x", "alice", "c1")
    assert not pub(authorizer, "clients/c2/x", "alice", "c1")
    assert sub(authorizer, "users/alice/#", "alice")
    assert not sub(authorizer, "users/+/#", "alice")
    assert pub(authorizer, "both/alice-c1", "alice", "c1")
    assert not pub(authorizer, "both/alice-c2", "alice", "c1")


def test_user_placeholder_never_matches_anonymous() -> None:
    authorizer = Authorizer(
        users("alice"),
        [AclRule("publish", "users/%u/#"), AclRule("publish", "open/#")],
        allow_anonymous=True,
    )
    assert not pub(authorizer, "users//x", None)
    assert not pub(authorizer, "users/anonymous/x", None)
    assert not pub(authorizer, "users/%u/x", None)
    assert pub(authorizer, "open/x", None)


def test_user_placeholder_deny_skipped_for_anonymous() -> None:
    authorizer = Authorizer(
        acl=[AclRule("publish", "users/%u/#", allow=False), AclRule("publish", "#")]
    )
    assert pub(authorizer, "users/x/y", None)
    assert not pub(authorizer, "users/x/y", "x")


@pytest.mark.parametrize("name", ["a/#", "#", "+", "a/b", "a+", "x#", "a\x00", ""])
def test_injected_user_names_gain_nothing(name: str) -> None:
    # No users configured: a client picks any user name; it must not widen `%u` rules.
    authorizer = Authorizer(acl=[AclRule("all", "devices/%u/#")])
    for topic in ("devices/a/#/x", "devices/a/b/x", "devices/a/x", "devices/x", "devices//x"):
        if topic_name_error(topic) is None:
            assert not pub(authorizer, topic, name)
    for topic_filter in ("devices/#", "devices/+/#", "devices/a/#", "devices/a/b/#"):
        assert not sub(authorizer, topic_filter, name)


@pytest.mark.parametrize("cid", ["a/#", "#", "+", "a/b", "+x", ""])
def test_injected_client_ids_gain_nothing(cid: str) -> None:
    authorizer = Authorizer(acl=[AclRule("all", "clients/%c/#")])
    assert not pub(authorizer, "clients/a/b", "u", cid)
    assert not sub(authorizer, "clients/#", "u", cid)
    assert not sub(authorizer, "clients/+/#", "u", cid)


def test_dollar_value_cannot_create_a_dollar_rule() -> None:
    authorizer = Authorizer(acl=[AclRule("all", "%u/#"), AclRule("all", "home/%c")])
    assert pub(authorizer, "bob/x", "bob")
    assert not pub(authorizer, "$SYS/broker/uptime", "$SYS")
    assert not sub(authorizer, "$SYS/#", "$SYS")
    # Inside the pattern a leading `$` in the value is an ordinary character.
    assert pub(authorizer, "home/$c", "bob", "$c")


def test_unsafe_value_makes_deny_rule_deny_everything() -> None:
    """Fail closed: a deny rule is never weakened by a value it cannot substitute."""
    authorizer = Authorizer(
        acl=[
            AclRule("publish", "devices/%u/admin", allow=False),
            AclRule("subscribe", "devices/%c/admin", allow=False),
            AclRule("all", "devices/#"),
        ]
    )
    assert pub(authorizer, "devices/a/b/admin", "bob")
    assert not pub(authorizer, "devices/bob/admin", "bob")
    assert not pub(authorizer, "devices/a/b/admin", "a/b")
    assert not pub(authorizer, "devices/x", "a/b")
    assert not pub(authorizer, "devices/x", "")
    assert sub(authorizer, "devices/x/+", "bob", "c")
    assert not sub(authorizer, "devices/x/+", "bob", "c+")
    # Not at the start of the pattern, a leading `$` is an ordinary character.
    assert sub(authorizer, "devices/x/+", "bob", "$c")
    assert not sub(authorizer, "devices/+/admin", "bob", "$c")


def test_substitution_is_single_pass() -> None:
    authorizer = Authorizer(acl=[AclRule("publish", "u/%u")])
    assert pub(authorizer, "u/%c", "%c", "secret")
    assert not pub(authorizer, "u/secret", "%c", "secret")


def test_other_percent_sequences_are_literal() -> None:
    authorizer = make(AclRule("publish", "rate/100%/%x/%%u"))
    assert pub(authorizer, "rate/100%/%x/%alice", "alice")


# ---------------------------------------------------------------------------
# `$` topics


def test_hash_does_not_grant_dollar_topics() -> None:
    authorizer = make(AclRule("all", "#"), AclRule("all", "+/broker/#"))
    assert pub(authorizer, "anything/at/all")
    assert not pub(authorizer, "$SYS/broker/uptime")
    assert not sub(authorizer, "$SYS/#")
    assert not sub(authorizer, "$SYS/broker/uptime")
    assert not pub(authorizer, "$share/g/x")


def test_dollar_topics_need_explicit_rules() -> None:
    authorizer = make(AclRule("subscribe", "$SYS/#", user="alice"), AclRule("all", "#"))
    assert sub(authorizer, "$SYS/#", "alice")
    assert sub(authorizer, "$SYS/broker/+", "alice")
    assert not sub(authorizer, "$SYS/#", "bob")
    assert not pub(authorizer, "$SYS/broker/uptime", "alice")


def test_hash_deny_does_not_reach_dollar_topics() -> None:
    # Documented consequence of the `$` rule: to deny `$SYS`, name it.
    authorizer = make(
        AclRule("subscribe", "#", allow=False, user="bob"),
        AclRule("subscribe", "$SYS/#"),
    )
    assert sub(authorizer, "$SYS/#", "bob")


# ---------------------------------------------------------------------------
# Commands


def test_publish_permission_is_not_command_permission() -> None:
    authorizer = make(AclRule("publish", "#"), AclRule("publish", CONTROL))
    assert pub(authorizer, "a/b")
    for topic in COMMAND_TOPICS:
        assert not cmd(authorizer, topic)
        # A publish check on a command topic is a command check: no bypass by wiring.
        assert not pub(authorizer, topic)


def test_command_permission_is_not_publish_permission() -> None:
    authorizer = make(AclRule("command", "#"))
    assert cmd(authorizer, CONTROL)
    assert cmd(authorizer, STREAM)
    assert pub(authorizer, CONTROL)  # putting a command is the command permission
    assert not pub(authorizer, "a/b")
    assert not sub(authorizer, "a/b")


def test_command_per_topic_and_user() -> None:
    authorizer = make(
        AclRule("command", CONTROL, user="alice"),
        AclRule("command", STREAM, user="bob"),
    )
    assert cmd(authorizer, CONTROL, "alice")
    assert not cmd(authorizer, STREAM, "alice")
    assert cmd(authorizer, STREAM, "bob")
    assert not cmd(authorizer, CONTROL, "bob")


def test_regsub_partial_authorization() -> None:
    """RegSub registers the permitted topics and reports the others (3081 each)."""
    authorizer = make(
        AclRule("command", CONTROL),
        AclRule("subscribe", "sport/#"),
    )
    requested = ["sport/soccer/#", "news/#", "#", "sport/+/score"]
    refused = [t for t in requested if not sub(authorizer, t)]
    assert refused == ["news/#", "#"]


# ---------------------------------------------------------------------------
# SUBSCRIBE: coverage and deny overlap


def test_subscribe_needs_coverage() -> None:
    authorizer = make(AclRule("subscribe", "sensors/+"), AclRule("subscribe", "sensors"))
    assert sub(authorizer, "sensors/x")
    assert sub(authorizer, "sensors/+")
    assert sub(authorizer, "sensors")
    # Each part is allowed, but no single rule covers the whole filter.
    assert not sub(authorizer, "sensors/#")
    assert not sub(authorizer, "#")
    assert not sub(authorizer, "+/+")


def test_deny_overlap_blocks_wide_filters() -> None:
    authorizer = make(
        AclRule("subscribe", "sensors/secret/#", allow=False),
        AclRule("subscribe", "sensors/#"),
    )
    assert sub(authorizer, "sensors/public/#")
    assert sub(authorizer, "sensors/public")
    assert not sub(authorizer, "sensors/#")
    assert not sub(authorizer, "sensors/+/temp")
    assert not sub(authorizer, "sensors/secret")
    assert not sub(authorizer, "+/secret/#")


def test_later_deny_does_not_matter_after_covering_allow() -> None:
    authorizer = make(
        AclRule("subscribe", "sensors/#"),
        AclRule("subscribe", "sensors/secret/#", allow=False),
    )
    assert sub(authorizer, "sensors/#")


def test_topic_name_as_filter_is_the_read_check() -> None:
    authorizer = make(
        AclRule("subscribe", "a/secret", allow=False),
        AclRule("subscribe", "a/+"),
    )
    assert sub(authorizer, "a/public")
    assert not sub(authorizer, "a/secret")


# ---------------------------------------------------------------------------
# Property: a permitted subscription never delivers a topic the client may not read,
# and the decision equals a brute-force evaluation over a universe of topics.

LEVELS = ("a", "b", "$x", "")
TOPICS = tuple(
    t
    for depth in (1, 2, 3)
    for combo in itertools.product(LEVELS, repeat=depth)
    if topic_name_error(t := "/".join(combo)) is None
)
FILTERS = tuple(
    f
    for depth in (1, 2, 3)
    for combo in itertools.product((*LEVELS, "+", "#"), repeat=depth)
    if topic_filter_error(f := "/".join(combo)) is None
)

rule_strategy = st.builds(
    AclRule,
    action=st.sampled_from(["subscribe", "all", "publish"]),
    topic=st.sampled_from(FILTERS),
    allow=st.booleans(),
    user=st.sampled_from(["*", "alice", "bob"]),
)


def _reference_subscribe(rules: Sequence[AclRule], topic_filter: str, user: str) -> bool:
    requested = {t for t in TOPICS if topic_matches(topic_filter, t)}
    for rule in rules:
        if rule.action not in ("subscribe", "all") or rule.user not in ("*", user):
            continue
        granted = {t for t in TOPICS if topic_matches(rule.topic, t)}
        if rule.allow and requested <= granted:
            return True
        if not rule.allow and requested & granted:
            return False
    return False


@settings(max_examples=300, deadline=None)
@given(st.lists(rule_strategy, min_size=1, max_size=5), st.sampled_from(FILTERS))
def test_subscribe_decision_matches_reference(rules: list[AclRule], topic_filter: str) -> None:
    authorizer = make(*rules)
    decision = sub(authorizer, topic_filter, "alice")
    assert decision == _reference_subscribe(rules, topic_filter, "alice")
    if decision:
        for topic in TOPICS:
            if topic_matches(topic_filter, topic):
                assert sub(authorizer, topic, "alice"), topic


@settings(max_examples=300, deadline=None)
@given(st.lists(rule_strategy, min_size=1, max_size=5), st.sampled_from(TOPICS))
def test_publish_decision_is_first_match(rules: list[AclRule], topic: str) -> None:
    authorizer = make(*rules)
    expected = False
    for rule in rules:
        applies = rule.action in ("publish", "all") and rule.user in ("*", "alice")
        if applies and topic_matches(rule.topic, topic):
            expected = rule.allow
            break
    assert pub(authorizer, topic, "alice") == expected


def test_journal_reads_are_checked_as_subscriptions() -> None:
    """`journal` rules cover filters: a reader gets what its rules cover, never wider."""
    rules = [
        AclRule(action="journal", topic="sensors/+/secret", allow=False),
        AclRule(action="journal", topic="sensors/#", user="reader"),
    ]
    authorizer = Authorizer(acl=rules)

    def reads(topic: str) -> bool:
        return authorizer.allowed(Action.JOURNAL, topic, user="reader", client_id="")

    assert reads("sensors/#") is False  # overlaps the denied secrets
    assert reads("sensors/a/temp") and reads("sensors/+/temp")
    assert not reads("#") and not reads("other")
    assert not authorizer.allowed(Action.SUBSCRIBE, "sensors/a/temp", user="reader", client_id="")
    assert Authorizer().allowed(Action.JOURNAL, "#", user=None, client_id="")  # open broker
