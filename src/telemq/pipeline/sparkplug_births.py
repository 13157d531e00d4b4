"""The alias maps of Sparkplug BIRTHs, as the metrics decoder needs them, and their state.

A DATA, CMD or DEATH metric may carry only an alias (and no datatype): its name and datatype
are those its edge node's (NBIRTH) or device's (DBIRTH) latest BIRTH gave that alias. Which
BIRTH is "latest" depends on the message's place in the journal, so `Births` keeps, for each
edge node and device, the BIRTHs by journal seq, and `Births.at(kind, key, seq)` answers with
the one in force at `seq`: the last BIRTH of that node or device before it. A device's
DBIRTH is no longer in force once its edge node has sent a newer NBIRTH (a new session:
the specification has the node re-send its devices' births).

Across micro-batches and restarts, `Births.latest()` (the BIRTH in force after the last row
seen, per node and device) is what a later batch needs; `to_json` and `from_json` make it a
small document that `BirthLedger` keeps per batch id beside the query's checkpoint (written by
the driver through the lake's Hadoop file system). Executors get a `Births` inside the task's
closure; only the ledger needs Spark.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..sparkplug import (
    BirthMetric,
    DataType,
    Payload,
    SparkplugPayloadError,
    SparkplugTopicError,
    birth_aliases,
    decode_payload,
    parse_topic,
)

NodeKey = tuple[str, str]  # group, edge node
DeviceKey = tuple[str, str, str]  # group, edge node, device


@dataclass(frozen=True, slots=True)
class Birth:
    """One valid BIRTH: its journal seq, its aliases and its metrics' datatypes by name."""

    seq: int
    aliases: dict[int, BirthMetric]
    names: dict[str, DataType]

    @classmethod
    def of(cls, seq: int, payload: Payload) -> Birth:
        aliases = birth_aliases(payload)  # raises for an invalid BIRTH
        names = {m.name: m.datatype for m in payload.metrics if m.name and m.datatype is not None}
        return cls(seq, aliases, names)


@dataclass
class Births:
    """BIRTHs by node or device, each list sorted by seq."""

    nodes: dict[NodeKey, list[Birth]] = field(default_factory=dict)
    devices: dict[DeviceKey, list[Birth]] = field(default_factory=dict)

    def add_node(self, key: NodeKey, birth: Birth) -> None:
        _insert(self.nodes.setdefault(key, []), birth)

    def add_device(self, key: DeviceKey, birth: Birth) -> None:
        _insert(self.devices.setdefault(key, []), birth)

    def add_message(self, seq: int, topic: str, data: bytes | None) -> bool:
        """Add the journal row `seq` if it is a valid NBIRTH or DBIRTH; False otherwise
        (the decoder quarantines an invalid one, with its reason)."""
        try:
            where = parse_topic(topic)
            if not where.message_type.is_birth:
                return False
            birth = Birth.of(seq, decode_payload(bytes(data or b""), where.message_type))
        except (SparkplugTopicError, SparkplugPayloadError):
            return False
        assert where.group is not None and where.edge_node is not None
        if where.device is None:
            self.add_node((where.group, where.edge_node), birth)
        else:
            self.add_device((where.group, where.edge_node, where.device), birth)
        return True

    def window(self, first: int, last: int) -> Births:
        """What a read of the seqs ``first..last`` needs: per node and device, the BIRTH in
        force before `first` and those within the range."""

        def keep(items: list[Birth]) -> list[Birth]:
            before = [b for b in items if b.seq < first][-1:]
            return before + [b for b in items if first <= b.seq <= last]

        nodes = {k: kept for k, v in self.nodes.items() if (kept := keep(v))}
        return Births(nodes, {k: kept for k, v in self.devices.items() if (kept := keep(v))})

    def node_at(self, key: NodeKey, seq: int) -> Birth | None:
        """The NBIRTH of `key` in force for a message at `seq`."""
        return _before(self.nodes.get(key), seq)

    def device_at(self, key: DeviceKey, seq: int) -> Birth | None:
        """The DBIRTH of `key` in force at `seq`: None when the edge node was born again
        after it."""
        birth = _before(self.devices.get(key), seq)
        node = self.node_at((key[0], key[1]), seq)
        if birth is not None and node is not None and node.seq > birth.seq:
            return None
        return birth

    def latest(self) -> Births:
        """Only the last BIRTH of each node and device: what a later batch needs."""
        return Births(
            {k: v[-1:] for k, v in self.nodes.items()},
            {k: v[-1:] for k, v in self.devices.items()},
        )

    def to_json(self) -> str:
        def births(items: list[Birth]) -> list[object]:
            return [
                [
                    b.seq,
                    [[a, m.name, int(m.datatype)] for a, m in sorted(b.aliases.items())],
                    [[n, int(t)] for n, t in sorted(b.names.items())],
                ]
                for b in items
            ]

        return json.dumps(
            {
                "version": 1,
                "nodes": [[*k, births(v)] for k, v in sorted(self.nodes.items())],
                "devices": [[*k, births(v)] for k, v in sorted(self.devices.items())],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> Births:
        document = json.loads(text)
        if document.get("version") != 1:
            raise ValueError(f"unknown Sparkplug birth state version {document.get('version')}")

        def births(items: Any) -> list[Birth]:
            return [
                Birth(
                    int(seq),
                    {int(a): BirthMetric(str(n), DataType(t)) for a, n, t in aliases},
                    {str(n): DataType(t) for n, t in names},
                )
                for seq, aliases, names in items
            ]

        return cls(
            {(g, e): births(v) for g, e, v in document["nodes"]},
            {(g, e, d): births(v) for g, e, d, v in document["devices"]},
        )


def _insert(items: list[Birth], birth: Birth) -> None:
    seqs = [b.seq for b in items]
    index = bisect.bisect_left(seqs, birth.seq)
    if index < len(items) and items[index].seq == birth.seq:
        items[index] = birth
    else:
        items.insert(index, birth)


def _before(items: list[Birth] | None, seq: int) -> Birth | None:
    if not items:
        return None
    index = bisect.bisect_left([b.seq for b in items], seq)
    return items[index - 1] if index else None


class BirthLedger:
    """The BIRTHs in force after each micro-batch, kept under `location` (a directory
    beside the query's checkpoint, e.g. ``<checkpoint>/sparkplug``; a local path or a
    Hadoop URI), written by the driver with the lake's file system."""

    KEEP = 3  # files kept behind the newest: a replay needs the one before its batch

    def __init__(self, spark: Any, location: str | os.PathLike[str]) -> None:
        from .lakefs import LakeFileSystem, lake_uri

        self.location = lake_uri(location)
        self.fs = LakeFileSystem.for_uri(spark, self.location)

    def _files(self) -> list[tuple[int, str]]:
        from .lakefs import join

        found = []
        for info in self.fs.glob(join(self.location, "births-*.json")):
            match = re.fullmatch(r"births-(\d+)\.json", info.name)
            if match:
                found.append((int(match.group(1)), info.uri))
        return sorted(found)

    def before(self, batch_id: int) -> Births:
        """The BIRTHs in force when batch `batch_id` starts: those saved by the greatest
        earlier batch (none for the first)."""
        earlier = [uri for number, uri in self._files() if number < batch_id]
        return Births.from_json(self.fs.read_text(earlier[-1])) if earlier else Births()

    def save(self, batch_id: int, births: Births) -> None:
        """Keep `births` as the state after batch `batch_id`, and drop files no replay needs."""
        from .lakefs import join

        final = join(self.location, f"births-{batch_id:012d}.json")
        staged = join(self.location, f"_births-{batch_id:012d}.json.tmp")
        self.fs.write_text(staged, births.to_json())
        self.fs.delete(final)
        self.fs.move(staged, final)
        numbers = [number for number, _ in self._files() if number < batch_id]
        for number, uri in self._files():
            if number in numbers[: max(0, len(numbers) - self.KEEP)]:
                self.fs.delete(uri)
