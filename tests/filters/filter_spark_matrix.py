"""Evaluate many filters over many messages in Spark in a few jobs (a results matrix)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from telemq.filters.spark import document_column, to_columns

JOURNAL_SCHEMA = (
    "id int, payload binary, topic string, qos int, retain boolean, client_id string,"
    " user_id string, sub_point string, content_type string,"
    " user_properties map<string,string>, broker string"
)

Message = tuple[bytes, Mapping[str, object] | None]


def user_property_map(props: Mapping[str, object]) -> dict[str, object] | None:
    """The journal's ``user_properties`` of a properties mapping: its ``User.<name>`` keys
    as ``{name: value}``, NULL (None) when it has none."""
    users = {k[len("User.") :]: v for k, v in props.items() if k.startswith("User.")}
    return users or None


def journal_frame(spark: Any, messages: Sequence[Message]) -> Any:
    """A DataFrame with the journal's columns, one row per message, ``id`` = its index."""
    rows = []
    for i, (payload, props) in enumerate(messages):
        p = props or {}
        rows.append(
            (
                i,
                bytearray(payload),
                p.get("Topic"),
                p.get("QoS"),
                p.get("Retain"),
                p.get("ClientId"),
                p.get("UserId"),
                p.get("SubPoint"),
                p.get("ContentType"),
                user_property_map(p),
                p.get("Broker"),
            )
        )
    return spark.createDataFrame(rows, JOURNAL_SCHEMA)


def spark_matrix(
    spark: Any, filters: Sequence[str], messages: Sequence[Message], chunk: int = 25
) -> list[list[bool | None]]:
    """``result[m][f]``: filter `f` on message `m` as Spark says (NULL -> None)."""
    frame = journal_frame(spark, messages).withColumn("doc", document_column()).cache()
    result: list[list[bool | None]] = [[None] * len(filters) for _ in messages]
    compiled = to_columns(filters, document="doc")
    for start in range(0, len(filters), chunk):
        names = list(range(start, min(start + chunk, len(filters))))
        columns = [compiled[j].alias(f"f{j}") for j in names]
        for row in frame.select("id", *columns).collect():
            out = result[row["id"]]
            for k, j in enumerate(names):
                out[j] = row[k + 1]
    frame.unpersist()
    return result
