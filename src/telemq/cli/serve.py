"""`telemq serve`: run the broker until SIGINT or SIGTERM.

With ``--ready-file PATH`` the broker writes, once every listener (MQTT and HTTP) is bound, a
JSON report of the ports it bound to PATH, and removes it when it stops:

    {"pid": 4242,
     "listeners": [{"host": "127.0.0.1", "ports": [41883], "sub_point": "", "tls": false},
                   ...],
     "http": [48080]}

`listeners` and `http` are in configuration order; a port configured as 0 is the one the
system picked. Whoever starts a broker on port 0 (the test suite does) learns its ports there,
and that this process (`pid`) bound them, without parsing the log.

With `[ha]` (docs/ha.md) the broker is a member of a group that elects its active broker
through the PostgreSQL store (`broker.ha`): it stands by until elected, and the ready file
is written once its standby listeners are bound (the same ports serve its active turns).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import version_text
from ..broker import (
    Broker,
    BrokerConfig,
    ConfigError,
    HttpConfig,
    Listener,
    ListenerConfig,
    load_config,
    reserve_descriptors,
    run_broker,
    tune_interpreter,
)
from ..store import StoreError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="run the broker",
        description="Run the MQTT broker. Flags override the configuration file.",
    )
    serve.add_argument("--config", "-c", help="TOML configuration file")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", "-p", type=int, help="listen port (default 1883)")
    serve.add_argument(
        "--http-port",
        type=int,
        help="also serve the journal over HTTP on this port, on --host (docs/pipeline.md)",
    )
    serve.add_argument("--data-dir", "-d", help="data directory (default ./telemq-data)")
    serve.add_argument(
        "--store",
        choices=["sqlite", "postgres", "memory"],
        help="store kind (postgres: give [store] dsn in the configuration file)",
    )
    serve.add_argument("--sync", choices=["full", "normal", "off"], help="store fsync policy")
    serve.add_argument("--sys-interval", type=float, help="seconds between $SYS updates")
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log verbosity (default info)",
    )
    serve.add_argument(
        "--ready-file",
        metavar="PATH",
        help="once every listener is bound, write the bound ports to PATH as JSON (with"
        " --port 0: the port the system picked); removed when the broker stops",
    )
    serve.add_argument(
        "--no-uvloop",
        action="store_true",
        help="use the default asyncio loop even if uvloop is installed",
    )
    serve.set_defaults(handler=run)


def build_config(args: argparse.Namespace) -> BrokerConfig:
    config = load_config(args.config)
    if args.host is not None or args.port is not None:
        first = config.listeners[0] if config.listeners else ListenerConfig()
        if args.host is not None:
            first.host = args.host
        if args.port is not None:
            first.port = args.port
        config.listeners[0:1] = [first]
    if args.http_port is not None:
        host = args.host if args.host is not None else config.listeners[0].host
        config.http.append(HttpConfig(host=host, port=args.http_port))
    if args.data_dir is not None:
        config.store.data_dir = args.data_dir
    if args.store is not None:
        config.store.kind = args.store
    if args.sync is not None:
        config.store.sync = args.sync
    if args.sys_interval is not None:
        config.sys.interval = args.sys_interval
    config.validate()
    return config


def ready_report(listeners: Sequence[Listener], http_ports: Sequence[int]) -> dict[str, object]:
    """What `--ready-file` holds (see the module docstring)."""
    return {
        "pid": os.getpid(),
        "listeners": [
            {
                "host": listener.config.host,
                "ports": list(listener.ports),
                "sub_point": listener.config.sub_point,
                "tls": bool(listener.config.certfile),
            }
            for listener in listeners
        ],
        "http": list(http_ports),
    }


def write_ready_file(path: Path, listeners: Sequence[Listener], http_ports: Sequence[int]) -> None:
    """The report, whole or not at all: written beside `path`, then renamed to it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(ready_report(listeners, http_ports)) + "\n", encoding="utf-8")
    os.replace(partial, path)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = build_config(args)
    except ConfigError as error:
        print(f"telemq: configuration error: {error}", file=sys.stderr)
        return 2
    loop_name = "asyncio"
    if not args.no_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            uvloop.install()
            loop_name = "uvloop"
    tune_interpreter()
    reserve_descriptors()
    logging.getLogger("telemq.broker").info("%s, %s loop", version_text(), loop_name)

    ready_file = Path(args.ready_file) if args.ready_file is not None else None
    written: list[Path] = []  # the ready file, once written: removed on the way out
    unwritable: list[OSError] = []  # the ready file could not be written: stop, exit 2

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)

        def ready(listeners: Sequence[Listener], http_ports: Sequence[int]) -> None:
            if ready_file is None:
                return
            try:
                write_ready_file(ready_file, listeners, http_ports)
                written.append(ready_file)
            except OSError as error:
                unwritable.append(error)
                stop.set()

        def started(broker: Broker) -> None:
            ready(broker.listeners, broker.http.ports if broker.http is not None else [])

        if config.ha.enabled:
            from ..broker.ha import run_ha_broker

            await run_ha_broker(config, stop, ready)
        elif config.store.kind == "postgres":
            from ..broker.recovery import run_restarting

            await run_restarting(config, stop, started)
        else:
            await run_broker(config, stop, started)

    try:
        asyncio.run(main())
    except ConfigError as error:  # a TLS file changed between validation and listening
        print(f"telemq: configuration error: {error}", file=sys.stderr)
        return 2
    except (OSError, StoreError) as error:
        print(f"telemq: cannot start: {error}", file=sys.stderr)
        return 2
    finally:
        for path in written:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
    if unwritable:
        print(f"telemq: cannot write the ready file: {unwritable[0]}", file=sys.stderr)
        return 2
    return 0
