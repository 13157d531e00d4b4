"""Which role a broker plays in its group (`[ha]`, docs/ha.md), as its operators see it.

Theory of operation
-------------------
Brokers with `[ha]` on one PostgreSQL store elect one active broker through the store's
advisory lock (broker/ha.py runs the election); the others are standbys. `Leadership` is
what the rest of the broker reads of that: the `role` (`ACTIVE` or `STANDBY`), since when
(`since`, UTC seconds), how often this process became active (`takeovers`, the first time
included), and, while standing by, who holds the lock as the server names it (`active`).
A broker without `[ha]` is active from start to stop and never took over (`enabled` False).

`/health` answers from `health()` (operations/health.py); `$SYS`, `/metrics` and the admin
API read `ha_active` and `ha_takeovers` through the view (view.py). The election changes
the role (`activate`, `stand_by`); the wiring hears through `lose` that the active broker's
store lost the connection that holds the lock (a failed commit, the watchdog), and steps
down.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ACTIVE", "STANDBY", "Leadership"]

ACTIVE = "active"
STANDBY = "standby"


@dataclass(slots=True)
class Leadership:
    """One broker's role (see the module docstring)."""

    broker: str = "telemq"  # the broker's name, shared by the members of its group
    enabled: bool = False  # [ha] enabled: the role comes from the election
    member: str = ""  # this member of the group
    role: str = ACTIVE
    since: float = field(default_factory=time.time)
    takeovers: int = 0
    active: str = ""  # while standing by: who holds the lock, as far as the server says
    server_reference: str = ""  # where a standby refers MQTT 5.0 clients to
    # Called (on the event loop) once the active broker's store lost the leadership.
    on_lost: Callable[[str], None] | None = None

    @property
    def is_active(self) -> bool:
        return self.role == ACTIVE

    def activate(self) -> None:
        """Won the election: this broker serves from now on."""
        self.role = ACTIVE
        self.since = time.time()
        self.takeovers += 1
        self.active = ""

    def stand_by(self) -> None:
        self.role = STANDBY
        self.since = time.time()

    def lose(self, reason: str) -> None:
        """The store says the leadership is gone; the wiring steps down (no-op without HA)."""
        if self.enabled and self.role == ACTIVE and self.on_lost is not None:
            self.on_lost(reason)

    def health(self) -> tuple[int, dict[str, Any]]:
        """`/health`: 200 for the active broker, 503 for a standby, and a JSON body."""
        body: dict[str, Any] = {
            "role": self.role,
            "broker": self.broker,
            "ha": self.enabled,
            "since": round(self.since, 3),
            "takeovers": self.takeovers,
        }
        if self.member:
            body["member"] = self.member
        if self.role != ACTIVE:
            body["active"] = self.active or None
            if self.server_reference:
                body["server_reference"] = self.server_reference
        return (200 if self.role == ACTIVE else 503), body
