"""The `Authorizer`: the configuration's users, anonymous access and ACL rules, as one policy.

Theory of operation
-------------------
The policy is pure: no asyncio, sockets or clocks, so the server, the command handlers and
the tests all ask the same questions of one object, built once from the `[[users]]` and
`[[acl]]` entries (users.py, acl.py) and immutable after:

- `authenticate` decides CONNECT. Passwords are checked against their salted hashes
  (passwords.py); an unknown user name costs the same key derivation as a wrong password, so
  response times do not reveal which names exist. `scram_server` runs the same users through
  MQTT 5.0 enhanced authentication (SCRAM-SHA-256, protocol/scram.py).
- `allowed` decides each publish, subscription filter, command, queue and journal request
  by the ACL rules (acl.py: the first matching rule decides; no rules, an open broker);
  `deciding_rule` says which rule it was, for logs.
- Building it validates everything at once and raises `AuthError` naming the entry;
  `warnings` lists what is legal but probably not what was meant (weak hashes, user names no
  one authenticates), for the server to log at start.

Safe to call from several threads; key derivation releases the GIL, so the server should
run `authenticate` off the event loop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

from ...protocol import scram
from .acl import AclRule, Action, Rule, compile_rule, evaluate, unsafe_value
from .passwords import (
    DEFAULT_ITERATIONS,
    HASH_SCHEME,
    SALT_BYTES,
    WEAK_ITERATIONS,
    StoredHash,
    decode_hash,
    matches,
    secret_bytes,
    spend,
)
from .users import AuthError, UserConfig, user_name_error

__all__ = ["Authorizer"]


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
        hashes, admins = self._users(users, warnings)

        if allow_anonymous is None:
            allow_anonymous = not hashes
        elif not isinstance(allow_anonymous, bool):
            raise AuthError(f"allow_anonymous: expected true or false, got {allow_anonymous!r}")
        if not hashes and not allow_anonymous:
            warnings.append(
                "allow_anonymous is false with no users configured: every connection is refused"
            )

        rules: list[Rule] = []
        for index, rule in enumerate(acl):
            rules.append(compile_rule(index, rule, hashes, warnings, certificate_names))

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
    def _users(
        users: Sequence[UserConfig], warnings: list[str]
    ) -> tuple[dict[str, StoredHash], set[str]]:
        """Each configured user's decoded password hash by name, and the admins' names;
        `AuthError` names the first entry that is not a valid user, and `warnings` gets the
        doubtful ones."""
        hashes: dict[str, StoredHash] = {}
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
                decoded = decode_hash(user.password_hash)
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
            if unsafe_value(user.name):
                warnings.append(
                    f"{where}: user name {user.name!r} holds '/', '+' or '#': %u allow rules "
                    "never match it and %u deny rules deny it everything"
                )
            hashes[user.name] = decoded
            if user.admin is True:
                admins.add(user.name)
        return hashes, admins

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
            spend(password, self._decoy)
            return False
        return matches(secret_bytes(password), stored)

    def scram_server(self) -> scram.ScramServer:
        """The server's side of one SCRAM-SHA-256 exchange against these users."""
        return scram.ScramServer(self._scram_credentials, self._scram_secret, self._decoy[0])

    def _scram_credentials(self, username: str) -> scram.Credentials | None:
        """A user's stored hash as SCRAM's SaltedPassword: only SHA-256's 32 bytes serve."""
        stored = self._hashes.get(username)
        if stored is None or len(stored[2]) != scram.KEY_BYTES:
            return None
        return stored

    # -- authorization ------------------------------------------------------

    def allowed(self, action: Action, topic: str, *, user: str | None, client_id: str) -> bool:
        """May this client do `action` on `topic`?

        PUBLISH and COMMAND take a topic name, SUBSCRIBE a topic filter (a topic name also
        works: it asks whether messages on that topic may be delivered to the client). An
        invalid topic is refused. A PUBLISH check on an MQ command topic is a COMMAND check.
        """
        return evaluate(self._rules, action, topic, user, client_id)[0]

    def deciding_rule(
        self, action: Action, topic: str, *, user: str | None, client_id: str
    ) -> int | None:
        """Index in `acl` of the rule that decides `allowed(...)`; None: no rule decided it.

        For logs and diagnostics ("publish to x denied by acl[3]").
        """
        return evaluate(self._rules, action, topic, user, client_id)[1]
