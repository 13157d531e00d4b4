"""`$SYS`: the broker's figures, published as retained messages.

Theory of operation
-------------------
Every `sys.interval` seconds `SysReporter` refreshes the store's sizes, takes the view's
`Overview` and publishes each figure that has a `$SYS/broker/` topic (`view.FIGURES`) as a
retained QoS 0 message, the way Mosquitto does (the topics of README.md). It only reads:
nothing in the broker depends on it, and a store that cannot answer (it failed, or the
broker is stepping down) costs one warning, not a traceback. The peers add their own values
through `sources` (the wiring appends the links' and bridges').
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ...store import StoreError
from ..core.router import Router
from .view import FIGURES, BrokerView

log = logging.getLogger("telemq.broker")

SYS_PREFIX = "$SYS/broker/"
_SYS_FIGURES = tuple(figure for figure in FIGURES if figure.sys)


class SysReporter:
    """Publishes `$SYS/broker/...` (see module docstring)."""

    def __init__(self, interval: float, view: BrokerView, router: Router) -> None:
        self._interval = interval
        self._view = view
        self._router = router
        # More `$SYS/broker/` values (links.py): key under the prefix -> value.
        self.sources: list[Callable[[], dict[str, str]]] = []

    async def run(self) -> None:
        while True:
            try:
                await self.publish()
            except StoreError as error:
                log.warning("$SYS update skipped: %s", error)
            except Exception:
                log.exception("$SYS update failed")
            await asyncio.sleep(self._interval)

    async def publish(self) -> None:
        await self._view.refresh_store_stats()
        for topic, value in self.values().items():
            self._router.publish(topic, value.encode("utf-8"), 0, True)

    def values(self) -> dict[str, str]:
        overview = self._view.overview()
        figures = overview.values
        values = {"version": f"telemq {overview.version}"}
        for figure in _SYS_FIGURES:
            values[figure.sys] = str(int(figures[figure.key]))
        values["uptime"] = f"{values['uptime']} seconds"
        for source in self.sources:
            values.update(source())
        return {SYS_PREFIX + key: value for key, value in values.items()}
