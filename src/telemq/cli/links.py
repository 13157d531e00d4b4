"""`telemq links forget NAME`: drop what a broker still holds for a link it no longer has.

A `[[links]]` entry taken out of the configuration leaves its session `$link/NAME` in the
store: the broker stops adding to it at start (and says so in a WARNING), but keeps the
messages it holds, so that a link removed by mistake loses nothing once configured again.
This command deletes that session, its queued and in-flight messages and what the neighbour
had sent but not released, in one transaction. It works on the store itself (the SQLite
file, or the PostgreSQL database `[store]` names), so the broker must be stopped: the
store's lock refuses it otherwise. A link still configured is refused
too (its session would be made again at the next start, empty: forget is for links gone).
"""

from __future__ import annotations

import argparse
import sys

from ..broker import ConfigError, load_config
from ..store import StoreError, WriteBatch, open_store
from ..subscriptions import LINK_QUEUE_PREFIX


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    links = subparsers.add_parser(
        "links",
        help="what the store holds for links to other brokers",
        description="Act on the store of a stopped broker for its links (docs/network.md).",
    )
    actions = links.add_subparsers(dest="action", metavar="ACTION", required=True)
    forget = actions.add_parser(
        "forget",
        help="drop the session and messages of a link no longer configured",
        description=(
            "Delete the session $link/NAME, with the messages it holds, from the store of a "
            "stopped broker whose configuration no longer has that link."
        ),
    )
    forget.add_argument("name", help="the neighbour broker's name")
    forget.add_argument("--config", "-c", help="the broker's TOML configuration file")
    forget.add_argument("--data-dir", "-d", help="data directory (overrides the configuration)")
    forget.set_defaults(handler=run_forget)


def run_forget(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except (ConfigError, OSError) as error:
        return _fail(str(error))
    if args.data_dir is not None:
        config.store.data_dir = args.data_dir
    name: str = args.name
    if any(link.name == name for link in config.links):
        return _fail(f"link {name!r} is in the configuration: take its [[links]] entry out first")
    if config.store.kind == "memory":
        return _fail(f"the {config.store.kind} store keeps nothing between runs")
    client_id = LINK_QUEUE_PREFIX + name
    try:
        store = open_store(
            config.store.kind,
            config.store.data_dir,
            config.store.sync,
            postgres=config.store.postgres(),
        )
    except (StoreError, ValueError) as error:
        return _fail(str(error))
    where = config.store.postgres() or config.store.data_dir
    try:
        state = store.load()
        if not any(record.client_id == client_id for record in state.sessions):
            return _fail(f"the store in {where} has no session for link {name!r}")
        queued = sum(1 for delivery in state.deliveries if delivery.client_id == client_id)
        held = sum(1 for incoming in state.incoming if incoming.client_id == client_id)
        batch = WriteBatch()
        batch.delete_session(client_id)
        store.commit(batch)
    except StoreError as error:
        return _fail(str(error))
    finally:
        store.close()
    print(
        f"link {name!r} forgotten: {queued} messages owed to it and {held} received from it "
        "but not released are dropped"
    )
    return 0


def _fail(message: str) -> int:
    print(f"telemq links forget: {message}", file=sys.stderr)
    return 2
