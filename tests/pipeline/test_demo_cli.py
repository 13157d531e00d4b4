"""`telemq demo` end to end, and the command line's handling of a missing Java and of
mistakes in a pipeline command's arguments."""

from __future__ import annotations

import argparse
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from telemq.cli import pipeline as pipeline_cli
from telemq.cli.main import main
from telemq.pipeline.spark import JavaNotFoundError, check_java
from telemq.store import SqliteStore
from testsupport.process import free_port

from .helpers import append_journal, telemetry


@pytest.mark.spark
def test_demo_runs_to_completion(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "demo"
    args = ["demo", "--duration", "4", "--sensors", "3", "--rate", "5", "--workdir", str(work)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "== results ==" in out
    sent = int(re.search(r"sensors published ([\d,]+) messages", out)[1].replace(",", ""))  # type: ignore[index]
    lake = int(re.search(r"lake: ([\d,]+) rows", out)[1].replace(",", ""))  # type: ignore[index]
    assert sent > 0 and lake == sent  # commands are not journaled
    assert re.search(r"aggregates: \d+ rows \(window 10s\) for 3 topic\(s\)", out)
    assert "retained on the broker under telemq/aggregates/: 3 topic(s)" in out
    # The live alerts (the broker's RegSub with the filter) arrived, as many as the replay
    # finds: the demo's fallback line (no MQ commands) would fail here.
    alerts = re.search(
        r"alerts \(temp > 30\): ([\d,]+) found by the Spark replay, ([\d,]+) delivered live "
        r"by the broker \(same\)",
        out,
    )
    assert alerts is not None, out
    assert int(alerts[1].replace(",", "")) == int(alerts[2].replace(",", "")) > 0
    assert (work / "lake" / "journal").is_dir() and str(work / "lake" / "journal") in out
    # The default format, and how to open it without Spark.
    assert "of a delta table" in out and (work / "lake" / "journal" / "_delta_log").is_dir()
    assert f"DeltaTable('{work / 'lake' / 'journal'}').to_pandas()" in out


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--duration", "0", "--duration: expected seconds > 0, got 0"),
        ("--duration", "nan", "--duration: expected seconds > 0, got nan"),
        ("--sensors", "0", "--sensors: expected 1 or more, got 0"),
        ("--rate", "-1", "--rate: expected messages per second > 0, got -1"),
        ("--rate", "inf", "--rate: expected messages per second > 0, got inf"),
        ("--workdir", "", "not a directory"),
    ],
)
def test_demo_options_are_checked_first(
    option: str, value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad option: one line and exit 2, before Java is looked for or a broker started."""
    if option == "--workdir":
        value = str(tmp_path / "a-file")
        Path(value).write_text("")
    assert main(["demo", option, value]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def _fake_java(tmp_path: Path, version: str) -> Path:
    home = tmp_path / f"jdk-{version}"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2020-01-01' >&2\n")
    java.chmod(0o755)
    return home


def test_missing_or_old_java_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match=r"no java was found.*openjdk-17-jre-headless"):
        check_java()
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, "11.0.2")))
    with pytest.raises(JavaNotFoundError, match="is Java 11"):
        check_java()
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, "1.8.0_292")))
    with pytest.raises(JavaNotFoundError, match="is Java 8"):
        check_java()
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, "21.0.1")))
    assert check_java() == 21
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    assert main(["demo", "--duration", "1"]) == 2
    assert "Java 17+" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            sqlite3.DatabaseError("file is not a database"),
            "cannot read the broker's store in data: file is not a database",
        ),
        (
            NotADirectoryError(20, "Not a directory", "lake/journal"),
            "lake/journal: Not a directory",
        ),
    ],
)
def test_store_and_file_errors_are_one_line(
    error: Exception, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged store or a lake path that is a file: exit 2 and the problem, no traceback."""

    @pipeline_cli._guarded
    def job(args: argparse.Namespace) -> int:
        raise error

    assert job(argparse.Namespace(data_dir="data")) == 2
    assert message in capsys.readouterr().err


def test_mistakes_are_refused_before_spark_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every mistake a command can see without Spark: one line, exit 2, no JVM started and no
    lake directory created (ingest on a wrong data directory used to fail inside a Spark
    streaming query with a traceback, after creating the lake)."""

    def no_session(args: argparse.Namespace, app: str) -> None:
        raise AssertionError(f"{app} started Spark for a mistake")

    monkeypatch.setattr(pipeline_cli, "_session", no_session)
    data = tmp_path / "data"
    append_journal(data, telemetry(10))
    store = SqliteStore(data / "telemq.db", "off")
    store.load()
    store.close()
    empty_lake, lake = tmp_path / "empty-lake", tmp_path / "lake"
    (lake / "journal" / "date=2026-11-24").mkdir(parents=True)
    (lake / "journal" / "date=2026-11-24" / "batch-0.parquet").write_bytes(b"")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    new_lake = str(tmp_path / "new-lake")
    nowhere = str(tmp_path / "nowhere")
    closed = free_port()  # nothing listens there
    cases: list[tuple[list[str], str]] = [
        (["ingest", "-d", nowhere, "-l", new_lake], "no store file at"),
        (["ingest", "-d", str(data), "-l", str(a_file)], "not a directory"),
        (["ingest", "-d", str(data), "-l", new_lake, "--continuous", "--trigger", "0"],
         "trigger: expected seconds > 0, got 0"),
        (["ingest", "-d", str(data), "-l", new_lake, "--max-rows-per-batch", "0"],
         "max rows per batch: expected 1 or more, got 0"),
        (["ingest", "-d", str(data), "-l", new_lake, "--duration", "-1"],
         "duration: expected seconds >= 0"),
        # A lake keeps its table format; plain Parquet cannot be compacted.
        (["ingest", "-d", str(data), "-l", str(lake), "--format", "delta"],
         "is a parquet table, not delta: give --format parquet"),
        (["compact", "-l", str(lake)], "compact needs a table format with a log"),
        (["compact", "-l", str(empty_lake)], "no journal table in"),
        (["compact", "-l", str(lake), "--format", "delta", "--keep-hours", "-1"],
         "--keep-hours: expected hours >= 0"),
        (["aggregate", "-l", str(lake), "--window", "0m"], "window: expected a duration"),
        (["aggregate", "-l", str(empty_lake)], "no journal table in"),
        (["aggregate", "-l", str(lake), "--fields", "temp,bad-name"],
         "fields: 'bad-name' is not a field name"),
        (["aggregate", "-l", str(lake), "--publish-to", "nohost"], "--publish-to: expected"),
        (["replay", "-d", nowhere, "--topics", "a/#"], "no store file at"),
        (["replay", "-d", str(data), "--topics", "a/+b"], "topics:"),
        (["replay", "-d", str(data), "--topics", "a/#", "--filter", "x >"],
         "invalid filter (reason 3150)"),
        (["replay", "-d", str(data), "--subscription", "nobody"],
         "no subscription or queue named 'nobody'"),
        (["replay", "-d", str(data), "--topics", "a/#", "--from-seq", "5", "--to-seq", "3"],
         "from seq 5 is after to seq 3"),
        (["replay", "-d", str(data), "--topics", "a/#", "--from-seq", "0"],
         "from seq: expected 1 or more, got 0"),
        (["replay", "-d", str(data), "--topics", "a/#", "--limit", "-1"],
         "limit: expected 0 or more, got -1"),
        (["replay", "-d", str(data), "--topics", "a/#", "--deliver"], "needs --queue"),
        # The journal service: a URL that is none, nobody listening, options without it.
        (["ingest", "--journal", "ftp://h:1", "-l", new_lake], "expected http://host:port"),
        (["ingest", "--journal", "http://h:1/x", "-l", new_lake], "give the service's root"),
        (["ingest", "--journal", f"http://127.0.0.1:{closed}", "-l", new_lake],
         f"journal service http://127.0.0.1:{closed}: [Errno 111] Connection refused"),
        (["ingest", "-d", str(data), "-l", new_lake, "--journal-user", "u"],
         "--journal-user goes with --journal"),
        # --subscription over the journal service asks the broker's admin API: nobody there.
        (["replay", "--journal", f"http://127.0.0.1:{closed}", "--subscription", "s"],
         f"journal service http://127.0.0.1:{closed}: [Errno 111] Connection refused"),
    ]  # fmt: skip
    for arguments, message in cases:
        assert main(["pipeline", *arguments, "-q"]) == 2, arguments
        err = capsys.readouterr().err
        assert message in err, (arguments, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
    assert not Path(new_lake).exists() and not empty_lake.exists()


@pytest.mark.spark
def test_a_pipeline_command_prints_telemq_lines_only(tmp_path: Path) -> None:
    """A fresh `telemq pipeline` process: the JVM's start-up lines, log4j and Spark's
    warnings go to the file the command names, not to the terminal."""
    data, lake, log = tmp_path / "data", tmp_path / "lake", tmp_path / "spark.log"
    append_journal(data, telemetry(20))
    command = [sys.executable, "-m", "telemq", "pipeline", "ingest", "-d", str(data)]
    command += ["--lake", str(lake), "--master", "local[1]", "--spark-log", str(log)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert f"Spark's own messages go to {log}" in done.stdout
    # stderr holds the job's progress lines ("[   1.2s] ..."), and nothing of the JVM's.
    assert all(line.startswith("[") for line in done.stderr.splitlines()), done.stderr
    for line in (done.stdout + done.stderr).splitlines():
        assert not re.search(r"(WARN|log4j|SLF4J|NativeCodeLoader|Exception)", line), line
    assert log.stat().st_size > 0  # the JVM said something, there
