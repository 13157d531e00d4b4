"""`lakefs`: the lake's file operations through Hadoop's FileSystem, on ``file:`` URIs and on
plain local paths (what hdfs:// and s3a:// get through the same code)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from telemq.pipeline.lakefs import FileInfo, LakeFileSystem, join, lake_uri

pytestmark = pytest.mark.spark

At = Callable[[Path], str]


@pytest.fixture(params=["file-uri", "file-uri-3-slashes", "plain-path"])
def at(request: pytest.FixtureRequest) -> At:
    """How a test names a local file: ``file:/x``, ``file:///x`` or the plain path ``/x``."""
    forms: dict[str, At] = {
        "file-uri": lake_uri,
        "file-uri-3-slashes": lambda path: f"file://{path}",
        "plain-path": str,
    }
    return forms[request.param]


@pytest.fixture
def lfs(spark: Any, tmp_path: Path) -> LakeFileSystem:
    return LakeFileSystem.for_uri(spark, lake_uri(tmp_path))


def arrow_stats(path: Path) -> tuple[int, int | None, int | None]:
    """What pyarrow reads from the same footer: the reference for `parquet_stats`."""
    meta = pq.read_metadata(path)
    names = meta.schema.names
    low = high = None
    for group in range(meta.num_row_groups):
        if "seq" not in names:
            break
        stats = meta.row_group(group).column(names.index("seq")).statistics
        if stats is None or not stats.has_min_max:
            continue
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    return meta.num_rows, low, high


# -- URIs (pure Python) --------------------------------------------------------------------


def test_lake_uri_of_relative_absolute_and_uri_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert lake_uri("lake") == f"file:{tmp_path}/lake"
    assert lake_uri("./lake/../lake2/") == f"file:{tmp_path}/lake2"
    assert lake_uri(Path("lake")) == f"file:{tmp_path}/lake"
    assert lake_uri("/srv/lake") == "file:/srv/lake"
    assert lake_uri("/srv/my lake") == "file:/srv/my lake"  # unescaped, as Hadoop wants it
    assert lake_uri("a:b") == f"file:{tmp_path}/a:b"  # no "/" after the colon: a local name
    for uri in ["hdfs://nn:8020/x", "s3a://bucket/x", "file:///x", "file:/x", "hdfs:///x"]:
        assert lake_uri(uri) == uri
    with pytest.raises(ValueError):
        lake_uri("")


def test_join() -> None:
    assert join("s3a://bucket", "lake", "journal") == "s3a://bucket/lake/journal"
    assert join("s3a://bucket/lake/", "/journal/", "date=2024-11-22") == (
        "s3a://bucket/lake/journal/date=2024-11-22"
    )
    assert join("hdfs://nn:8020/", "x") == "hdfs://nn:8020/x"
    assert join("file:/", "tmp") == "file:/tmp"
    assert join("file:///lake", "_checkpoints/ingest", "") == "file:///lake/_checkpoints/ingest"
    assert join("lake") == "lake"


# -- the file system ------------------------------------------------------------------------


def test_for_uri_of_an_unknown_scheme_is_an_oserror(spark: Any) -> None:
    with pytest.raises(OSError, match=r"nosuchfs://host/x: .*nosuchfs"):
        LakeFileSystem.for_uri(spark, "nosuchfs://host/x")


def test_another_file_systems_uri_is_an_oserror_naming_it(lfs: LakeFileSystem) -> None:
    with pytest.raises(OSError, match=r"hdfs://nn:8020/x: .*Wrong FS"):
        lfs.exists("hdfs://nn:8020/x")


def test_exists_is_dir_and_mkdirs(lfs: LakeFileSystem, tmp_path: Path, at: At) -> None:
    deep = tmp_path / "a" / "b" / "c"
    assert not lfs.exists(at(deep)) and not lfs.is_dir(at(deep))
    lfs.mkdirs(at(deep))
    assert deep.is_dir() and lfs.exists(at(deep)) and lfs.is_dir(at(deep))
    lfs.mkdirs(at(deep))  # already there: nothing to do
    (tmp_path / "file").write_text("x")
    assert lfs.exists(at(tmp_path / "file")) and not lfs.is_dir(at(tmp_path / "file"))
    with pytest.raises(FileExistsError, match="file"):
        lfs.mkdirs(at(tmp_path / "file"))
    with pytest.raises(OSError, match="not a directory"):
        lfs.mkdirs(at(tmp_path / "file" / "sub"))


def test_delete(lfs: LakeFileSystem, tmp_path: Path, at: At) -> None:
    lfs.write_text(at(tmp_path / "d" / "f.txt"), "x")
    assert (tmp_path / "d" / ".f.txt.crc").exists()  # Hadoop's local checksum file
    assert lfs.delete(at(tmp_path / "d" / "f.txt"))
    assert os.listdir(tmp_path / "d") == []  # the checksum went with it
    assert not lfs.delete(at(tmp_path / "d" / "f.txt"))
    lfs.write_text(at(tmp_path / "d" / "g.txt"), "x")
    with pytest.raises(OSError, match="not empty"):
        lfs.delete(at(tmp_path / "d"))
    assert (tmp_path / "d" / "g.txt").exists()
    assert lfs.delete(at(tmp_path / "d"), recursive=True)
    assert not (tmp_path / "d").exists()


def test_rename_into_an_existing_parent(lfs: LakeFileSystem, tmp_path: Path, at: At) -> None:
    (tmp_path / "staging").mkdir()
    (tmp_path / "table" / "date=2024-11-22").mkdir(parents=True)
    (tmp_path / "staging" / "part-0.parquet").write_bytes(b"PAR1")
    target = tmp_path / "table" / "date=2024-11-22" / "batch-1-0000.parquet"
    assert lfs.rename(at(tmp_path / "staging" / "part-0.parquet"), at(target)) is True
    assert target.read_bytes() == b"PAR1"
    assert not (tmp_path / "staging" / "part-0.parquet").exists()


def test_rename_refused_or_failing_is_an_oserror(
    lfs: LakeFileSystem, tmp_path: Path, at: At
) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    with pytest.raises(OSError, match=r"rename .*/a to .*/b: refused, the destination exists"):
        lfs.rename(at(tmp_path / "a"), at(tmp_path / "b"))  # Hadoop returns false
    assert (tmp_path / "a").read_text() == "a" and (tmp_path / "b").read_text() == "b"
    with pytest.raises(FileNotFoundError, match=r"rename .*/missing to .*FileNotFoundException"):
        lfs.rename(at(tmp_path / "missing"), at(tmp_path / "c"))  # Hadoop throws


def test_move_makes_the_parent_and_refuses_an_existing_target(
    lfs: LakeFileSystem, tmp_path: Path, at: At
) -> None:
    (tmp_path / "src").write_text("one")
    target = tmp_path / "table" / "date=2024-11-22" / "batch-1-0000.parquet"
    lfs.move(at(tmp_path / "src"), at(target))
    assert target.read_text() == "one" and not (tmp_path / "src").exists()
    (tmp_path / "src").write_text("two")
    with pytest.raises(FileExistsError, match="destination exists"):
        lfs.move(at(tmp_path / "src"), at(target))
    with pytest.raises(FileExistsError):  # Hadoop alone would move it into the directory
        lfs.move(at(tmp_path / "src"), at(target.parent))
    assert target.read_text() == "one" and (tmp_path / "src").read_text() == "two"


def test_glob_of_nothing_is_an_empty_list(lfs: LakeFileSystem, tmp_path: Path, at: At) -> None:
    assert lfs.glob(at(tmp_path / "date=*" / "*.parquet")) == []  # a wildcard: Hadoop's []
    assert lfs.glob(at(tmp_path / "missing")) == []  # no wildcard: Hadoop's null
    assert lfs.glob(at(tmp_path / "missing" / "*")) == []


def test_glob_lists_sorted_and_leaves_hidden_names_out(
    lfs: LakeFileSystem, tmp_path: Path, at: At
) -> None:
    for date, k, text in [("2024-11-23", 0, "xyz"), ("2024-11-22", 1, "x"), ("2024-11-22", 0, "")]:
        lfs.write_text(at(tmp_path / f"date={date}" / f"batch-7-{k:04d}.parquet"), text)
    (tmp_path / "date=2024-11-22" / "_SUCCESS").write_text("")
    (tmp_path / "date=2024-11-22" / ".batch-7-0002.parquet.tmp").write_text("")
    (tmp_path / "date=2024-11-22" / "other.txt").write_text("")
    found = lfs.glob(at(tmp_path / "date=*" / "batch-7-*.parquet"))
    base = lake_uri(tmp_path)
    assert found == [
        FileInfo(f"{base}/date=2024-11-22/batch-7-0000.parquet", "batch-7-0000.parquet", 0,
                 "date=2024-11-22", False),
        FileInfo(f"{base}/date=2024-11-22/batch-7-0001.parquet", "batch-7-0001.parquet", 1,
                 "date=2024-11-22", False),
        FileInfo(f"{base}/date=2024-11-23/batch-7-0000.parquet", "batch-7-0000.parquet", 3,
                 "date=2024-11-23", False),
    ]  # fmt: skip
    names = [info.name for info in lfs.glob(at(tmp_path / "date=2024-11-22" / "*"))]
    assert names == ["batch-7-0000.parquet", "batch-7-0001.parquet", "other.txt"]
    assert (tmp_path / "date=2024-11-22" / ".batch-7-0000.parquet.crc").exists()
    hidden = [info.name for info in lfs.glob(at(tmp_path / "date=2024-11-22" / "*"), hidden=True)]
    assert hidden == [  # never the checksums: Hadoop's local file system hides those itself
        ".batch-7-0002.parquet.tmp", "_SUCCESS", "batch-7-0000.parquet", "batch-7-0001.parquet",
        "other.txt",
    ]  # fmt: skip
    dirs = lfs.glob(at(tmp_path / "date=*"))
    assert [(d.name, d.is_dir, d.parent) for d in dirs] == [
        ("date=2024-11-22", True, tmp_path.name),
        ("date=2024-11-23", True, tmp_path.name),
    ]


def test_read_and_write_text(lfs: LakeFileSystem, tmp_path: Path, at: At) -> None:
    path = tmp_path / "new dir" / "offsets" / "42"  # a space: unescaped in a Hadoop URI
    lfs.write_text(at(path), 'v1\n{"seq": 42, "topic": "café/°C"}\n')
    assert path.read_text(encoding="utf-8") == 'v1\n{"seq": 42, "topic": "café/°C"}\n'
    assert lfs.read_text(at(path)) == 'v1\n{"seq": 42, "topic": "café/°C"}\n'
    lfs.write_text(at(path), "")
    assert lfs.read_text(at(path)) == ""
    with pytest.raises(FileNotFoundError, match=r"/missing: java.io.FileNotFoundException"):
        lfs.read_text(at(tmp_path / "missing"))


def test_parquet_stats_match_pyarrows_footer(
    spark: Any, lfs: LakeFileSystem, tmp_path: Path, at: At
) -> None:
    (
        spark.range(0, 20_000, numPartitions=2)
        .selectExpr("id * 3 + 1000000000000 AS seq", "CAST(id % 7 AS STRING) AS topic")
        .write.option("parquet.block.size", 16 * 1024)  # several row groups per file
        .parquet(lake_uri(tmp_path / "t"))
    )
    files = sorted((tmp_path / "t").glob("*.parquet"))
    assert len(files) == 2
    assert any(pq.read_metadata(f).num_row_groups >= 2 for f in files)
    results = [lfs.parquet_stats(at(f)) for f in files]
    assert results == [arrow_stats(f) for f in files]
    assert results == [lfs.hadoop_parquet_stats(at(f)) for f in files]  # other file systems
    assert sum(rows for rows, _, _ in results) == 20_000
    assert min(low for _, low, _ in results if low is not None) == 1_000_000_000_000
    assert max(high for _, _, high in results if high is not None) == 1_000_000_059_997
    assert all(isinstance(v, int) for result in results for v in result)


def test_parquet_stats_without_seq_values(
    spark: Any, lfs: LakeFileSystem, tmp_path: Path, at: At
) -> None:
    spark.range(5).coalesce(1).write.parquet(lake_uri(tmp_path / "no_seq"))
    spark.range(4).selectExpr("CAST(NULL AS BIGINT) AS seq").coalesce(1).write.parquet(
        lake_uri(tmp_path / "null_seq")
    )
    spark.range(0).selectExpr("id AS seq").coalesce(1).write.parquet(lake_uri(tmp_path / "empty"))
    for name, rows in [("no_seq", 5), ("null_seq", 4), ("empty", 0)]:
        (file,) = (tmp_path / name).glob("*.parquet")
        assert lfs.parquet_stats(at(file)) == (rows, None, None) == arrow_stats(file)
        assert lfs.hadoop_parquet_stats(at(file)) == (rows, None, None)


def test_parquet_stats_of_a_missing_broken_or_textual_file(
    spark: Any, lfs: LakeFileSystem, tmp_path: Path, at: At
) -> None:
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    for stats in (lfs.parquet_stats, lfs.hadoop_parquet_stats):
        with pytest.raises(FileNotFoundError, match=r"missing\.parquet: .*FileNotFound"):
            stats(at(tmp_path / "missing.parquet"))
        with pytest.raises(OSError, match=r"(?i)broken\.parquet: .*not a Parquet file"):
            stats(at(tmp_path / "broken.parquet"))
    spark.range(3).selectExpr("CAST(id AS STRING) AS seq").coalesce(1).write.parquet(
        lake_uri(tmp_path / "text_seq")
    )
    (file,) = (tmp_path / "text_seq").glob("*.parquet")
    for stats in (lfs.parquet_stats, lfs.hadoop_parquet_stats):
        with pytest.raises(TypeError, match=r"text_seq/.*: seq min: expected an integer"):
            stats(at(file))
