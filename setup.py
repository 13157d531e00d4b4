"""Builds telemq, compiling the modules every message goes through with mypyc.

The compiled modules are the same Python source, checked by mypy, turned into C extensions:
QoS 0 fan-in runs about 1.8x faster (docs/performance.md, "the compiled build"). Everything else
stays interpreted. Without a C compiler and Python's headers, or with
``TELEMQ_PURE_PYTHON=1``, telemq installs as pure Python and behaves the same, only slower.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

# The per-message path: decoding (MQTT 5.0's and its properties too) and the connection
# state machine, routing, sessions, the broker's event handlers and its group commit. Listed
# here, not discovered: a module joins only once the test suite passes against its compiled
# form.
COMPILED = [
    "src/telemq/protocol/codec.py",
    "src/telemq/protocol/codec5.py",
    "src/telemq/protocol/connection.py",
    "src/telemq/protocol/dial_packets.py",
    "src/telemq/protocol/dialer.py",
    "src/telemq/protocol/errors.py",
    "src/telemq/protocol/events.py",
    "src/telemq/protocol/flows.py",
    "src/telemq/protocol/handshake.py",
    "src/telemq/protocol/lifecycle.py",
    "src/telemq/protocol/packets.py",
    "src/telemq/protocol/peer5.py",
    "src/telemq/protocol/properties.py",
    "src/telemq/protocol/property_table.py",
    "src/telemq/protocol/reasons.py",
    "src/telemq/protocol/topics.py",
    "src/telemq/protocol/wire.py",
    "src/telemq/network/envelope.py",
    "src/telemq/subscriptions/options5.py",
    "src/telemq/subscriptions/registry.py",
    "src/telemq/subscriptions/subscription.py",
    "src/telemq/subscriptions/topic_tree.py",
    "src/telemq/broker/peers/bridges.py",
    "src/telemq/broker/core/message.py",
    "src/telemq/broker/core/committer.py",
    "src/telemq/broker/core/delivery.py",
    "src/telemq/broker/peers/links.py",
    "src/telemq/broker/peers/arrivals.py",
    "src/telemq/broker/peers/link_control.py",
    "src/telemq/broker/peers/remote_queues.py",
    "src/telemq/broker/core/retained.py",
    "src/telemq/broker/core/router.py",
    "src/telemq/broker/core/sparkplug.py",
    "src/telemq/broker/core/releases.py",
    "src/telemq/broker/core/command_puts.py",
    "src/telemq/broker/server.py",
    "src/telemq/broker/core/session.py",
    "src/telemq/broker/core/turns.py",
    "src/telemq/broker/core/peer_address.py",
    "src/telemq/broker/core/deadlines.py",
    "src/telemq/broker/core/sessions.py",
    "src/telemq/broker/core/admission.py",
    "src/telemq/broker/core/shares.py",
    "src/telemq/broker/core/stats.py",
    "src/telemq/broker/core/rooms.py",
    "src/telemq/broker/core/subscribe.py",
    "src/telemq/broker/core/wills.py",
]


class OptionalBuildExt(build_ext):
    """A failed compilation installs the pure-Python modules instead of failing the install.

    All or nothing: the compiled modules share one library, so none is kept if any failed.
    """

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:
            self._fall_back(error)

    def _fall_back(self, error: Exception) -> None:
        print(f"telemq: mypyc build failed ({error}); installing pure Python", file=sys.stderr)
        for ext in self.extensions:
            path = self.get_ext_fullpath(ext.name)
            if os.path.exists(path):
                os.remove(path)
        self.extensions = []


# Commands that only write the project's metadata: pip runs `egg_info` and `dist_info`, each
# in a process of its own, before `bdist_wheel`, and mypyc's type check and C generation
# (half a minute each) would run in all three.
METADATA_ONLY = {"egg_info", "dist_info", "sdist", "clean"}


def compiled_extensions() -> list[Any]:
    if os.environ.get("TELEMQ_PURE_PYTHON") == "1":
        return []
    if len(sys.argv) > 1 and sys.argv[1] in METADATA_ONLY:
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("telemq: mypyc is not installed; installing pure Python", file=sys.stderr)
        return []
    # The modules left in Python (the HTTP listener, the journal's Arrow code) are read for
    # their types but not checked here: their libraries (aiohttp, pyarrow) are not in the
    # build's environment, and `mypy --strict` checks them in the test suite.
    options = ["--follow-imports=silent"]
    return list(mypycify(options + COMPILED, opt_level="3", group_name="telemq"))


setup(ext_modules=compiled_extensions(), cmdclass={"build_ext": OptionalBuildExt})
