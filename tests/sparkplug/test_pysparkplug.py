"""Differential test against a real Sparkplug implementation: pysparkplug encodes, telemq
decodes, and the other way round, for every datatype both know.

pysparkplug needs paho-mqtt<2 and the suite needs paho-mqtt 2, so it lives in its own
virtual environment, ``.venv-sparkplug/`` at the repository's root, which
``bash scripts/bootstrap.sh --test`` makes; the test runs pysparkplug_side.py with that
environment's Python. Without it the test fails, naming the command.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.testsupport.requirements import require

from telemq.sparkplug import (
    DataType,
    MessageType,
    Metric,
    Payload,
    birth_aliases,
    decode_payload,
    encode_payload,
    resolve_metrics,
)

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv-sparkplug" / "bin" / "python"
SIDE = Path(__file__).with_name("pysparkplug_side.py")

CASES: list[tuple[DataType, object]] = [
    (DataType.Int8, -128),
    (DataType.Int8, 127),
    (DataType.Int16, -2),
    (DataType.Int32, -(2**31)),
    (DataType.Int64, -(2**63)),
    (DataType.UInt8, 255),
    (DataType.UInt16, 65535),
    (DataType.UInt32, 2**32 - 1),
    (DataType.UInt64, 2**64 - 1),
    (DataType.Float, 3.5),
    (DataType.Double, -1e300),
    (DataType.Boolean, True),
    (DataType.String, "Pressure ü"),
    (DataType.DateTime, 1656107875000),
    (DataType.Text, ""),
    (DataType.UUID, "1b4e28ba-2fa1-11d2-883f-0016d3cca427"),
    (DataType.Bytes, b"\x00\xff"),
    (DataType.File, b"file"),
    (DataType.Int8Array, (-23, 123)),
    (DataType.Int16Array, (-30000, 30000)),
    (DataType.Int32Array, (-1, 315338746)),
    (DataType.Int64Array, (-4270929666821191986, -3601064768563266876)),
    (DataType.UInt8Array, (23, 250)),
    (DataType.UInt16Array, (30, 52360)),
    (DataType.UInt32Array, (52, 3293969225)),
    (DataType.UInt64Array, (52, 16444743074749521625)),
    (DataType.FloatArray, (1.25, -89.5)),
    (DataType.DoubleArray, (12.354213, 1022.9123213)),
    (DataType.BooleanArray, (False, False, True, True, False, True, False, False, True, True)),
    (DataType.StringArray, ("ABC", "hello")),
    (DataType.DateTimeArray, (1256102875000, 1656107875000)),
]


def to_json(value: object) -> Any:
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    if isinstance(value, float):
        return {"f": value.hex()}
    if isinstance(value, bytes):
        return {"b": value.hex()}
    return value


def ours(data: bool) -> bytes:
    """telemq's NBIRTH of the cases, or its NDATA of the same values by alias only."""
    metrics = tuple(
        Metric(
            name=None if data else f"m{index}",
            alias=index,
            timestamp=1000 + index,
            datatype=kind,
            value=value,
        )
        for index, (kind, value) in enumerate(CASES)
    )
    return encode_payload(Payload(timestamp=2 if data else 1, seq=int(data), metrics=metrics))


def run_pysparkplug(request: dict[str, Any]) -> dict[str, Any]:
    require(
        "pysparkplug's environment (.venv-sparkplug)",
        None if VENV_PYTHON.exists() else f"{VENV_PYTHON.relative_to(ROOT)} does not exist",
    )
    done = subprocess.run(
        [str(VENV_PYTHON), str(SIDE)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_telemq_and_pysparkplug_read_each_others_payloads() -> None:
    answer = run_pysparkplug(
        {
            "cases": [[int(kind), to_json(value)] for kind, value in CASES],
            "ours": {"birth": ours(False).hex(), "data": ours(True).hex()},
        }
    )
    expected = [
        [f"m{index}", index, int(kind), to_json(value)] for index, (kind, value) in enumerate(CASES)
    ]
    # pysparkplug's payloads, read by telemq: the BIRTH, then the DATA through its aliases
    birth = decode_payload(bytes.fromhex(answer["birth"]), MessageType.NBIRTH)
    data = decode_payload(bytes.fromhex(answer["data"]), MessageType.NDATA)
    assert all(m.datatype is None and m.name is None for m in data.metrics)
    resolved = resolve_metrics(data, birth_aliases(birth))
    for metrics in (birth.metrics, resolved):
        got = [[m.name, m.alias, int(m.datatype or 0), to_json(m.value)] for m in metrics]
        assert got == expected
    assert [m.timestamp for m in birth.metrics] == [1000 + i for i in range(len(CASES))]
    # telemq's payloads, read by pysparkplug
    assert answer["decoded_birth"] == expected
    assert [row[1:] for row in answer["decoded_data"]] == [row[1:] for row in expected]
