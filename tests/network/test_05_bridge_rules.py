"""Bridge topic rules in Mosquitto's syntax (`topic PATTERN [[[out|in|both] QOS] LOCAL REMOTE]`):
defaults, prefixes, the mapping both ways and every refusal."""

from __future__ import annotations

import pytest

from telemq.network.bridge_rules import BridgeRule, BridgeRuleError, parse_rule


def test_defaults_are_out_at_qos_0_without_prefixes() -> None:
    assert parse_rule("sensors/#") == BridgeRule("sensors/#", "out", 0, "", "")
    assert parse_rule("topic sensors/# both") == BridgeRule("sensors/#", "both", 0)
    assert parse_rule("a/+ in 2") == BridgeRule("a/+", "in", 2)


def test_prefixes_rename_topics_both_ways() -> None:
    rule = parse_rule('sensors/# both 1 site-a/ "factory/site-a/"')
    assert (rule.local_filter, rule.remote_filter) == (
        "site-a/sensors/#",
        "factory/site-a/sensors/#",
    )
    assert rule.to_remote("site-a/sensors/t1") == "factory/site-a/sensors/t1"
    assert rule.to_local("factory/site-a/sensors/t1") == "site-a/sensors/t1"
    assert rule.to_local("elsewhere/t1") is None
    assert rule.outgoing and rule.incoming


def test_an_empty_prefix_is_written_as_two_quotes() -> None:
    rule = parse_rule('commands/# in 1 "" ops/')
    assert (rule.local_prefix, rule.remote_prefix) == ("", "ops/")
    assert rule.to_local("ops/commands/reboot") == "commands/reboot"
    assert not rule.outgoing


def test_an_empty_pattern_maps_one_topic_to_another() -> None:
    rule = parse_rule('"" out 1 local/status remote/status')
    assert (rule.local_filter, rule.remote_filter) == ("local/status", "remote/status")
    assert rule.to_remote("local/status") == "remote/status"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("", "at least a topic pattern"),
        ("a/# sideways", "direction must be in, out or both"),
        ("a/# out 3", "qos 3 is not 0, 1 or 2"),
        ("a/# out one", "qos one is not 0, 1 or 2"),
        ('"" both 1', "an empty pattern needs both prefixes"),
        ("a/# out 1 local/", "a local prefix needs a remote prefix"),
        ("a/# out 1 l/ r/ extra", "too many words"),
        ("a/# out 1 l/+/ r/", "may not contain + or #"),
        ("a/#/b", "is not a valid topic filter"),
        ("a/b+", "is not a valid topic filter"),
        ('"a/#', "No closing quotation"),
    ],
)
def test_invalid_rules_say_why(line: str, problem: str) -> None:
    with pytest.raises(BridgeRuleError, match=problem.replace("+", r"\+")):
        parse_rule(line)
