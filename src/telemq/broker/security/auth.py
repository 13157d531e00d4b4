"""Authentication and authorization policy: who may connect, publish, subscribe and command.

Theory of operation. This module is pure policy: no asyncio, sockets or clocks, so the
server, the command handlers and the tests all ask the same questions of one object.

- Passwords are stored only as salted PBKDF2-HMAC-SHA256 hashes
  (`pbkdf2_sha256$<iterations>$<salt b64>$<hash b64>`) and checked with
  `hmac.compare_digest`. An unknown user name costs the same key derivation as a wrong
  password, so response times do not reveal which names exist.
- `Authorizer.authenticate` decides CONNECT; `Authorizer.allowed` decides each publish,
  subscription filter and command. With no ACL rules every request is allowed (an open
  broker, the default); with rules the first matching rule decides and the default is deny.
- A subscription is a promise to deliver every topic its filter can match, so a filter is
  allowed only when one allow rule *covers* it (`filter_covers`) and no earlier deny rule
  *overlaps* it (`filters_overlap`): wildcards can never widen what the rules grant.
- `%u` / `%c` in a rule stand for the user name / client id. A value that could change the
  shape of the pattern (`/`, `+`, `#`, U+0000, empty, or a leading `$` reaching the start of
  the pattern) never widens an allow rule and makes a deny rule deny everything: identities
  chosen by clients are not a way around the rules.
- The MQ command topics need the `command` permission: a publish check on them is a command
  check, so `publish` rules (even `#`) never grant commands.
- A queue (an MQTT session) belongs to the user who created it. Using another user's queue
  is the `queue` action, checked against the queue name; unlike the topic actions it is
  never allowed by default, even on a broker without rules.

The policy is immutable after construction and safe to call from several threads; key
derivation releases the GIL, so the server should run `authenticate` off the event loop.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ...protocol import scram
from ...protocol.topics import topic_filter_error, topic_matches, topic_name_error

__all__ = [
    "ANONYMOUS",
    "ANY_USER",
    "COMMAND_TOPICS",
    "DEFAULT_ITERATIONS",
    "HASH_SCHEME",
    "AclRule",
    "Action",
    "AuthError",
    "Authorizer",
    "UserConfig",
    "filter_covers",
    "filters_overlap",
    "hash_password",
    "user_name_error",
    "verify_password",
]

HASH_SCHEME: Final = "pbkdf2_sha256"
DEFAULT_ITERATIONS: Final = 600_000  # OWASP 2023 figure for PBKDF2-HMAC-SHA256
WEAK_ITERATIONS: Final = 100_000  # below this a configured hash draws a warning
MAX_ITERATIONS: Final = 10_000_000  # a typo must not freeze every login for minutes
SALT_BYTES: Final = 16
MIN_SALT_BYTES: Final = 8
MIN_HASH_BYTES: Final = 16
MAX_HASH_BYTES: Final = 64

ANY_USER: Final = "*"  # rule `user`: every client, authenticated or anonymous
ANONYMOUS: Final = "anonymous"  # rule `user`: clients that sent no user name

# Topics of the MQ command model (design §6); putting to them needs `command` permission.
COMMAND_TOPICS: Final = frozenset({"SYSTEM.BROKER.CONTROL.QUEUE", "SYSTEM.BROKER.DEFAULT.STREAM"})

_PLACEHOLDER: Final = re.compile(r"%([uc])")
_UNSAFE_CHARS: Final = frozenset("/+#\x00")
_DIGITS: Final = re.compile(r"[0-9]{1,9}")


class Action(enum.StrEnum):
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


class AuthError(ValueError):
    """Invalid users or ACL configuration; the message names the entry (`users[2]: ...`)."""


def _require_keys(
    data: Mapping[str, Any], where: str, required: Sequence[str], optional: Sequence[str]
) -> None:
    if not isinstance(data, Mapping):
        raise AuthError(f"{where}: expected a table, got {type(data).__name__}")
    known = (*required, *optional)
    for key in data:
        if key not in known:
            raise AuthError(f"{where}.{key}: unknown setting (known: {', '.join(sorted(known))})")
    for key in required:
        if key not in data:
            raise AuthError(f"{where}.{key}: missing")


@dataclass(slots=True)
class UserConfig:
    """One `[[users]]` entry. The hash is kept out of `repr` so it never lands in logs.

    `admin`: the user sees every user's subscriptions (ListSubs) and may register
    subscriptions for any queue; it gains no topic permissions."""

    name: str
    password_hash: str = field(repr=False)
    admin: bool = False

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "users[0]") -> UserConfig:
        """Build from a TOML table; unknown or missing keys raise `AuthError` naming them."""
        _require_keys(data, where, ("name", "password_hash"), ("admin",))
        for key in ("name", "password_hash"):
            if not isinstance(data[key], str):
                raise AuthError(f"{where}.{key}: expected a string, got {data[key]!r}")
        admin = data.get("admin", False)
        if not isinstance(admin, bool):
            raise AuthError(f"{where}.admin: expected true or false, got {admin!r}")
        return cls(name=data["name"], password_hash=data["password_hash"], admin=admin)


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
        _require_keys(data, where, ("action", "topic"), ("allow", "user"))
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
# Passwords


def _secret_bytes(password: str | bytes) -> bytes:
    """Passwords are compared as UTF-8 bytes (MQTT carries them as binary data)."""
    if isinstance(password, bytes):
        return password
    return password.encode("utf-8")


def _ambiguous(secret: bytes) -> bool:
    """PBKDF2-HMAC pads its key with NUL bytes, so "pw" and "pw\0" derive the same hash: a
    password ending in NUL is never set and never matches, so only the exact bytes match."""
    return secret.endswith(b"\x00")


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str) -> bytes:
    if not text.isascii():
        raise ValueError("not base64")
    return base64.b64decode(text.encode("ascii"), validate=True)


def _decode_hash(encoded: object) -> tuple[int, bytes, bytes]:
    """(iterations, salt, derived key) of an encoded hash; ValueError says what is wrong."""
    if not isinstance(encoded, str):
        raise ValueError("not a string")
    parts = encoded.split("$")
    if len(parts) != 4 or parts[0] != HASH_SCHEME:
        raise ValueError(f"expected {HASH_SCHEME}$<iterations>$<salt>$<hash>")
    scheme_iterations, salt_text, hash_text = parts[1:]
    if not _DIGITS.fullmatch(scheme_iterations):
        raise ValueError("iteration count is not a number")
    iterations = int(scheme_iterations)
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iteration count must be 1 to {MAX_ITERATIONS:,}")
    try:
        salt = _b64decode(salt_text)
        derived = _b64decode(hash_text)
    except ValueError:
        raise ValueError("salt or hash is not base64") from None
    if len(salt) < MIN_SALT_BYTES:
        raise ValueError(f"salt shorter than {MIN_SALT_BYTES} bytes")
    if not MIN_HASH_BYTES <= len(derived) <= MAX_HASH_BYTES:
        raise ValueError(f"hash must be {MIN_HASH_BYTES} to {MAX_HASH_BYTES} bytes")
    return iterations, salt, derived


def hash_password(
    password: str | bytes, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> str:
    """Encode `password` as `pbkdf2_sha256$<iterations>$<salt b64>$<hash b64>`.

    A fresh random salt is drawn unless one is given (tests pin it to get stable output).
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise TypeError("iterations must be an int")
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be 1 to {MAX_ITERATIONS:,}")
    if salt is None:
        salt = secrets.token_bytes(SALT_BYTES)
    if len(salt) < MIN_SALT_BYTES:
        raise ValueError(f"salt must be at least {MIN_SALT_BYTES} bytes")
    secret = _secret_bytes(password)
    if _ambiguous(secret):
        raise ValueError("a password may not end with a NUL byte")
    derived = hashlib.pbkdf2_hmac("sha256", secret, salt, iterations)
    return f"{HASH_SCHEME}${iterations}${_b64encode(salt)}${_b64encode(derived)}"


def verify_password(password: str | bytes, encoded: str) -> bool:
    """True when `password` matches `encoded`; a malformed or unknown hash format is False.

    The final comparison is `hmac.compare_digest`, so its time does not depend on how many
    leading bytes match.
    """
    try:
        iterations, salt, expected = _decode_hash(encoded)
        secret = _secret_bytes(password)
    except (ValueError, TypeError):
        return False
    derived = hashlib.pbkdf2_hmac("sha256", secret, salt, iterations, dklen=len(expected))
    return hmac.compare_digest(derived, expected) and not _ambiguous(secret)


def user_name_error(name: object) -> str | None:
    """Why `name` cannot be a configured user name, or None when it can."""
    if not isinstance(name, str):
        return f"name must be a string, got {name!r}"
    if not name:
        return "name is empty"
    if "\x00" in name:
        return "name contains U+0000"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # e.g. a command-line argument that was not UTF-8
        return "name is not valid UTF-8"
    if name in (ANY_USER, ANONYMOUS):
        return f"name {name!r} is reserved for ACL rules"
    return None


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
# The policy


class _Everything:
    """Marker: a deny rule whose placeholder could not be substituted safely matches all."""


_EVERYTHING: Final = _Everything()


@dataclass(frozen=True, slots=True)
class _Rule:
    index: int
    actions: frozenset[Action]
    user: str
    allow: bool
    pattern: str
    uses_user: bool
    uses_client: bool


def _unsafe_value(value: str) -> bool:
    return not value or not _UNSAFE_CHARS.isdisjoint(value)


class Authorizer:
    """Users, anonymous access and ACL rules, validated once; answers CONNECT and ACL checks.

    `warnings` lists configurations that are legal but probably not what was meant (weak
    hashes, user names nobody authenticates); the server should log them at start.
    """

    def __init__(
        self,
        users: Sequence[UserConfig] = (),
        acl: Sequence[AclRule] = (),
        allow_anonymous: bool | None = None,
        certificate_names: str = "none",
    ) -> None:
        """`certificate_names`: whether "none", "some" or "all" listeners take the user name
        from a verified client certificate (TLS `use_identity_as_username`). Such names need
        no [[users]] entry; they are authenticated by the certificate."""
        warnings: list[str] = []
        hashes: dict[str, tuple[int, bytes, bytes]] = {}
        admins: set[str] = set()
        for index, user in enumerate(users):
            where = f"users[{index}]"
            if not isinstance(user, UserConfig):
                raise AuthError(f"{where}: expected a user entry, got {type(user).__name__}")
            problem = user_name_error(user.name)
            if problem is not None:
                raise AuthError(f"{where}: {problem}")
            if user.name in hashes:
                raise AuthError(f"{where}: duplicate user name {user.name!r}")
            try:
                decoded = _decode_hash(user.password_hash)
            except ValueError as error:
                raise AuthError(
                    f"{where}: password_hash is not a {HASH_SCHEME} hash ({error}); "
                    "create one with `telemq passwd NAME`"
                ) from None
            if decoded[0] < WEAK_ITERATIONS:
                warnings.append(
                    f"{where}: password hash of {user.name!r} uses only {decoded[0]:,} "
                    f"iterations (recommended {DEFAULT_ITERATIONS:,})"
                )
            if _unsafe_value(user.name):
                warnings.append(
                    f"{where}: user name {user.name!r} holds '/', '+' or '#': %u allow rules "
                    "never match it and %u deny rules deny it everything"
                )
            hashes[user.name] = decoded
            if user.admin is True:
                admins.add(user.name)

        if allow_anonymous is None:
            allow_anonymous = not hashes
        elif not isinstance(allow_anonymous, bool):
            raise AuthError(f"allow_anonymous: expected true or false, got {allow_anonymous!r}")
        if not hashes and not allow_anonymous:
            warnings.append(
                "allow_anonymous is false with no users configured: every connection is refused"
            )

        rules: list[_Rule] = []
        for index, rule in enumerate(acl):
            rules.append(self._check_rule(index, rule, hashes, warnings, certificate_names))

        self._hashes: Final = hashes
        self._admins: Final = frozenset(admins)
        self._rules: Final = tuple(rules)
        self._allow_anonymous: Final = allow_anonymous
        # Cost of one verification, spent on unknown user names too (no timing oracle).
        self._decoy: Final = max(
            hashes.values(),
            key=lambda item: item[0],
            default=(1, b"\x00" * SALT_BYTES, b"\x00" * 32),
        )
        # Keys the SCRAM salts made up for unknown names: stable while the users are, and
        # unknown to whoever has not read their hashes (scram.py).
        self._scram_secret: Final = hashlib.sha256(
            b"".join(salt + key for _, salt, key in sorted(hashes.values()))
        ).digest()
        self.warnings: Final[tuple[str, ...]] = tuple(warnings)

    @staticmethod
    def _check_rule(
        index: int,
        rule: AclRule,
        hashes: Mapping[str, object],
        warnings: list[str],
        certificate_names: str = "none",
    ) -> _Rule:
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
        return _Rule(
            index=index,
            actions=actions,
            user=rule.user,
            allow=rule.allow,
            pattern=rule.topic,
            uses_user=uses_user,
            uses_client=uses_client,
        )

    # -- introspection --------------------------------------------------------

    @property
    def allow_anonymous(self) -> bool:
        return self._allow_anonymous

    @property
    def has_users(self) -> bool:
        return bool(self._hashes)

    def is_admin(self, user: str | None) -> bool:
        """A configured user with `admin = true` (see `UserConfig`)."""
        return user is not None and user in self._admins

    @property
    def open(self) -> bool:
        """True when there are no ACL rules: every request is allowed."""
        return not self._rules

    # -- authentication -----------------------------------------------------

    def authenticate(self, username: str | None, password: bytes | None) -> bool:
        """May a client with these CONNECT credentials connect?

        No user name: iff anonymous access is allowed. With no users configured and anonymous
        access allowed, any user name is accepted without a password check (the name is then
        only a label for ACL rules, as in Mosquitto without a password file). Otherwise the
        name must be configured and the password must verify; a missing password fails.
        Costs one key derivation whether or not the name exists.
        """
        if username is None:
            return self._allow_anonymous
        if not self._hashes:
            return self._allow_anonymous
        stored = self._hashes.get(username)
        if stored is None or password is None:
            self._spend(password)
            return False
        iterations, salt, expected = stored
        secret = _secret_bytes(password)
        derived = hashlib.pbkdf2_hmac("sha256", secret, salt, iterations, dklen=len(expected))
        return hmac.compare_digest(derived, expected) and not _ambiguous(secret)

    def scram_server(self) -> scram.ScramServer:
        """The server's side of one SCRAM-SHA-256 exchange against these users."""
        return scram.ScramServer(self._scram_credentials, self._scram_secret, self._decoy[0])

    def _scram_credentials(self, username: str) -> scram.Credentials | None:
        """A user's stored hash as SCRAM's SaltedPassword: only SHA-256's 32 bytes serve."""
        stored = self._hashes.get(username)
        if stored is None or len(stored[2]) != scram.KEY_BYTES:
            return None
        return stored

    def _spend(self, password: bytes | None) -> None:
        """Do the work of a real verification and throw it away."""
        iterations, salt, expected = self._decoy
        derived = hashlib.pbkdf2_hmac(
            "sha256", password or b"", salt, iterations, dklen=len(expected)
        )
        hmac.compare_digest(derived, expected)

    # -- authorization ------------------------------------------------------

    def allowed(self, action: Action, topic: str, *, user: str | None, client_id: str) -> bool:
        """May this client do `action` on `topic`?

        PUBLISH and COMMAND take a topic name, SUBSCRIBE a topic filter (a topic name also
        works: it asks whether messages on that topic may be delivered to the client). An
        invalid topic is refused. A PUBLISH check on an MQ command topic is a COMMAND check.
        """
        return self._evaluate(action, topic, user, client_id)[0]

    def deciding_rule(
        self, action: Action, topic: str, *, user: str | None, client_id: str
    ) -> int | None:
        """Index in `acl` of the rule that decides `allowed(...)`; None: no rule decided it.

        For logs and diagnostics ("publish to x denied by acl[3]").
        """
        return self._evaluate(action, topic, user, client_id)[1]

    def _evaluate(
        self, action: Action, topic: str, user: str | None, client_id: str
    ) -> tuple[bool, int | None]:
        action = Action(action)
        reads = action is Action.SUBSCRIBE or action is Action.JOURNAL
        if reads:
            if topic_filter_error(topic) is not None:
                return False, None
        elif topic_name_error(topic) is not None:
            return False, None
        if action is Action.PUBLISH and topic in COMMAND_TOPICS:
            action = Action.COMMAND
        if not self._rules:
            # An open broker allows every topic, but another user's queue needs a grant.
            return action is not Action.QUEUE, None
        for rule in self._rules:
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
    if rule_user == ANY_USER:
        return True
    if rule_user == ANONYMOUS:
        return user is None
    return user == rule_user


def _resolve(rule: _Rule, user: str | None, client_id: str) -> str | _Everything | None:
    """The rule's pattern for this client; None: the rule does not apply.

    Substitution is one pass, so a user name containing `%c` is not expanded again.
    """
    if not (rule.uses_user or rule.uses_client):
        return rule.pattern
    if rule.uses_user and user is None:
        return None
    unsafe = (rule.uses_user and _unsafe_value(user or "")) or (
        rule.uses_client and _unsafe_value(client_id)
    )
    if not unsafe:
        values = {"u": user or "", "c": client_id}
        pattern = _PLACEHOLDER.sub(lambda match: values[match.group(1)], rule.pattern)
        # A substituted value must not turn the rule into a `$` rule it did not name.
        if rule.pattern.startswith("$") or not pattern.startswith("$"):
            return pattern
    return None if rule.allow else _EVERYTHING
