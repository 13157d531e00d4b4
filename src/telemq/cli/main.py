"""Entry point of the `telemq` command.

Each sub-command lives in its own module with `register(subparsers)`, which
adds its parser and sets `handler`; the modules parse arguments and call public
APIs, holding no logic of their own. Errors a user can fix (a bad config key, a
port in use) end with a one-line message naming the problem and exit code 2,
not a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from collections.abc import Callable, Sequence

from .. import version_text

# Sub-command modules, in help order. A module that is not installed (an
# optional part of telemq) simply does not add its command.
COMMAND_MODULES = ("serve", "subs", "links", "passwd", "pipeline", "demo")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="telemq",
        description="telemq: an MQTT broker with the IBM MQ publish/subscribe model",
    )
    parser.add_argument("--version", action="version", version=version_text())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module_name = f"{__package__}.{name}"
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return handler(args)
