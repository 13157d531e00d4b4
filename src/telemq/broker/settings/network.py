"""The configuration of a broker's network: `[[links]]` to other telemq brokers and
`[[bridges]]` to brokers that are not telemq (docs/network.md §2).

Theory of operation
-------------------
A link has two ends: the side with `host` dials, the side with `user` accepts. Both ends
name the other by its broker `name`, so a link is recognised by name and by the user it
logs in as, never by address. Everything is checked when the configuration is read:
a missing password file, a bad rule or a name given twice stops `telemq serve` with a line
naming the key, as for the rest of the configuration.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...network.bridge_rules import BridgeRule, BridgeRuleError, parse_rule
from .tls import client_context

# An MQ queue manager name without '/' and '%' (they mean something in topics and ids).
BROKER_NAME = re.compile(r"[A-Za-z0-9._-]{1,48}")
BRIDGE_PROTOCOLS = {"3.1": 3, "3.1.1": 4, "5": 5}


@dataclass(slots=True)
class LinkConfig:
    """One `[[links]]` entry: a neighbour telemq broker."""

    name: str = ""  # the neighbour's broker name
    host: str = ""  # set: this broker dials the neighbour
    port: int = 1883
    user: str = ""  # set: the neighbour dials, logging in as this user
    username: str = ""  # dialing side: credentials
    password: str = ""
    password_file: str = ""
    cafile: str = ""  # dialing side: TLS when set
    certfile: str = ""
    keyfile: str = ""
    server_name: str = ""  # TLS server name; defaults to host
    keepalive: int = 30
    reconnect_min: float = 1.0
    reconnect_max: float = 30.0
    max_inflight: int = 1000
    # The link session's queue (0: unlimited), in place of limits.max_queued_*.
    max_queued_messages: int = 0
    max_queued_bytes: int = 1024 * 1024 * 1024

    @property
    def dials(self) -> bool:
        return bool(self.host)


@dataclass(slots=True)
class BridgeConfig:
    """One `[[bridges]]` entry, after Mosquitto's `connection` section."""

    name: str = ""
    host: str = ""
    port: int = 1883
    protocol: str = "3.1.1"  # "3.1", "3.1.1" or "5"
    client_id: str = ""  # default: <broker name>.<name>, as Mosquitto's hostname.name
    username: str = ""
    password: str = ""
    password_file: str = ""
    cafile: str = ""
    certfile: str = ""
    keyfile: str = ""
    server_name: str = ""
    cleansession: bool = False
    keepalive: int = 60
    reconnect_min: float = 5.0
    reconnect_max: float = 30.0
    try_private: bool = True
    outgoing_retain: bool = True
    notifications: bool = True
    topics: list[str] = field(default_factory=list)

    def rules(self) -> list[BridgeRule]:
        return [parse_rule(line) for line in self.topics]


def dial_secret(entry: LinkConfig | BridgeConfig) -> str | None:
    """The password a link or bridge logs in with: `password`, or the first line of
    `password_file` (read at each connection, so a rotated file is picked up)."""
    if entry.password_file:
        return Path(entry.password_file).read_text(encoding="utf-8").splitlines()[0]
    return entry.password or None


def check_network(
    name: str,
    links: Sequence[LinkConfig],
    bridges: Sequence[BridgeConfig],
    user_names: Collection[str],
    certificate_names: bool,
    error: type[ValueError],
) -> None:
    """Raise `error` (the configuration's ConfigError) naming the first problem.

    `name` is this broker's, `user_names` those of its [[users]]; `certificate_names`: some
    listener takes user names from client certificates, so a link user need not be in
    [[users]]."""
    if not (links or bridges):
        return
    if not BROKER_NAME.fullmatch(name):
        raise error(
            f"name: {name!r} is not a valid broker name: 1 to 48 letters, digits, "
            "'.', '_' or '-' (needed when links or bridges are configured)"
        )
    seen: dict[str, str] = {}
    for index, link in enumerate(links):
        where = f"links[{index}]"
        _check_name(link.name, f"{where}.name", seen, name, error)
        if link.dials == bool(link.user):
            raise error(
                f"{where}: give host (this broker dials) or user (the neighbour dials), "
                f"not {'both' if link.dials else 'neither'}"
            )
        if link.user and link.user not in user_names and not certificate_names:
            raise error(f"{where}.user: {link.user!r} is not in [[users]]")
        _check_endpoint(link, where, error)
        if not 5 <= link.keepalive <= 65535:
            raise error(f"{where}.keepalive: must be between 5 and 65535 seconds")
        if not 1 <= link.max_inflight <= 65535:
            raise error(f"{where}.max_inflight: must be between 1 and 65535")
        for key in ("max_queued_messages", "max_queued_bytes"):
            if getattr(link, key) < 0:
                raise error(f"{where}.{key}: must not be negative")
    for index, bridge in enumerate(bridges):
        where = f"bridges[{index}]"
        _check_name(bridge.name, f"{where}.name", seen, name, error)
        if not bridge.host:
            raise error(f"{where}.host: required (the broker to bridge to)")
        if bridge.protocol not in BRIDGE_PROTOCOLS:
            raise error(f"{where}.protocol: {bridge.protocol!r} is not '3.1', '3.1.1' or '5'")
        _check_endpoint(bridge, where, error)
        if not 0 <= bridge.keepalive <= 65535:
            raise error(f"{where}.keepalive: must be between 0 and 65535 seconds")
        if not bridge.topics:
            raise error(f"{where}.topics: at least one rule is needed")
        for number, line in enumerate(bridge.topics):
            try:
                parse_rule(line)
            except BridgeRuleError as problem:
                raise error(f"{where}.topics[{number}]: {problem}") from None


def _check_name(
    name: str, where: str, seen: dict[str, str], own: str, error: type[ValueError]
) -> None:
    if not BROKER_NAME.fullmatch(name):
        raise error(f"{where}: {name!r} is not a valid name: 1 to 48 letters, digits, . _ -")
    if name == own:
        raise error(f"{where}: {name!r} is this broker's own name")
    if name in seen:
        raise error(f"{where}: {name!r} is given twice ({seen[name]})")
    seen[name] = where.rsplit(".", 1)[0]


def _check_endpoint(entry: LinkConfig | BridgeConfig, where: str, error: type[ValueError]) -> None:
    """Port, back-off bounds, credentials and TLS files of the dialing side."""
    if not 0 < entry.port <= 65535:
        raise error(f"{where}.port: {entry.port} is not a TCP port")
    if not 0 < entry.reconnect_min <= entry.reconnect_max:
        raise error(f"{where}.reconnect_min: must be positive and at most reconnect_max")
    if entry.password and entry.password_file:
        raise error(f"{where}: password and password_file: give one")
    if entry.password_file:
        try:
            lines = Path(entry.password_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as problem:
            raise error(f"{where}.password_file: cannot read it: {problem}") from None
        if not lines or not lines[0]:
            raise error(f"{where}.password_file: the first line (the password) is empty")
    if (entry.certfile or entry.keyfile or entry.server_name) and not entry.cafile:
        raise error(f"{where}: certfile, keyfile and server_name need cafile (TLS)")
    if entry.keyfile and not entry.certfile:
        raise error(f"{where}.keyfile: set without certfile")
    for option in ("cafile", "certfile", "keyfile"):
        path = getattr(entry, option)
        if path and not Path(path).is_file():
            raise error(f"{where}.{option}: no such file: {path}")
    if entry.cafile:
        client_context(entry, where)
