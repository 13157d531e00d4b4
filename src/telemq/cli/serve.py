"""`telemq serve`: run the broker until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from .. import version_text
from ..broker import (
    BrokerConfig,
    ConfigError,
    HttpConfig,
    ListenerConfig,
    load_config,
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
    serve.add_argument("--store", choices=["sqlite", "memory"], help="store kind")
    serve.add_argument("--sync", choices=["full", "normal", "off"], help="store fsync policy")
    serve.add_argument("--sys-interval", type=float, help="seconds between $SYS updates")
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log verbosity (default info)",
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
    logging.getLogger("telemq.broker").info("%s, %s loop", version_text(), loop_name)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await run_broker(config, stop)

    try:
        asyncio.run(main())
    except ConfigError as error:  # a TLS file changed between validation and listening
        print(f"telemq: configuration error: {error}", file=sys.stderr)
        return 2
    except (OSError, StoreError) as error:
        print(f"telemq: cannot start: {error}", file=sys.stderr)
        return 2
    return 0
