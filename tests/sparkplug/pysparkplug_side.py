"""The pysparkplug side of the differential test (test_pysparkplug.py), run by the Python of
the separate environment that holds pysparkplug (it needs paho-mqtt<2, which the test
suite's environment cannot have).

Reads from stdin {"cases": [[datatype code, value], ...], "ours": {"birth": hex, "data":
hex}}: it encodes an NBIRTH of the cases (metric ``m<i>``, alias i) and an NDATA of the same
values by alias without datatypes, and decodes our NBIRTH and NDATA. Writes to stdout
{"birth": hex, "data": hex, "decoded_birth": [...], "decoded_data": [...]}, values in the
test's JSON form: ints, booleans and strings as they are, floats as {"f": float.hex()},
bytes as {"b": hex}, arrays as lists, DateTime as milliseconds.
"""

import datetime
import json
import sys

import pysparkplug as spb

TIME_TYPES = {spb.DataType.DATETIME, spb.DataType.DATETIME_ARRAY}


def from_json(kind, value):
    if isinstance(value, list):
        return tuple(from_json(kind, v) for v in value)
    if isinstance(value, dict):
        return float.fromhex(value["f"]) if "f" in value else bytes.fromhex(value["b"])
    if kind in TIME_TYPES:
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    return value


def to_json(value):
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return {"f": value.hex()}
    if isinstance(value, bytes):
        return {"b": value.hex()}
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    raise TypeError(type(value))


def described(payload):
    return [[m.name, m.alias, int(m.datatype), to_json(m.value)] for m in payload.metrics]


def main():
    request = json.load(sys.stdin)
    metrics = []
    for index, (code, value) in enumerate(request["cases"]):
        kind = spb.DataType(code)
        metrics.append(
            spb.Metric(
                timestamp=1000 + index,
                name=f"m{index}",
                alias=index,
                datatype=kind,
                value=from_json(kind, value),
            )
        )
    birth = spb.NBirth(timestamp=1, seq=0, metrics=tuple(metrics))
    data = spb.NData(
        timestamp=2,
        seq=1,
        metrics=tuple(
            spb.Metric(
                timestamp=m.timestamp, name=None, alias=m.alias, datatype=m.datatype, value=m.value
            )
            for m in metrics
        ),
    )
    ours_birth = spb.NBirth.decode(bytes.fromhex(request["ours"]["birth"]))
    ours_data = spb.NData.decode(bytes.fromhex(request["ours"]["data"]), birth=ours_birth)
    json.dump(
        {
            "birth": birth.encode().hex(),
            "data": data.encode(include_dtypes=False).hex(),
            "decoded_birth": described(ours_birth),
            "decoded_data": described(ours_data),
        },
        sys.stdout,
    )


main()
