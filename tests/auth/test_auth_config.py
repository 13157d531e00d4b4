"""Validation of users and ACL rules: every error names the entry, warnings flag risks."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from telemq.broker.security.acl import AclRule, Action
from telemq.broker.security.auth import Authorizer
from telemq.broker.security.passwords import hash_password
from telemq.broker.security.users import AuthError, UserConfig

HASH = hash_password("pw", iterations=1_000)
STRONG = hash_password("pw", iterations=100_000)


def test_duplicate_user() -> None:
    with pytest.raises(AuthError, match=r"users\[1\]: duplicate user name 'alice'"):
        Authorizer([UserConfig("alice", HASH), UserConfig("alice", HASH)])


@pytest.mark.parametrize("name", ["", "*", "anonymous", "a\x00b"])
def test_bad_user_names(name: str) -> None:
    with pytest.raises(AuthError, match=r"users\[0\]: name"):
        Authorizer([UserConfig(name, HASH)])


def test_non_string_user_name() -> None:
    with pytest.raises(AuthError, match=r"users\[0\]: name must be a string"):
        Authorizer([UserConfig(7, HASH)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (AclRule("pub", "a"), r"acl\[0\]: action 'pub' is not publish, subscribe"),
        (AclRule("publish", "a/#/b"), r"acl\[0\]: topic is not a valid topic filter"),
        (AclRule("publish", ""), r"acl\[0\]: topic is not a valid topic filter"),
        (AclRule("publish", "a", allow="yes"), r"acl\[0\]: allow must be true or false"),  # type: ignore[arg-type]
        (AclRule("publish", "a", user=""), r"acl\[0\]: user must be"),
        (AclRule("publish", "a", user="carol"), r"acl\[0\]: user 'carol' is not one of"),
        (AclRule("publish", 5), r"acl\[0\]: topic must be a string"),  # type: ignore[arg-type]
    ],
)
def test_bad_rules(rule: AclRule, message: str) -> None:
    with pytest.raises(AuthError, match=message):
        Authorizer([UserConfig("alice", HASH)], [rule])


def test_rules_may_name_certificate_users() -> None:
    """With a listener taking names from certificates, a rule may name a user without a
    password entry; such a name still cannot log in with a password."""
    rule = AclRule("publish", "sensors/#", user="sensor1")
    authorizer = Authorizer([UserConfig("alice", HASH)], [rule], certificate_names="some")
    assert authorizer.allowed(Action.PUBLISH, "sensors/a", user="sensor1", client_id="c")
    assert not authorizer.authenticate("sensor1", b"pw")


@pytest.mark.parametrize(("names", "warned"), [("none", True), ("some", True), ("all", False)])
def test_no_users_warning_unless_every_listener_uses_certificates(names: str, warned: bool) -> None:
    rule = AclRule("publish", "sensors/%u/#")
    authorizer = Authorizer([], [rule], certificate_names=names)
    assert any("no [[users]]" in w for w in authorizer.warnings) is warned


def test_error_names_the_right_rule() -> None:
    rules = [AclRule("publish", "a"), AclRule("subscribe", "b"), AclRule("everything", "c")]
    with pytest.raises(AuthError, match=r"^acl\[2\]: "):
        Authorizer(acl=rules)


def test_allow_anonymous_type() -> None:
    with pytest.raises(AuthError, match="allow_anonymous"):
        Authorizer(allow_anonymous="no")  # type: ignore[arg-type]


def test_auth_error_is_value_error() -> None:
    assert issubclass(AuthError, ValueError)


def test_warnings() -> None:
    clean = Authorizer([UserConfig("alice", STRONG)], [AclRule("publish", "users/%u/#")])
    assert clean.warnings == ()

    weak = Authorizer([UserConfig("alice", HASH)])
    assert any("users[0]" in w and "iterations" in w for w in weak.warnings)

    odd_name = Authorizer([UserConfig("a/b", STRONG)])
    assert any("users[0]" in w and "%u" in w for w in odd_name.warnings)

    unauthenticated = Authorizer(acl=[AclRule("publish", "x", user="alice")])
    assert any("acl[0]" in w and "not authenticated" in w for w in unauthenticated.warnings)

    useless = Authorizer(acl=[AclRule("publish", "u/%u", user="anonymous")])
    assert any("acl[0]" in w and "never matches" in w for w in useless.warnings)


# ---------------------------------------------------------------------------
# From TOML tables (what the configuration loader hands over)

CONFIG = f"""
allow_anonymous = false

[[users]]
name = "alice"
password_hash = "{HASH}"

[[users]]
name = "sensor-1"
password_hash = "{HASH}"

[[acl]]
action = "publish"
topic = "devices/%u/#"

[[acl]]
user = "alice"
action = "all"
topic = "#"

[[acl]]
action = "subscribe"
topic = "devices/+/secret"
allow = false

[[acl]]
action = "subscribe"
topic = "devices/#"
"""


def test_from_toml_tables() -> None:
    data = tomllib.loads(CONFIG)
    users = [UserConfig.from_mapping(t, f"users[{i}]") for i, t in enumerate(data["users"])]
    rules = [AclRule.from_mapping(t, f"acl[{i}]") for i, t in enumerate(data["acl"])]
    authorizer = Authorizer(users, rules, data["allow_anonymous"])
    assert rules[0] == AclRule("publish", "devices/%u/#", allow=True, user="*")
    assert authorizer.authenticate("sensor-1", b"pw")
    assert not authorizer.authenticate(None, None)
    assert authorizer.allowed("publish", "devices/sensor-1/t", user="sensor-1", client_id="c")  # type: ignore[arg-type]
    assert not authorizer.allowed("subscribe", "devices/#", user="sensor-1", client_id="c")  # type: ignore[arg-type]
    assert authorizer.allowed("subscribe", "devices/+/temp", user="sensor-1", client_id="c")  # type: ignore[arg-type]
    assert authorizer.allowed("command", "SYSTEM.BROKER.CONTROL.QUEUE", user="alice", client_id="c")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"name": "a"}, r"users\[3\]\.password_hash: missing"),
        ({"name": "a", "password_hash": HASH, "password": "x"}, r"users\[3\]\.password: unknown"),
        ({"name": 1, "password_hash": HASH}, r"users\[3\]\.name: expected a string"),
        ([1, 2], r"users\[3\]: expected a table"),
    ],
)
def test_user_from_mapping_errors(table: Any, message: str) -> None:
    with pytest.raises(AuthError, match=message):
        UserConfig.from_mapping(table, "users[3]")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"action": "publish"}, r"acl\[1\]\.topic: missing"),
        ({"topic": "a"}, r"acl\[1\]\.action: missing"),
        ({"action": "publish", "topic": "a", "deny": True}, r"acl\[1\]\.deny: unknown"),
        ({"action": "publish", "topic": "a", "allow": "no"}, r"acl\[1\]\.allow: expected true"),
        ({"action": "publish", "topic": "a", "user": 3}, r"acl\[1\]\.user: expected a string"),
    ],
)
def test_rule_from_mapping_errors(table: Any, message: str) -> None:
    with pytest.raises(AuthError, match=message):
        AclRule.from_mapping(table, "acl[1]")


def test_documented_example() -> None:
    """The configuration in docs/security.md loads and behaves as the text says."""
    doc = (Path(__file__).parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    match = re.search(r"```toml\n(.*?)```", doc, re.DOTALL)
    assert match is not None
    data = tomllib.loads(match.group(1).replace("pbkdf2_sha256$600000$...$...", HASH))
    authorizer = Authorizer(
        [UserConfig.from_mapping(t, f"users[{i}]") for i, t in enumerate(data["users"])],
        [AclRule.from_mapping(t, f"acl[{i}]") for i, t in enumerate(data["acl"])],
        data["allow_anonymous"],
    )
    sub = Action.SUBSCRIBE
    for topic_filter in ("devices/+/temp", "devices/a/temp", "SYSTEM.BROKER.RESPONSE/c1"):
        assert authorizer.allowed(sub, topic_filter, user="sensor-17", client_id="c1")
    for topic_filter in ("devices/#", "devices/a/#", "devices/+/+", "#", "$SYS/#"):
        assert not authorizer.allowed(sub, topic_filter, user="sensor-17", client_id="c1")
        assert authorizer.allowed(sub, topic_filter, user="alice", client_id="c1")
    other = "SYSTEM.BROKER.RESPONSE/c2"
    assert not authorizer.allowed(sub, other, user="sensor-17", client_id="c1")
    assert authorizer.allowed(
        Action.PUBLISH, "devices/sensor-17/t", user="sensor-17", client_id="c1"
    )
    assert not authorizer.allowed(
        Action.COMMAND, "SYSTEM.BROKER.CONTROL.QUEUE", user="sensor-17", client_id="c1"
    )
    assert authorizer.allowed(
        Action.COMMAND, "SYSTEM.BROKER.CONTROL.QUEUE", user="alice", client_id="c1"
    )
