"""Security review, the properties that are pure functions (docs/security.md).

* passwords exist only as salted hashes: `hash_password` and `telemq passwd` never write the
  plain text, a configuration holding it is refused;
* the final comparison is `hmac.compare_digest` (checked with a spy, not with a clock) and
  an unknown user name, or a missing password, costs as much key derivation as the most
  expensive configured user;
* ACL rules cannot be bypassed with wildcards or `$` topics: a permitted filter only ever
  delivers permitted topics (checked exhaustively over a small topic universe);
* no super-linear work on adversarial input: LIKE patterns, topic matching, the filter-size
  limits (the subscription trie's are in tests/subscriptions/test_topic_tree.py). Work is
  measured by counting operations (a step-counting model of the LIKE regex, counting level
  lists), never by timing.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, SupportsIndex, overload

import pytest

from telemq.broker.security.acl import AclRule, Action
from telemq.broker.security.auth import Authorizer
from telemq.broker.security.passwords import hash_password, verify_password
from telemq.broker.security.users import AuthError, UserConfig
from telemq.cli import passwd
from telemq.filters import compile_filter
from telemq.filters.errors import FilterError
from telemq.filters.like import parse_like
from telemq.protocol import topics as topics_module
from telemq.protocol.topics import topic_filter_error, topic_matches

FAST = 1000  # iterations for tests; real hashes use 600,000

# ---------------------------------------------------------------------------------------
# Passwords


def test_hash_never_contains_the_password() -> None:
    for password in ("correct horse battery staple", "s3cret", "ü" * 20):
        encoded = hash_password(password, iterations=FAST)
        assert password not in encoded
        assert password.encode().hex() not in encoded
        assert verify_password(password, encoded)
        # Two hashes of one password differ (random salt): no dictionary across users.
        assert encoded != hash_password(password, iterations=FAST)


def test_passwd_prints_only_the_hash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse
    import io
    import sys

    secret = "pl4in-text-pw"
    monkeypatch.setattr(sys, "stdin", io.StringIO(secret + "\n"))
    parser = argparse.ArgumentParser(prog="telemq")
    passwd.register(parser.add_subparsers())
    args = parser.parse_args(["passwd", "alice", "--password-stdin", "--iterations", "1000"])
    assert args.handler(args) == 0
    out, err = capsys.readouterr()
    assert secret not in out and secret not in err
    assert 'password_hash = "pbkdf2_sha256$1000$' in out


@pytest.mark.parametrize("stored", ["s3cret", "plain:s3cret", "sha256$abc", ""])
def test_a_plain_or_foreign_password_in_the_config_is_refused(stored: str) -> None:
    with pytest.raises(AuthError, match="password_hash is not a pbkdf2_sha256 hash"):
        Authorizer([UserConfig("alice", stored)])


def test_user_entries_never_show_their_hash() -> None:
    encoded = hash_password("pw", iterations=FAST)
    assert encoded not in repr(UserConfig("alice", encoded))


class Spy:
    """Counts calls to a function and passes them on."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(args)
        return self.real(*args, **kwargs)


def _two_users() -> Authorizer:
    return Authorizer(
        [
            UserConfig("alice", hash_password("a-pw", iterations=FAST)),
            UserConfig("bob", hash_password("b-pw", iterations=3 * FAST)),
        ]
    )


@pytest.mark.parametrize(
    ("user", "password", "expected"),
    [
        ("alice", b"a-pw", True),
        ("alice", b"a-pX", False),
        ("alice", b"", False),
        ("alice", None, False),
        ("bob", b"b-pw", True),
        ("mallory", b"a-pw", False),
        ("mallory", None, False),
        ("", b"", False),
    ],
)
def test_every_attempt_ends_in_compare_digest_after_one_derivation(
    monkeypatch: pytest.MonkeyPatch, user: str, password: bytes | None, expected: bool
) -> None:
    """Right or wrong, known or unknown: one PBKDF2 and one constant-time comparison, and an
    unknown name costs the most expensive configured hash (no oracle on which names exist)."""
    authorizer = _two_users()
    derive = Spy(hashlib.pbkdf2_hmac)
    compare = Spy(hmac.compare_digest)
    monkeypatch.setattr(hashlib, "pbkdf2_hmac", derive)
    monkeypatch.setattr(hmac, "compare_digest", compare)
    assert authorizer.authenticate(user, password) is expected
    assert len(derive.calls) == 1
    assert len(compare.calls) == 1
    iterations = derive.calls[0][3]
    if user == "alice" and password is not None:
        assert iterations == FAST
    else:
        assert iterations == 3 * FAST  # bob's, the costliest configured hash
    first, second = compare.calls[0]
    assert isinstance(first, bytes) and len(first) == len(second)


def test_verify_password_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = hash_password("pw", iterations=FAST)
    compare = Spy(hmac.compare_digest)
    monkeypatch.setattr(hmac, "compare_digest", compare)
    for attempt in ("pw", "pX", "p", "pw" * 50):
        verify_password(attempt, encoded)
    assert len(compare.calls) == 4


# ---------------------------------------------------------------------------------------
# ACL: no way around the rules with wildcards or `$` topics

# The example of docs/security.md (alice first, then the device rules).
DOC_RULES = [
    AclRule("all", "#", user="alice"),
    AclRule("subscribe", "$SYS/#", user="alice"),
    AclRule("publish", "devices/%u/#"),
    AclRule("subscribe", "devices/+/secret", allow=False),
    AclRule("subscribe", "devices/#"),
    AclRule("subscribe", "SYSTEM.BROKER.RESPONSE/%c"),
]


def _doc_authorizer() -> Authorizer:
    users = [
        UserConfig(name, hash_password("pw", iterations=FAST)) for name in ("alice", "sensor-17")
    ]
    return Authorizer(users, DOC_RULES)


@pytest.mark.parametrize(
    ("topic_filter", "allowed"),
    [
        ("#", False),
        ("+/#", False),
        ("+/secret", False),
        ("+/+/secret", False),
        ("devices/#", False),  # could receive devices/a/secret
        ("devices/+/+", False),
        ("devices/+/#", False),
        ("devices/a/#", False),
        ("devices/+/temp", True),
        ("devices/a/temp", True),
        ("devices/a/secret", False),
        ("devices/a/secret/x", True),  # a deeper level is another topic
        ("$SYS/#", False),
        ("$SYS/broker/uptime", False),
        ("+/broker/uptime", False),
        ("SYSTEM.BROKER.RESPONSE/c1", True),
        ("SYSTEM.BROKER.RESPONSE/other", False),
        ("SYSTEM.BROKER.RESPONSE/+", False),
        ("SYSTEM.BROKER.RESPONSE/#", False),
    ],
)
def test_wildcard_subscriptions_of_a_device(topic_filter: str, allowed: bool) -> None:
    authorizer = _doc_authorizer()
    decision = authorizer.allowed(Action.SUBSCRIBE, topic_filter, user="sensor-17", client_id="c1")
    assert decision is allowed


def test_hash_reaches_no_dollar_topic_even_for_alice() -> None:
    authorizer = _doc_authorizer()
    assert authorizer.allowed(Action.SUBSCRIBE, "#", user="alice", client_id="a")
    assert authorizer.allowed(Action.SUBSCRIBE, "$SYS/#", user="alice", client_id="a")
    # `all #` gives alice no publish right on `$` topics: the rule must name them.
    assert not authorizer.allowed(Action.PUBLISH, "$SYS/broker/uptime", user="alice", client_id="a")
    assert not topic_matches("#", "$SYS/broker/uptime")
    assert not topic_matches("+/broker/uptime", "$SYS/broker/uptime")


def _universe() -> list[str]:
    """Topic names over a few levels, with `$` first levels and empty levels."""
    first = ["devices", "$SYS", "SYSTEM.BROKER.RESPONSE", "x", ""]
    second = ["a", "b", "secret", "c1", ""]
    third = ["temp", "secret", ""]
    names: set[str] = set()
    for a in first:
        names.add(a)
        for b in second:
            names.add(f"{a}/{b}")
            for c in third:
                names.add(f"{a}/{b}/{c}")
    return sorted(name for name in names if name)


def _filters() -> Iterator[str]:
    levels = ["devices", "$SYS", "SYSTEM.BROKER.RESPONSE", "a", "secret", "c1", "temp", "", "+"]
    for depth in (1, 2, 3):
        for combo in itertools.product(levels, repeat=depth):
            yield "/".join(combo)
            yield "/".join(combo) + "/#"
    yield "#"


@pytest.mark.parametrize("user", ["sensor-17", "alice"])
def test_a_permitted_filter_delivers_only_permitted_topics(user: str) -> None:
    """Exhaustive over ~2,000 filters x ~130 topics: subscribe(filter) allowed implies
    subscribe(topic) allowed for every topic the filter matches."""
    authorizer = _doc_authorizer()
    universe = _universe()
    checked = 0
    for topic_filter in _filters():
        if topic_filter_error(topic_filter) is not None:
            continue
        if not authorizer.allowed(Action.SUBSCRIBE, topic_filter, user=user, client_id="c1"):
            continue
        for topic in universe:
            if topic_matches(topic_filter, topic):
                checked += 1
                assert authorizer.allowed(Action.SUBSCRIBE, topic, user=user, client_id="c1"), (
                    f"{user} may subscribe to {topic_filter!r} but not read {topic!r}"
                )
    assert checked > 40


@pytest.mark.parametrize("name", ["#", "+", "a/#", "devices/+", "$SYS", ""])
def test_hostile_user_names_and_client_ids_gain_nothing(name: str) -> None:
    rules = [
        AclRule("subscribe", "devices/%u/admin", allow=False),
        AclRule("subscribe", "devices/%u/#"),
        AclRule("subscribe", "resp/%c"),
    ]
    authorizer = Authorizer([], rules, allow_anonymous=True)
    for topic_filter in ("#", "devices/#", "devices/+/#", "devices/x/admin", "resp/#", "$SYS/#"):
        assert not authorizer.allowed(Action.SUBSCRIBE, topic_filter, user=name, client_id=name)


def test_command_topics_need_the_command_permission() -> None:
    authorizer = Authorizer([], [AclRule("publish", "#")], allow_anonymous=True)
    for topic in ("SYSTEM.BROKER.CONTROL.QUEUE", "SYSTEM.BROKER.DEFAULT.STREAM"):
        assert not authorizer.allowed(Action.PUBLISH, topic, user=None, client_id="c")
        assert not authorizer.allowed(Action.COMMAND, topic, user=None, client_id="c")
    assert authorizer.allowed(Action.PUBLISH, "SYSTEM.BROKER.RESPONSE/x", user=None, client_id="c")


# ---------------------------------------------------------------------------------------
# ReDoS: LIKE, counted on a step-counting model of the regex telemq builds


@dataclass(frozen=True)
class Node:
    kind: str  # "lit", "any", "lazy", "greedy", "atomic", "group"
    char: str = ""
    inner: tuple[Node, ...] = ()


def parse_regex(body: str) -> tuple[Node, ...]:
    """The subset of regex syntax `LikePattern._regex_body` emits: literals, `\\xNN`, `.`,
    `.*`, `.*?`, and groups `(?>...)` (atomic) or `(?:...)` (plain, for comparison)."""
    nodes, end = _parse_sequence(body, 0)
    assert end == len(body), body
    return nodes


def _parse_sequence(body: str, i: int) -> tuple[tuple[Node, ...], int]:
    nodes: list[Node] = []
    while i < len(body) and body[i] != ")":
        if body.startswith(".*?", i):
            nodes.append(Node("lazy"))
            i += 3
        elif body.startswith(".*", i):
            nodes.append(Node("greedy"))
            i += 2
        elif body[i] == ".":
            nodes.append(Node("any"))
            i += 1
        elif body.startswith(("(?>", "(?:"), i):
            kind = "atomic" if body.startswith("(?>", i) else "group"
            inner, i = _parse_sequence(body, i + 3)
            assert body[i] == ")"
            nodes.append(Node(kind, inner=inner))
            i += 1
        elif body.startswith("\\x", i):
            nodes.append(Node("lit", chr(int(body[i + 2 : i + 4], 16))))
            i += 4
        else:
            nodes.append(Node("lit", body[i]))
            i += 1
    return tuple(nodes), i


class Backtracker:
    """A backtracking matcher (what `re` and java.util.regex are) that counts its steps."""

    def __init__(self, nodes: tuple[Node, ...], text: str) -> None:
        self.nodes = nodes
        self.text = text
        self.steps = 0

    def fullmatch(self) -> bool:
        return self._match(self.nodes, 0, 0, lambda end: end == len(self.text))

    def _match(
        self, nodes: tuple[Node, ...], index: int, pos: int, then: Callable[[int], bool]
    ) -> bool:
        self.steps += 1
        if index == len(nodes):
            return then(pos)
        node = nodes[index]
        text = self.text

        def rest(end: int) -> bool:
            return self._match(nodes, index + 1, end, then)

        if node.kind == "lit":
            return pos < len(text) and text[pos] == node.char and rest(pos + 1)
        if node.kind == "any":
            return pos < len(text) and rest(pos + 1)
        if node.kind == "lazy":
            return any(rest(end) for end in range(pos, len(text) + 1))
        if node.kind == "greedy":
            return any(rest(end) for end in range(len(text), pos - 1, -1))
        if node.kind == "group":
            return self._match(node.inner, 0, pos, rest)
        # Atomic: the first way the group matches is the only one ever tried.
        found: list[int] = []

        def record(end: int) -> bool:
            found.append(end)
            return True

        if not self._match(node.inner, 0, pos, record):
            return False
        return rest(found[0])


def like_steps(pattern: str, text: str, atomic: bool = True) -> tuple[bool, int]:
    body = parse_like(pattern)._regex_body()
    if not atomic:
        body = body.replace("(?>", "(?:")
    matcher = Backtracker(parse_regex(body), text)
    return matcher.fullmatch(), matcher.steps


ADVERSARIAL_LIKE = [
    "%a%a%a%a%a%b",
    "%a%a%a%a%a%a%a%b",
    "%a_a%a_a%a_a%b",
    "%_%_%_%_%c",
    "%aa%aa%aa%ab%",
    "a%a%a%a%a%",
]


@pytest.mark.parametrize("pattern", ADVERSARIAL_LIKE)
def test_the_step_model_agrees_with_re(pattern: str) -> None:
    """The model means what the regex means (so its step counts are about the real thing)."""
    body = parse_like(pattern)._regex_body()
    matcher = parse_like(pattern).python_matcher()
    rng = random.Random(pattern)
    for _ in range(200):
        text = "".join(rng.choice("aabc") for _ in range(rng.randint(0, 14)))
        expected = re.fullmatch(body, text, re.DOTALL) is not None
        assert like_steps(pattern, text)[0] is expected, text
        assert like_steps(pattern, text, atomic=False)[0] is expected, text
        assert matcher(text) is expected, text


@pytest.mark.parametrize("pattern", ADVERSARIAL_LIKE)
def test_like_work_grows_linearly(pattern: str) -> None:
    """Doubling the input at most doubles the steps (plus a constant)."""
    counts = [like_steps(pattern, "a" * n)[1] for n in (200, 400, 800)]
    for smaller, larger in itertools.pairwise(counts):
        assert larger <= 2.2 * smaller + 50, counts
    assert counts[-1] <= 8 * 800 * len(pattern), counts


def test_the_step_model_sees_a_redos() -> None:
    """Without the atomic groups the same regex is polynomial of high degree: the counting
    would catch a regression."""
    pattern = "%a%a%a%a%b"
    counts = [like_steps(pattern, "a" * n, atomic=False)[1] for n in (20, 40)]
    assert counts[1] > 10 * counts[0], counts


def test_like_filters_finish_on_long_adversarial_payloads() -> None:
    compiled = compile_filter("s LIKE '%a%a%a%a%a%a%a%a%b'")
    assert compiled.evaluate(('{"s": "' + "a" * 100_000 + '"}').encode()) is False
    assert compiled.evaluate(('{"s": "' + "a" * 100_000 + 'b"}').encode()) is True


# ---------------------------------------------------------------------------------------
# ReDoS: topic matching and the subscription trie, counted


class CountingList(list[str]):
    """A level list that counts reads (indexing, length, iteration steps)."""

    counter: ClassVar[list[int]] = [0]

    @overload
    def __getitem__(self, index: SupportsIndex) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: SupportsIndex | slice) -> str | list[str]:
        CountingList.counter[0] += 1
        return super().__getitem__(index)

    def __len__(self) -> int:
        CountingList.counter[0] += 1
        return super().__len__()

    def __iter__(self) -> Iterator[str]:
        for item in super().__iter__():
            CountingList.counter[0] += 1
            yield item


class CountingStr(str):
    """A topic whose `split` returns a counting level list."""

    __slots__ = ()

    def split(self, sep: str | None = None, maxsplit: SupportsIndex = -1) -> list[str]:
        return CountingList(str(self).split(sep, maxsplit))


def matching_steps(topic_filter: str, topic: str) -> tuple[bool, int]:
    CountingList.counter[0] = 0
    result = topics_module.topic_matches(CountingStr(topic_filter), CountingStr(topic))
    return result, CountingList.counter[0]


@pytest.mark.parametrize(
    ("make_filter", "make_topic"),
    [
        (lambda n: "+/" * n + "#", lambda n: "a/" * (2 * n) + "b"),
        (lambda n: "/".join(["+"] * n), lambda n: "/".join(["a"] * n)),
        (lambda n: "/".join(["+"] * n), lambda n: "/".join(["a"] * (n + 1))),
        (lambda n: "+/" * n + "x", lambda n: "a/" * n + "y"),
        (lambda n: "a/" * n + "#", lambda n: "a/" * n + "a"),
        (lambda n: "#", lambda n: "a/" * n + "a"),
    ],
)
def test_topic_matching_work_grows_linearly(
    make_filter: Callable[[int], str], make_topic: Callable[[int], str]
) -> None:
    counts = []
    for n in (1000, 2000, 4000):
        _, steps = matching_steps(make_filter(n), make_topic(n))
        counts.append(steps)
    for smaller, larger in itertools.pairwise(counts):
        assert larger <= 2.2 * smaller + 20, counts


def test_counting_topics_match_like_plain_ones() -> None:
    for topic_filter, topic in [("+/+/#", "a/b/c"), ("+/x", "a/y"), ("#", "$SYS/x"), ("a", "a")]:
        assert matching_steps(topic_filter, topic)[0] is topic_matches(topic_filter, topic)


# ---------------------------------------------------------------------------------------
# Size limits of SQL filters


def test_filter_nesting_deeper_than_the_limit_is_refused_with_a_position() -> None:
    compile_filter("(" * 60 + "a = 1" + ")" * 60)
    deep = "(" * 70 + "a = 1" + ")" * 70
    with pytest.raises(FilterError, match="deeper than 64") as caught:
        compile_filter(deep)
    assert 0 <= caught.value.position < len(deep)
    with pytest.raises(FilterError, match="deeper than 64"):
        compile_filter("NOT " * 100 + "a = 1")
    with pytest.raises(FilterError):
        compile_filter("a = " + "-" * 100_000 + "1")


def test_filter_longer_than_the_limit_is_refused() -> None:
    text = "a = '" + "x" * 65_536 + "'"
    with pytest.raises(FilterError, match="longer than 65536"):
        compile_filter(text)
    compile_filter("a = '" + "x" * 60_000 + "'")
