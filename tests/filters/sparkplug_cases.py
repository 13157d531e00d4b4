"""Sparkplug B publications and ``Metric['<name>']`` filters shared by the filter tests.

`PUBLICATIONS` are (topic, payload) pairs that cover each way a metric is read or is NULL;
`CASES` is what a filter must answer on some of them (the same in the broker's evaluator and
in Spark, which tests/filters/test_filter_sparkplug.py checks both against).
"""

from __future__ import annotations

import json
import math

from telemq.sparkplug import DataType, Metric, Payload, encode_payload


def _payload(*metrics: Metric) -> bytes:
    return encode_payload(Payload(timestamp=1_700_000_000_000, seq=1, metrics=metrics))


DDATA = "spBv1.0/Plant/DDATA/edge1/pump1"
NDATA = "spBv1.0/Plant/NDATA/edge1"
NBIRTH = "spBv1.0/Plant/NBIRTH/edge1"

RICH = _payload(
    Metric(name="Pressure", datatype=DataType.Double, value=4.0),
    Metric(name="Temp", datatype=DataType.Int32, value=-5),
    Metric(name="On", datatype=DataType.Boolean, value=True),
    Metric(name="Mode", datatype=DataType.String, value="auto"),
    Metric(name="Image", datatype=DataType.Bytes, value=b"\x89PNG"),
    Metric(name="Series", datatype=DataType.Int32Array, value=(1, 2)),
    Metric(name="Missing", datatype=DataType.Double, is_null=True),
    Metric(name="Twice", datatype=DataType.Double, value=1.0),
    Metric(name="Twice", datatype=DataType.Double, value=9.0),
    Metric(alias=7, value=3.0),  # an alias alone: its name is in the BIRTH
    Metric(name="Untyped", value=2.5),  # no datatype: its type is in the BIRTH
    Metric(name="NaN", datatype=DataType.Double, value=math.nan),
    Metric(name="Big", datatype=DataType.UInt64, value=2**64 - 1),
    Metric(name="When", datatype=DataType.DateTime, value=1_700_000_000_123),
    Metric(name="pressure", datatype=DataType.Float, value=0.5),
    Metric(name="Inputs/Flow rate", datatype=DataType.Float, value=12.5),
)
LOW = _payload(Metric(name="Pressure", datatype=DataType.Float, value=3.25))
EXACT = _payload(Metric(name="Pressure", datatype=DataType.Int64, value=3))
BIRTH = _payload(
    Metric(name="Pressure", alias=1, datatype=DataType.Double, value=3.6),
    Metric(name="On", alias=2, datatype=DataType.Boolean, value=False),
)
NOT_PROTOBUF = b"\xff\xff\xff\xff garbage"
JSON = json.dumps({"Pressure": 5, "Metric": 1}).encode()

PUBLICATIONS: dict[str, tuple[str, bytes]] = {
    "rich": (DDATA, RICH),
    "low": (DDATA, LOW),
    "exact": (NDATA, EXACT),
    "birth": (NBIRTH, BIRTH),
    "certificate": ("$sparkplug/certificates/" + NBIRTH, BIRTH),
    "not-protobuf": (DDATA, NOT_PROTOBUF),
    "outside-namespace": ("plant/edge1/pump1", RICH),
    "broken-topic": ("spBv1.0/Plant/XDATA/edge1", RICH),
    "state": ("spBv1.0/STATE/host1", b'{"online": true, "timestamp": 1}'),
    "json": ("plant/json", JSON),
    # a BIRTH without datatypes is not a valid BIRTH, so not Sparkplug B
    "invalid-birth": (NBIRTH, _payload(Metric(name="Pressure", value=9.0))),
}

T, F, U = True, False, None
CASES: list[tuple[str, str, bool | None]] = [
    ("Metric['Pressure'] > 3.5", "rich", T),
    ("Metric['Pressure'] > 3.5", "low", F),
    ("Metric['Pressure'] > 3.5", "exact", F),
    ("Metric['Pressure'] = 3", "exact", T),
    ("Metric['Pressure'] > 3.5", "birth", T),
    ("Metric['Pressure'] > 3.5", "certificate", T),
    ("Metric['Pressure'] > 3.5", "not-protobuf", U),
    ("Metric['Pressure'] > 3.5", "outside-namespace", U),
    ("Metric['Pressure'] > 3.5", "broken-topic", U),
    ("Metric['Pressure'] > 3.5", "state", U),
    ("Metric['Pressure'] > 3.5", "json", U),
    ("Metric['Pressure'] > 3.5", "invalid-birth", U),
    ("Metric['Pressure'] IS NULL", "json", T),
    ("Pressure > 3.5", "json", T),
    ("Pressure > 3.5", "rich", U),  # a payload field: Sparkplug B is not JSON
    ("Metric = 1", "json", T),  # without a string subscript, Metric is a payload field
    ("Metric['Temp'] = -5", "rich", T),
    ("Metric['Temp'] < 0 AND Metric['Pressure'] >= 4", "rich", T),
    ("Metric['Temp'] + 10 = 5", "rich", T),
    ("Metric['On']", "rich", T),
    ("Metric['On']", "birth", F),
    ("NOT Metric['On']", "birth", T),
    ("Metric['On'] = TRUE", "rich", T),
    ("Metric['On'] = 1", "rich", U),  # booleans are not numbers
    ("Metric['Mode'] = 'auto'", "rich", T),
    ("Metric['Mode'] LIKE 'au%'", "rich", T),
    ("Metric['Mode'] IN ('manual', 'auto')", "rich", T),
    ("Metric['Mode'] > 3", "rich", U),
    ("Metric['Image'] IS NULL", "rich", F),  # present, not comparable
    ("Metric['Image'] = 'x'", "rich", U),
    ("Metric['Series'] IS NOT NULL", "rich", T),
    ("Metric['Series'] = 1", "rich", U),
    ("Metric['Missing'] IS NULL", "rich", T),  # is_null
    ("Metric['Twice'] = 1", "rich", T),  # the first of a repeated name
    ("Metric['Twice'] = 9", "rich", F),
    ("Metric['Untyped'] IS NULL", "rich", T),  # no datatype in the payload
    ("Metric['NaN'] IS NULL", "rich", T),
    ("Metric['Big'] = 18446744073709551615", "rich", T),
    ("Metric['When'] BETWEEN 1700000000000 AND 1700000001000", "rich", T),
    ("Metric['pressure'] = 0.5", "rich", T),  # names are case-sensitive
    ("Metric['Inputs/Flow rate'] = 12.5", "rich", T),
    ("Metric['Nope'] IS NULL", "rich", T),
    ("Metric['Nope'] = 1 OR Metric['Pressure'] = 4", "rich", T),
    ("Metric['Pressure'] > 3.5 AND Properties.Topic LIKE '%/DDATA/%'", "rich", T),
    ("Metric['Pressure'] > 3.5 AND Properties.Topic LIKE '%/DDATA/%'", "birth", F),
]

FILTERS = list(dict.fromkeys(text for text, _, _ in CASES))
