"""The fast path of the Sparkplug metrics decoder: common DATA messages, straight from
protobuf into the output columns.

Most of the journal is NDATA/DDATA of scalar metrics sent by alias. For those,
`decode_fast` reads each metric's set fields with one ``ListFields()`` call, resolves the
alias through a per-BIRTH plan (name, datatype, target column, value reader) made once per
batch, and appends a tuple per metric and one per message to `Columns`: no dataclass, no
dict per row. It handles only what it can decode exactly as the full decoder would (the
`sparkplug.payload` rules, via `sparkplug_rows`'s slow path), and returns False for
anything else: BIRTHs, STATE, messages without metrics, properties, metadata, arrays,
DataSets, Templates, an unknown alias, a value that does not fit. The caller then decodes
that message with the slow path, which gives the same rows or the quarantine's reasons.
So the fast path changes the speed, never the result (tests/pipeline/test_sparkplug_rows.py
compares both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from ..sparkplug import DataType, SparkplugTopic
from ..sparkplug.datatypes import SIGNED_BITS, UNSIGNED_BITS
from ..sparkplug.schema import PAYLOAD
from .sparkplug_births import Birth, Births
from .sparkplug_schema import CELL_INDEX, Columns

LONG_MAX = (1 << 63) - 1
_BAD = object()  # a value reader's "not this way"
Reader = Callable[[int, Any], Any]
# datatype code -> (name, target column in CELL_COLUMNS, reader of (field number, raw value))
Plan = tuple[str, int, Reader]

# field numbers of Metric's value oneof
_INT, _LONG, _FLOAT, _DOUBLE, _BOOL, _STRING, _BYTES = 10, 11, 12, 13, 14, 15, 16


def _exact(number: int) -> Reader:
    return lambda field, raw: raw if field == number else _BAD


def _unsigned(bits: int) -> Reader:
    limit = min(1 << bits, LONG_MAX + 1)
    return lambda field, raw: raw if field in (_INT, _LONG) and raw < limit else _BAD


def _signed(bits: int) -> Reader:
    half, full = 1 << (bits - 1), 1 << bits

    def read(field: int, raw: Any) -> Any:
        if field != _INT and field != _LONG:
            return _BAD
        if raw < full:
            return raw - full if raw >= half else raw
        width = 1 << (32 if field == _INT else 64)
        if bits < (32 if field == _INT else 64) and raw >= width - half:
            return raw - width
        return _BAD

    return read


_INT_COLUMN = CELL_INDEX["int_value"]
TYPE_PLANS: dict[int, Plan] = {
    **{int(k): (k.name, _INT_COLUMN, _signed(b)) for k, b in SIGNED_BITS.items()},
    **{int(k): (k.name, _INT_COLUMN, _unsigned(b)) for k, b in UNSIGNED_BITS.items()},
    int(DataType.Float): ("Float", CELL_INDEX["double_value"], _exact(_FLOAT)),
    int(DataType.Double): ("Double", CELL_INDEX["double_value"], _exact(_DOUBLE)),
    int(DataType.Boolean): ("Boolean", CELL_INDEX["boolean_value"], _exact(_BOOL)),
    int(DataType.String): ("String", CELL_INDEX["string_value"], _exact(_STRING)),
    int(DataType.Text): ("Text", CELL_INDEX["string_value"], _exact(_STRING)),
    int(DataType.UUID): ("UUID", CELL_INDEX["string_value"], _exact(_STRING)),
    int(DataType.Bytes): ("Bytes", CELL_INDEX["bytes_value"], _exact(_BYTES)),
    int(DataType.File): ("File", CELL_INDEX["bytes_value"], _exact(_BYTES)),
}


class FastDecoder:
    """Decodes the common messages of one batch into `columns` (see the module)."""

    def __init__(self, columns: Columns, births: Births) -> None:
        self.columns = columns
        self.births = births
        self.plans: dict[int, tuple[dict[int, tuple[str, int]], Birth]] = {}

    def _aliases(self, birth: Birth) -> dict[int, tuple[str, int]]:
        """alias -> (name, datatype code) of a BIRTH, made once per batch."""
        cached = self.plans.get(id(birth))
        if cached is None or cached[1] is not birth:
            table = {a: (m.name, int(m.datatype)) for a, m in birth.aliases.items()}
            cached = self.plans[id(birth)] = (table, birth)
        return cached[0]

    def decode(self, seq: int, ts: int, topic: str, where: SparkplugTopic, data: bytes) -> bool:
        """Append the rows of one message and say True, or append nothing and say False."""
        kind = where.message_type
        if kind.is_birth or where.group is None or where.edge_node is None:
            return False
        try:
            message = PAYLOAD.FromString(data)
        except DecodeError:
            return False
        metrics = message.metrics
        if not metrics:
            return False
        payload_seq = message.seq if message.HasField("seq") else None
        if payload_seq is not None and payload_seq > 255:
            return False
        payload_ts = message.timestamp * 1000 if message.HasField("timestamp") else None
        if payload_ts is not None and payload_ts > LONG_MAX:
            return False
        if where.device is not None:
            birth = self.births.device_at((where.group, where.edge_node, where.device), seq)
        else:
            birth = self.births.node_at((where.group, where.edge_node), seq)
        aliases = self._aliases(birth) if birth is not None else {}
        names = birth.names if birth is not None else {}

        out: list[tuple[Any, ...]] = []
        for index, metric in enumerate(metrics):
            name = alias = stamp = code = None
            field = 0
            raw: Any = None
            is_null = historical = transient = False
            for descriptor, value in metric.ListFields():
                number = descriptor.number
                if number >= _INT:
                    field, raw = number, value
                elif number == 2:
                    alias = value
                elif number == 3:
                    stamp = value
                elif number == 1:
                    name = value
                elif number == 4:
                    code = value
                elif number == 7:
                    is_null = value
                elif number == 5:
                    historical = value
                elif number == 6:
                    transient = value
                else:
                    return False  # metadata, properties
            if name is None:
                if alias is None:
                    return False
                entry = aliases.get(alias)
                if entry is None or (code is not None and code != entry[1]):
                    return False
                name, code = entry
            elif code is None:
                born = names.get(name)
                if born is None:
                    return False
                code = int(born)
            plan = TYPE_PLANS.get(code)
            if plan is None:
                return False
            if stamp is not None:
                stamp *= 1000
                if stamp > LONG_MAX:
                    return False
            value = None
            if not is_null and field:
                value = plan[2](field, raw)
                if value is _BAD:
                    return False
            out.append(
                (index, name, alias, plan[0], stamp, is_null or not field,
                 historical, transient, plan[1], value)
            )  # fmt: skip

        columns = self.columns
        columns.metric_rows.extend(out)
        columns.messages.append(
            (seq, ts, topic, where.group, where.edge_node, where.device, kind.value,
             payload_ts, payload_seq)
        )  # fmt: skip
        columns.rows += len(out)
        columns.run_ends.append(columns.rows)
        return True
