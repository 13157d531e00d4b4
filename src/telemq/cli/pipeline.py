"""`telemq pipeline ingest|aggregate|replay|compact`: the Spark jobs over a broker's journal.

Each command checks its arguments and the store or lake first (a mistake costs no JVM start
and leaves no directory behind), then creates a Spark session (``--master``, default
``local[*]``), runs one job of `telemq.pipeline` with progress lines on stderr, and prints a
summary on stdout. pyspark is imported only when a command runs, so the rest of the CLI works
without it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from telemq.pipeline.table_format import (  # standard library only
    DEFAULT_FORMAT,
    FORMATS,
    QUARANTINE,
)

if TYPE_CHECKING:
    from telemq.pipeline.replay import ReplayPlan

Handler = Callable[[argparse.Namespace], int]
_INSTALL = "pip install 'telemq[spark]'"
PASSWORD_ENV = "TELEMQ_JOURNAL_PASSWORD"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pipeline = subparsers.add_parser(
        "pipeline",
        help="Spark jobs over the journal (ingest, aggregate, replay, compact)",
        description="Spark jobs over a broker's journal. Needs PySpark 4 and Java 17+.",
    )
    jobs = pipeline.add_subparsers(dest="job", metavar="JOB")
    pipeline.set_defaults(handler=lambda args: _help(pipeline))

    ingest = jobs.add_parser(
        "ingest",
        help="journal -> a Delta, Iceberg or Parquet table partitioned by date, exactly once",
        description="Copy the journal into the lake's journal table (partitioned by UTC date);"
        " every seq lands exactly once, also when the job is killed and run again.",
    )
    _journal_source(ingest)
    ingest.add_argument("--lake", "-l", required=True, help="the lake directory")
    _table_format(ingest, DEFAULT_FORMAT)
    ingest.add_argument("--checkpoint", help="checkpoint (default <lake>/_checkpoints/ingest)")
    mode = ingest.add_mutually_exclusive_group()
    mode.add_argument(
        "--once", action="store_true", help="ingest what is there, then stop (default)"
    )
    mode.add_argument("--continuous", action="store_true", help="keep ingesting until stopped")
    ingest.add_argument("--trigger", type=float, default=2.0, help="continuous: seconds per batch")
    ingest.add_argument("--max-rows-per-batch", type=int, help="rows per micro-batch")
    ingest.add_argument("--duration", type=float, help="continuous: stop after this many seconds")
    typed = ingest.add_mutually_exclusive_group()
    typed.add_argument(
        "--schema",
        metavar="DDL",
        help="typed columns of JSON payloads, Spark DDL ('temp DOUBLE, sensor STRING');"
        " payloads that do not fit go to the quarantine table",
    )
    typed.add_argument(
        "--infer", action="store_true", help="typed columns from a sample of the payloads"
    )
    ingest.add_argument(
        "--merge-schema",
        action="store_true",
        help="let --schema/--infer add fields to the schema the table records",
    )
    ingest.add_argument(
        "--sparkplug",
        action="store_true",
        help="also decode Sparkplug B publications into the tables sparkplug_metrics and"
        " sparkplug_quarantine beside the journal",
    )
    _common(ingest)
    ingest.set_defaults(handler=run_ingest_command)

    aggregate = jobs.add_parser(
        "aggregate",
        help="windowed per-topic count/min/max/avg of numeric JSON fields",
        description="Aggregate the lake's journal table per topic and time window into"
        " <lake>/aggregates/<window>; optionally publish each topic's latest window back to a"
        " broker as a retained message.",
    )
    aggregate.add_argument("--lake", "-l", required=True, help="the lake directory")
    _table_format(aggregate, None)
    aggregate.add_argument("--window", default="1m", help="window length: 30s, 1m, 1h, 1d")
    aggregate.add_argument("--fields", help="numeric fields, comma-separated (default: found)")
    aggregate.add_argument("--publish-to", metavar="HOST:PORT", help="broker to publish to")
    aggregate.add_argument(
        "--topic-prefix", default="telemq/aggregates", help="topic prefix of published results"
    )
    aggregate.add_argument("--username", help="MQTT user name for --publish-to")
    aggregate.add_argument("--password", help="MQTT password for --publish-to")
    aggregate.add_argument("--show", type=int, default=10, help="rows of the summary table")
    _common(aggregate)
    aggregate.set_defaults(handler=run_aggregate_command)

    replay = jobs.add_parser(
        "replay",
        help="a subscription's topic and SQL filter over a journal range",
        description="Evaluate a stored subscription (by SubName or queue) or topic filters and"
        " an SQL filter over a range of the journal, on Spark.",
    )
    _journal_source(replay)
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--subscription",
        help="a subscription the broker holds, by SubName or queue name (with --journal: read"
        " from the admin API, as an administrator)",
    )
    which.add_argument("--topics", help="MQTT topic filters, comma-separated")
    replay.add_argument("--filter", help="SQL filter (design section 7)")
    replay.add_argument("--from-seq", type=int, help="first seq (default: the oldest)")
    replay.add_argument("--to-seq", type=int, help="last seq (default: the newest)")
    replay.add_argument("--output", "-o", help="write the matches here (Parquet)")
    replay.add_argument("--limit", type=int, default=20, help="matches to print")
    replay.add_argument(
        "--deliver", action="store_true", help="put the matches on the subscriber's queue"
    )
    replay.add_argument(
        "--queue", help="--deliver: the queue (default: the subscription's; needed with --topics)"
    )
    replay.add_argument(
        "--broker", default="127.0.0.1:1883", metavar="HOST:PORT", help="--deliver: the broker"
    )
    replay.add_argument(
        "--qos", type=int, choices=(0, 1, 2), default=1, help="--deliver: QoS (default 1)"
    )
    replay.add_argument("--username", help="--deliver: MQTT user name")
    replay.add_argument("--password", help="--deliver: MQTT password")
    replay.add_argument(
        "--dry-run",
        action="store_true",
        help="check everything, print the subscriptions and seq range, and stop before Spark",
    )
    _common(replay)
    replay.set_defaults(handler=run_replay_command)

    compact = jobs.add_parser(
        "compact",
        help="merge the journal table's small files and delete files old versions no longer need",
        description="Compact the lake's journal table (Delta or Iceberg): rewrite small files"
        " into larger ones in one commit, then delete the files that versions older than"
        " --keep-hours removed. Safe while ingest writes.",
    )
    compact.add_argument("--lake", "-l", required=True, help="the lake directory")
    _table_format(compact, None)
    compact.add_argument(
        "--keep-hours",
        type=float,
        default=168.0,
        help="keep the files of versions newer than this (default 168, a week)",
    )
    _common(compact)
    compact.set_defaults(handler=run_compact_command)


def _table_format(parser: argparse.ArgumentParser, default: str | None) -> None:
    """--format, and Iceberg's --catalog and --table."""
    what = f"default {default}" if default else "default: what the lake holds"
    parser.add_argument(
        "--format", choices=FORMATS, default=default, help=f"the table format ({what})"
    )
    parser.add_argument("--catalog", metavar="URI", help="--format iceberg: the catalog")
    parser.add_argument("--table", metavar="NAME", help="--format iceberg: the table's name")


def _journal_source(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", "-d", help="the broker's data directory (on this host)")
    where.add_argument(
        "--journal", metavar="URL", help="the broker's journal service, http[s]://host:port"
    )
    parser.add_argument("--journal-user", help="--journal: the broker user to read as")
    parser.add_argument(
        "--journal-password",
        help=f"--journal: its password (better: the {PASSWORD_ENV} environment variable)",
    )
    parser.add_argument("--journal-cafile", help="--journal over https: the CA to trust")


def _where(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    """The journal a job reads (data directory or service URL) and its client's options."""
    options = {
        "user": args.journal_user,
        "password": args.journal_password or os.environ.get(PASSWORD_ENV),
        "cafile": args.journal_cafile,
    }
    if args.journal is None:
        for name in ("user", "password", "cafile"):
            if getattr(args, f"journal_{name}"):
                raise ValueError(f"--journal-{name} goes with --journal")
        return args.data_dir, {}
    from telemq.journal.client import JournalClient

    JournalClient.parse(args.journal)  # a URL that is none: one line naming it
    return args.journal, {k: v for k, v in options.items() if v}


# The JVM's own output (log4j, Spark's warnings), kept off the terminal.
SPARK_LOG = "telemq-spark.log"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.executor.memory=2g (repeatable)",
    )
    parser.add_argument("--spark-ui", action="store_true", help="enable Spark's web UI")
    parser.add_argument(
        "--spark-log",
        default=SPARK_LOG,
        metavar="FILE",
        help=f"where the JVM's own messages go (default ./{SPARK_LOG})",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines")


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _fail(message: str) -> int:
    print(f"telemq: {message}", file=sys.stderr)
    return 2


@contextlib.contextmanager
def _session(args: argparse.Namespace, app: str) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from telemq.pipeline.spark import spark_session

    owned = SparkSession.getActiveSession() is None  # else: reuse it, and leave it running
    settings = _settings(args.conf)
    if owned and not args.quiet:
        print(f"telemq: Spark's own messages go to {args.spark_log}", flush=True)
    log_file = args.spark_log if owned else None
    spark = spark_session(args.master, app, ui=args.spark_ui, conf=settings, log_file=log_file)
    try:
        yield spark
    finally:
        if owned:
            spark.stop()


def _settings(pairs: list[str]) -> dict[str, str]:
    settings = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"--conf: expected KEY=VALUE, got {pair!r}")
        settings[key.strip()] = value
    return settings


def _guarded(run: Handler) -> Handler:
    """Turn the errors a user can fix into one line and exit code 2."""

    def handler(args: argparse.Namespace) -> int:
        try:
            for module in ("pyarrow", "pyspark"):
                importlib.import_module(module)

            from telemq.filters import FilterError
            from telemq.journal.client import JournalServiceError
            from telemq.pipeline.spark import JavaNotFoundError
            from telemq.store import StoreError
        except ImportError as exc:
            return _fail(f"the pipeline needs PySpark 4 and pyarrow ({exc}): {_INSTALL}")
        try:
            return run(args)
        except JavaNotFoundError as exc:
            return _fail(str(exc))
        except FilterError as exc:
            return _fail(f"invalid filter (reason {exc.reason}) at position {exc.position}: {exc}")
        except (StoreError, FileNotFoundError, LookupError, ValueError, RuntimeError) as exc:
            return _fail(str(exc))
        except JournalServiceError as exc:
            return _fail(str(exc))
        except sqlite3.Error as exc:  # a damaged or foreign telemq.db
            where = getattr(args, "data_dir", None)
            return _fail(f"cannot read the broker's store in {where}: {exc}")
        except OSError as exc:  # e.g. a lake path that is a file
            return _fail(f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc))

    return handler


def _address(text: str, option: str = "--publish-to") -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{option}: expected HOST:PORT, got {text!r}")
    return host, int(port)


@_guarded
def run_ingest_command(args: argparse.Namespace) -> int:
    from telemq.pipeline.ingest import check_ingest, run_ingest, table_uri
    from telemq.pipeline.progress import Reporter
    from telemq.pipeline.table_format import check_format

    where, journal_options = _where(args)
    check_ingest(
        where,
        args.lake,
        trigger_seconds=args.trigger,
        max_rows_per_batch=args.max_rows_per_batch,
        duration=args.duration,
        journal_options=journal_options,
    )
    check_format(args.lake, args.format, args.catalog)
    if args.schema is not None:  # a bad schema costs no JVM start
        from telemq.pipeline.typed_columns import PayloadSchema

        PayloadSchema.parse(args.schema)
    report = Reporter(quiet=args.quiet)
    stop = threading.Event()
    if args.continuous:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
    mode = "continuous" if args.continuous else "once"
    report(f"ingest: {where} -> {args.lake} ({args.format}, {mode})")
    with _session(args, "telemq-ingest") as spark, report.watch(spark, "ingest"):
        result = run_ingest(
            spark,
            where,
            args.lake,
            journal_options=journal_options,
            checkpoint=args.checkpoint,
            continuous=args.continuous,
            trigger_seconds=args.trigger,
            max_rows_per_batch=args.max_rows_per_batch,
            duration=args.duration,
            stop=stop,
            progress=report,
            table_format=args.format,
            catalog=args.catalog,
            table_name=args.table,
            schema=args.schema,
            infer=args.infer,
            merge_schema=args.merge_schema,
            sparkplug=args.sparkplug,
        )
    lake = result.lake_stats
    seqs = "" if lake.first_seq is None else f", seq {lake.first_seq:,}..{lake.last_seq:,}"
    print(
        f"ingested {result.rows:,} rows in {len(result.batches)} batch(es), {result.seconds:.1f}s"
    )
    print(
        f"lake {table_uri(result.lake)} ({result.table_format}): {lake.rows:,} rows"
        f" in {lake.files} file(s){seqs}"
    )
    if lake.dates:
        print(f"  dates: {', '.join(lake.dates)}")
    if result.payload_schema is not None:
        print(f"payload schema: {result.payload_schema}")
        print(f"quarantined {result.quarantined:,} rows into the {QUARANTINE} table")
    if result.sparkplug is not None:
        metrics, held = result.sparkplug
        print(f"sparkplug: {metrics:,} metric rows, {held:,} rows quarantined")
    print(f"checkpoint {result.checkpoint}")
    return 0


def print_aggregates(latest: list[dict[str, Any]], fields: list[str], show: int) -> None:
    """A small table: each topic's latest window."""
    if not latest:
        return
    head = ["topic", "window_start (UTC)", "count"] + [f"{f} avg (min..max)" for f in fields]
    rows = []
    for r in latest[:show]:
        start = r["window_start"]
        start_text = start.strftime("%Y-%m-%d %H:%M:%S") if start is not None else "-"
        cells = [str(r["topic"]), start_text, str(r["count"])]
        for f in fields:
            key = f.replace(".", "_")
            if r.get(f"{key}_count"):
                cells.append(f"{r[f'{key}_avg']:.2f} ({r[f'{key}_min']:g}..{r[f'{key}_max']:g})")
            else:
                cells.append("-")
        rows.append(cells)
    widths = [max(len(x) for x in column) for column in zip(head, *rows, strict=False)]
    for line in [head, *rows]:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
    if len(latest) > show:
        print(f"  ... {len(latest) - show} more topic(s)")


@_guarded
def run_aggregate_command(args: argparse.Namespace) -> int:
    from telemq.pipeline.aggregate import check_aggregate, run_aggregate
    from telemq.pipeline.progress import Reporter

    report = Reporter(quiet=args.quiet)
    fields = [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None
    publish = _address(args.publish_to) if args.publish_to else None
    check_aggregate(args.lake, args.window, fields, catalog=args.catalog)
    sink: dict[str, str] = {}
    if args.username:
        sink["username"] = args.username
    if args.password:
        sink["password"] = args.password
    with _session(args, "telemq-aggregate") as spark, report.watch(spark, "aggregate"):
        result = run_aggregate(
            spark,
            args.lake,
            args.window,
            fields=fields,
            publish_to=publish,
            topic_prefix=args.topic_prefix,
            sink_options=sink,
            progress=report,
            table_format=args.format,
            catalog=args.catalog,
            table_name=args.table,
        )
    print(
        f"aggregated {result.input_rows:,} messages into {result.rows:,} rows"
        f" ({len(result.latest)} topic(s), window {result.window}) in {result.seconds:.1f}s"
    )
    print(f"table {result.table}")
    print_aggregates(result.latest, result.fields, args.show)
    if result.published:
        print(f"published {result.published} retained message(s) under {args.topic_prefix}/")
    return 0


def print_matches(preview: list[dict[str, Any]]) -> None:
    for row in preview:
        payload = bytes(row["payload"])
        text = payload.decode("utf-8", "replace")
        if len(text) > 80:
            text = text[:77] + "..."
        print(f"  {row['seq']:>10}  {row['topic']}  {text}")


def print_plan(
    plan: ReplayPlan, where: str, topics: list[str] | None, filter_text: str | None, qos: int
) -> None:
    """What a replay would read and evaluate (`--dry-run`): the checks have all passed."""
    print(f"dry run: would replay seq {plan.first_seq:,}..{plan.last_seq:,} of {where}")
    for sub in plan.subscriptions:
        point = f" (sub point {sub.sub_point!r})" if sub.sub_point else ""
        condition = f" WHERE {sub.filter}" if sub.filter else ""
        name = f" {sub.name!r}" if sub.name else ""
        print(f"  subscription{name} of queue {sub.queue!r}: {sub.topic_filter}{point}{condition}")
    if topics:
        condition = f" WHERE {filter_text}" if filter_text else ""
        print(f"  topics {', '.join(topics)}{condition}")
    elif filter_text:
        print(f"  and only where {filter_text}")
    if plan.queue is not None:
        print(f"  then deliver the matches to queue {plan.queue!r} at QoS {qos}")


@_guarded
def run_replay_command(args: argparse.Namespace) -> int:
    """Exit 0, or 1 when --deliver had matches refused by the broker (the summary says why)."""
    from telemq.pipeline.progress import Reporter
    from telemq.pipeline.replay import check_replay, run_replay

    for option in ("queue", "username", "password"):
        if getattr(args, option) and not args.deliver:
            return _fail(f"--{option} goes with --deliver")
    broker = _address(args.broker, "--broker")
    sink = {k: v for k, v in (("username", args.username), ("password", args.password)) if v}
    report = Reporter(quiet=args.quiet)
    topics = [t.strip() for t in args.topics.split(",")] if args.topics else None
    request: dict[str, Any] = {
        "topics": topics,
        "filter": args.filter,
        "subscription": args.subscription,
        "from_seq": args.from_seq,
        "to_seq": args.to_seq,
        "limit": args.limit,
        "deliver": args.deliver,
        "queue": args.queue,
        "qos": args.qos,
    }
    where, journal_options = _where(args)
    request["journal_options"] = journal_options
    plan = check_replay(where, **request)
    if args.dry_run:
        print_plan(plan, where, topics, args.filter, args.qos)
        return 0
    with _session(args, "telemq-replay") as spark, report.watch(spark, "replay"):
        result = run_replay(
            spark,
            where,
            **request,
            output=args.output,
            broker=broker,
            sink_options=sink,
            progress=report,
        )
    print(
        f"{result.matched:,} match(es) in seq {result.first_seq:,}..{result.last_seq:,}"
        f" ({result.seconds:.1f}s)"
    )
    print_matches(result.preview)
    if result.matched > len(result.preview):
        print(f"  ... {result.matched - len(result.preview):,} more")
    if result.output is not None:
        print(f"written to {result.output}")
    if result.queue is None:
        return 0
    print(f"delivered {result.delivered:,} of {result.matched:,} to queue {result.queue!r}")
    if result.refused:
        print(f"refused {result.refused:,} (first: {result.refusal})")
        return 1
    return 0


@_guarded
def run_compact_command(args: argparse.Namespace) -> int:
    from telemq.pipeline.lakefs import lake_uri
    from telemq.pipeline.parquet_table import COMPACT_REFUSED, found_local_format
    from telemq.pipeline.progress import Reporter
    from telemq.pipeline.table_format import LakeError, check_format, detect_format, open_table

    if not args.keep_hours >= 0:
        raise ValueError(f"--keep-hours: expected hours >= 0, got {args.keep_hours:g}")
    known = args.format
    if known is not None:
        check_format(args.lake, known, args.catalog)
    elif args.catalog is None and lake_uri(args.lake).startswith("file:"):
        known = found_local_format(args.lake)
        if known is None:
            raise LakeError(f"no journal table in {args.lake}: run telemq pipeline ingest first")
    if known == "parquet":
        raise LakeError(COMPACT_REFUSED)
    report = Reporter(quiet=args.quiet)
    with _session(args, "telemq-compact") as spark:
        table_format = known or detect_format(spark, args.lake, args.catalog)
        table = open_table(
            table_format, spark, args.lake, query_id=None, catalog=args.catalog, table=args.table
        )
        table.check()
        report(f"compact: {args.lake} ({table_format}), keeping {args.keep_hours:g} hour(s)")
        print(table.compact(args.keep_hours))
        stats = table.stats()
    print(f"table: {stats.rows:,} rows in {stats.files} file(s)")
    return 0
