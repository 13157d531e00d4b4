"""The `[[users]]` entries of the configuration, and the names no user may take.

Theory of operation
-------------------
A configuration file is read into plain values first (settings/config.py); this module turns
one `[[users]]` table into a `UserConfig`, refusing unknown and missing keys and values of the
wrong type with an `AuthError` that names the entry (`users[2].admin: ...`): a typo must not
fall back to a default. The `[[acl]]` tables are read the same way (`AclRule`, acl.py), with
the same error and the same key check (`require_keys`).

Two names are reserved for the `user` of ACL rules, `*` (every client) and `anonymous`
(clients that sent no user name), so no configured user may take them (`user_name_error`,
also asked by `telemq passwd`). Whether an entry's password hash is well formed is decided
where the users are put together, by the `Authorizer` (auth.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "ANONYMOUS",
    "ANY_USER",
    "AuthError",
    "UserConfig",
    "require_keys",
    "user_name_error",
]

ANY_USER: Final = "*"  # rule `user`: every client, authenticated or anonymous
ANONYMOUS: Final = "anonymous"  # rule `user`: clients that sent no user name


class AuthError(ValueError):
    """Invalid users or ACL configuration; the message names the entry (`users[2]: ...`)."""


def require_keys(
    data: Mapping[str, Any], where: str, required: Sequence[str], optional: Sequence[str]
) -> None:
    """`data` is a table with every `required` key and no key outside `optional`."""
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
        require_keys(data, where, ("name", "password_hash"), ("admin",))
        for key in ("name", "password_hash"):
            if not isinstance(data[key], str):
                raise AuthError(f"{where}.{key}: expected a string, got {data[key]!r}")
        admin = data.get("admin", False)
        if not isinstance(admin, bool):
            raise AuthError(f"{where}.admin: expected true or false, got {admin!r}")
        return cls(name=data["name"], password_hash=data["password_hash"], admin=admin)


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
