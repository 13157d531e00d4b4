"""The lake's file operations through Hadoop's FileSystem API, on any storage Spark can reach.

Theory of operation
-------------------
Spark reads and writes the lake through Hadoop's ``FileSystem``: one API over local disks
(``file:``), HDFS (``hdfs://``) and object stores (``s3a://`` etc., once their connector is on
the classpath). The commit protocol of `ingest` renames and deletes files beside Spark's own
writes, so it must see the same storage with the same settings and credentials: it uses the
same API, on the driver, through Spark's JVM gateway and the session's Hadoop configuration.
Python's ``os`` reaches only the local disk.

What the commit protocol can rely on:

- ``rename`` of a file is atomic on HDFS and local file systems: a reader sees the whole file
  under the old name or the new one. On object stores (s3a) it is a copy and a delete, not
  atomic, but each object still appears whole (an upload is visible only once complete): for
  a moment a file may be under both names, never partly written. The protocol tolerates
  that: a batch's files are named by its id, and a retry deletes them before renaming again.
- Hadoop reports many failures as ``false``, not as exceptions, and its rename semantics
  differ by file system: renaming onto an existing directory moves *into* it; a missing
  parent fails on HDFS, but the local file system makes it and *copies* the file (not
  atomic); an existing destination file fails on HDFS and local, elsewhere it may be
  replaced. `LakeFileSystem` turns ``false`` into `OSError`, and `LakeFileSystem.move` gives
  one meaning everywhere: the destination must not exist, its parent is made first.
- Java exceptions (py4j's ``Py4JJavaError``, or PySpark's conversions of some) surface as
  `OSError` naming the URI and the Java message (`FileNotFoundError`, `FileExistsError`,
  `PermissionError` where they fit).

URIs are strings: `lake_uri` makes a local path an absolute ``file:`` URI (in the form
Hadoop prints, ``file:/abs/path``, unescaped) and keeps anything with a scheme as it is. Keep
them as ``str``: ``pathlib.Path`` collapses the ``//`` of ``hdfs://host/...``.

Hadoop's local file system (a ``ChecksumFileSystem``) writes a hidden ``.<name>.crc`` beside
each file it creates (Spark's Parquet files too), renames and deletes it with the file and hides
it from globs; `LakeFileSystem.glob` also leaves out other hidden names (``.*``, ``_*``:
``_SUCCESS``, temporary files), as Spark's and pyarrow's readers do. Never rewrite such a file
with Python's ``open``: Hadoop's reads of it fail on the stale checksum.

Everything here runs on the driver only (the gateway does not exist on executors), and each
call is a round trip to the JVM: fine for the files of a batch, not for millions of files.
A local file's Parquet footer is the exception: pyarrow reads it in this process
(`LakeFileSystem.parquet_stats`), which spares each micro-batch of ingest a dozen round trips
per file written.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FileInfo", "LakeFileSystem", "join", "lake_uri"]

# A scheme of 2+ letters then "/": "hdfs://nn/x", "file:/x"; not "C:/x" nor a local name "a:b".
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")
# The scheme and authority of a URI: what precedes its path.
_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:(//[^/]*)?")

# Java exception classes (or their superclasses) that map to an OSError subclass.
_JAVA_ERRORS: dict[str, type[OSError]] = {
    "java.io.FileNotFoundException": FileNotFoundError,
    "org.apache.hadoop.fs.PathNotFoundException": FileNotFoundError,
    "org.apache.hadoop.fs.FileAlreadyExistsException": FileExistsError,
    "org.apache.hadoop.fs.PathExistsException": FileExistsError,
    "org.apache.hadoop.security.AccessControlException": PermissionError,
    "org.apache.hadoop.fs.PathAccessDeniedException": PermissionError,
    "java.nio.file.AccessDeniedException": PermissionError,  # s3a's HTTP 403
}


def lake_uri(path: str | os.PathLike[str]) -> str:
    """A Hadoop URI for `path`: a string with a scheme as it is, a local path (relative or
    absolute) as the absolute ``file:`` URI Hadoop itself prints (``file:/abs/path``)."""
    text = os.fspath(path)
    if not text:
        raise ValueError("lake path: empty")
    if _SCHEME.match(text):
        return text
    return "file:" + os.path.abspath(text)


def join(uri: str, *parts: str) -> str:
    """`uri` with `parts` appended, one ``/`` between each (empty parts are skipped)."""
    pieces = [part.strip("/") for part in parts if part.strip("/")]
    return "/".join([uri.rstrip("/"), *pieces]) if pieces else uri


def _split(uri: str) -> tuple[str, str]:
    """``(scheme and authority, path)`` of a URI as Hadoop prints it."""
    prefix = match.group(0) if (match := _PREFIX.match(uri)) else ""
    return prefix, uri[len(prefix) :]


def _parent(uri: str) -> str | None:
    """The parent directory of an absolute URI; None for a root."""
    prefix, path = _split(uri)
    path = path.rstrip("/")
    return prefix + (posixpath.dirname(path) or "/") if path else None


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One entry `LakeFileSystem.glob` found."""

    uri: str  # fully qualified, as Hadoop prints it: "file:/lake/journal/date=.../x.parquet"
    name: str  # the last path component
    size: int  # bytes (0 for a directory)
    parent: str  # the parent directory's name, e.g. "date=2024-11-22"
    is_dir: bool


def _local_parquet_stats(uri: str) -> tuple[int, int | None, int | None]:
    """`LakeFileSystem.parquet_stats` of a ``file:`` URI, by pyarrow, with the same errors:
    `FileNotFoundError`, `OSError` for a file that is not Parquet, `TypeError` for a ``seq``
    column that is not of integers."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    path = "/" + _split(uri)[1].lstrip("/")
    try:
        footer = pq.read_metadata(path)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{uri}: FileNotFoundError: {error}") from error
    except (OSError, pa.ArrowException) as error:  # ArrowInvalid: not a Parquet file
        raise OSError(f"{uri}: {type(error).__name__}: {error}") from error
    low: int | None = None
    high: int | None = None
    names = footer.schema.names
    column = names.index("seq") if "seq" in names else -1
    for group in range(footer.num_row_groups):
        if column < 0:
            break
        stats = footer.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max:
            continue
        least = _python_int(stats.min, f"{uri}: seq min")
        most = _python_int(stats.max, f"{uri}: seq max")
        low = least if low is None else min(low, least)
        high = most if high is None else max(high, most)
    return int(footer.num_rows), low, high


def _python_int(value: Any, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"{what}: expected an integer, got {type(value).__name__}")


def _java_int(value: Any, what: str) -> int:
    """A Java integer as an int: py4j converts a boxed Long or Integer itself, another Number
    gives its long value, anything else (a Binary: a column of strings) is a TypeError."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(value.longValue())
    except Exception as error:  # py4j's Py4JError: no such method; AttributeError
        raise TypeError(f"{what}: expected an integer, got {type(value).__name__}") from error


def _error_class(java: Any) -> type[OSError]:
    """The OSError subclass for a Java exception, by its class or a superclass."""
    cls = java.getClass()
    while cls is not None:
        kind = _JAVA_ERRORS.get(str(cls.getName()))
        if kind is not None:
            return kind
        cls = cls.getSuperclass()
    return OSError


class LakeFileSystem:
    """The Hadoop file system of a URI, with the operations the lake's commit protocol needs.

    Every method takes URIs (or local paths, which mean ``file:``, see `lake_uri`) on this
    file system; another file system's URI fails with `OSError` ("Wrong FS").
    """

    def __init__(self, spark: SparkSession, uri: str | os.PathLike[str]) -> None:
        self.uri = lake_uri(uri)
        context: Any = spark.sparkContext
        self._jvm: Any = context._jvm
        self._conf: Any = context._jsc.hadoopConfiguration()
        self._path_class: Any = self._jvm.org.apache.hadoop.fs.Path
        with self._java_errors(self.uri):
            # Hadoop's cached, shared instance (Spark uses it too): never close it.
            self._fs: Any = self._path(self.uri).getFileSystem(self._conf)

    @classmethod
    def for_uri(cls, spark: SparkSession, uri: str | os.PathLike[str]) -> LakeFileSystem:
        return cls(spark, uri)

    def exists(self, uri: str | os.PathLike[str]) -> bool:
        with self._java_errors(lake_uri(uri)):
            return bool(self._fs.exists(self._path(uri)))

    def is_dir(self, uri: str | os.PathLike[str]) -> bool:
        try:
            with self._java_errors(lake_uri(uri)):
                return bool(self._fs.getFileStatus(self._path(uri)).isDirectory())
        except FileNotFoundError:
            return False

    def mkdirs(self, uri: str | os.PathLike[str]) -> None:
        """Make the directory `uri` and its missing parents (nothing if it exists)."""
        with self._java_errors(lake_uri(uri)):
            made = bool(self._fs.mkdirs(self._path(uri)))
        if not made:
            raise OSError(f"{lake_uri(uri)}: could not make the directory")

    def delete(self, uri: str | os.PathLike[str], recursive: bool = False) -> bool:
        """Delete a file (with its checksum) or a directory; False if nothing was there. A
        directory that is not empty needs `recursive`."""
        with self._java_errors(lake_uri(uri)):
            return bool(self._fs.delete(self._path(uri), recursive))

    def rename(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> bool:
        """Hadoop's rename (see the module docstring for what it guarantees where): True, or
        `OSError` when Hadoop refuses (an existing destination, a missing parent on HDFS)."""
        what = f"rename {lake_uri(src)} to {lake_uri(dst)}"
        with self._java_errors(what):
            done = bool(self._fs.rename(self._path(src), self._path(dst)))
        if not done:
            raise OSError(f"{what}: refused, {self._why(src, dst)}")
        return True

    def move(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        """Rename `src` to exactly `dst`, making the parent of `dst` first: the same meaning on
        every file system (`FileExistsError` if `dst` exists, never a move into it)."""
        if self.exists(dst):
            raise FileExistsError(f"move {lake_uri(src)} to {lake_uri(dst)}: destination exists")
        parent = _parent(lake_uri(dst))
        if parent is not None:
            self.mkdirs(parent)
        self.rename(src, dst)

    def glob(self, pattern: str | os.PathLike[str], *, hidden: bool = False) -> list[FileInfo]:
        """What a Hadoop glob (``*``, ``?``, ``[ab]``, ``{a,b}``) matches, sorted by URI; [] if
        nothing. Names starting with ``.`` or ``_`` (checksums, ``_SUCCESS``, temporary files)
        are left out unless `hidden`."""
        with self._java_errors(lake_uri(pattern)):
            statuses = self._fs.globStatus(self._path(pattern))  # null when nothing matches
            found: list[FileInfo] = []
            for status in statuses if statuses is not None else []:
                uri = str(status.getPath().toString())
                _, path = _split(uri)
                name = posixpath.basename(path)
                if not hidden and name.startswith((".", "_")):
                    continue
                parent = posixpath.basename(posixpath.dirname(path))
                size = _java_int(status.getLen(), uri)
                found.append(FileInfo(uri, name, size, parent, bool(status.isDirectory())))
        return sorted(found, key=lambda info: info.uri)

    def read_text(self, uri: str | os.PathLike[str]) -> str:
        """A small file's content as UTF-8 text (it passes through the gateway whole)."""
        with self._java_errors(lake_uri(uri)):
            stream = self._fs.open(self._path(uri))
            try:
                data = stream.readAllBytes()
            finally:
                stream.close()
        return bytes(data).decode("utf-8")

    def write_text(self, uri: str | os.PathLike[str], text: str) -> None:
        """Create or replace a small file (parents made) with `text` in UTF-8. Not atomic on
        HDFS or local disks: a reader may see it partly written (`move` a temporary file in
        when that matters)."""
        with self._java_errors(lake_uri(uri)):
            stream = self._fs.create(self._path(uri), True)
            try:
                stream.write(text.encode("utf-8"))
            finally:
                stream.close()

    def parquet_stats(self, uri: str | os.PathLike[str]) -> tuple[int, int | None, int | None]:
        """Rows and the min and max of column ``seq`` of one Parquet file, from its footer
        (no data read). ``None`` for the bounds when there is no ``seq`` column, no
        statistics or only nulls. A local file's footer is read by pyarrow in this process
        (one read); elsewhere by parquet-hadoop on Spark's classpath, through the gateway
        (a dozen round trips to the JVM per file, which a micro-batch of ingest felt)."""
        target = lake_uri(uri)
        if target.startswith("file:"):
            return _local_parquet_stats(target)
        return self.hadoop_parquet_stats(target)

    def hadoop_parquet_stats(
        self, uri: str | os.PathLike[str]
    ) -> tuple[int, int | None, int | None]:
        """`parquet_stats` by parquet-hadoop, on any file system Hadoop reaches."""
        parquet, target = self._jvm.org.apache.parquet.hadoop, lake_uri(uri)
        with self._java_errors(target):
            source = parquet.util.HadoopInputFile.fromPath(self._path(uri), self._conf)
            reader = parquet.ParquetFileReader.open(source)
            try:
                footer = reader.getFooter()
            finally:
                reader.close()
            rows, low, high = 0, None, None
            column: int | None = None
            for block in footer.getBlocks():
                rows += _java_int(block.getRowCount(), f"{target}: row count")
                chunks = block.getColumns()
                if column is None:  # the same column order in every row group
                    names = [str(chunk.getPath().toDotString()) for chunk in chunks]
                    column = names.index("seq") if "seq" in names else -1
                if column < 0:
                    continue
                stats = chunks.get(column).getStatistics()
                if stats is None or not bool(stats.hasNonNullValue()):
                    continue
                least = _java_int(stats.genericGetMin(), f"{target}: seq min")
                most = _java_int(stats.genericGetMax(), f"{target}: seq max")
                low = least if low is None else min(low, least)
                high = most if high is None else max(high, most)
        return rows, low, high

    def _path(self, uri: str | os.PathLike[str]) -> Any:
        return self._path_class(lake_uri(uri))

    def _why(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> str:
        """Why a rename was refused, most likely (Hadoop does not say)."""
        try:
            if not self.exists(src):
                return "the source does not exist"
            if self.exists(dst):
                return "the destination exists"
            parent = _parent(lake_uri(dst))
            if parent is not None and not self.is_dir(parent):
                return "the destination's parent directory does not exist"
        except OSError as error:
            return f"Hadoop returned false ({error})"
        return "Hadoop returned false"

    @contextmanager
    def _java_errors(self, what: str) -> Iterator[None]:
        """Turn a Java exception into an `OSError` starting with `what` (the URI, or the
        operation on two), followed by the Java exception and its message."""
        from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
        from pyspark.errors.exceptions.captured import CapturedException

        try:
            yield
        except (Py4JJavaError, CapturedException) as error:
            # PySpark converts some (IllegalArgumentException: "Wrong FS"), keeping `_origin`
            java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
            if java is None:
                raise OSError(f"{what}: {str(error).splitlines()[0]}") from error
            raise _error_class(java)(f"{what}: {java.toString()}") from error
