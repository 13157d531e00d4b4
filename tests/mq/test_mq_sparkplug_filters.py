"""Content filters on Sparkplug B metrics (``Metric['<name>']``, docs/filters.md) in a real
broker: a RegSub whose filter reads a metric receives only the matching publications."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from telemq.sparkplug import DataType, Metric, Payload, encode_payload

from .conftest import ClientFactory, start_broker
from .helpers import BrokerProcess, assert_ok, unique

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


def _payload(*metrics: Metric) -> bytes:
    return encode_payload(Payload(seq=0, metrics=metrics))


BIRTH = _payload(
    Metric(name="Pressure", alias=1, datatype=DataType.Double, value=3.6),
    Metric(name="On", alias=2, datatype=DataType.Boolean, value=False),
)
RICH = _payload(
    Metric(name="Pressure", datatype=DataType.Double, value=4.0),
    Metric(alias=2, value=True),  # an alias alone: not read by name
)
LOW = _payload(Metric(name="Pressure", datatype=DataType.Float, value=3.25))
EXACT = _payload(Metric(name="Pressure", datatype=DataType.Int64, value=3))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory, 'name = "QM.SPBFILTERS"\n[sys]\ninterval = 0\n')
    yield process
    process.finalize()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Metric['Pressure'] > 3.5", ["birth", "rich"]),
        ("Metric['Pressure'] > 3.5 AND Properties.Topic LIKE '%/DDATA/%'", ["rich"]),
        ("Metric['On'] = FALSE", ["birth"]),
        ("Metric['Pressure'] IS NULL", ["garbage", "json"]),
    ],
)
def test_regsub_filter_on_metrics(
    broker: BrokerProcess, clients: ClientFactory, form: str, text: str, expected: list[str]
) -> None:
    group = unique("Plant")
    subscriber = clients(broker.port)
    assert_ok(
        subscriber.command(
            {"Command": "RegSub", "Topic": f"spBv1.0/{group}/#", "Filter": text}, form=form
        )
    )
    publisher = clients(broker.port)
    published = {
        "birth": (f"spBv1.0/{group}/NBIRTH/edge1", BIRTH),
        "rich": (f"spBv1.0/{group}/DDATA/edge1/pump1", RICH),
        "low": (f"spBv1.0/{group}/DDATA/edge1/pump1", LOW),
        "exact": (f"spBv1.0/{group}/NDATA/edge1", EXACT),
        "garbage": (f"spBv1.0/{group}/DDATA/edge1/pump2", b"\xff\xff not protobuf"),
        "json": (f"spBv1.0/{group}/DDATA/edge1/pump3", b'{"Pressure": 9}'),
    }
    by_payload = {payload: name for name, (_, payload) in published.items()}
    for topic, payload in published.values():
        publisher.publish(topic, payload, qos=1)
    subscriber.sync(publisher)
    got = [by_payload[m.payload] for m in subscriber.deliveries(f"spBv1.0/{group}/")]
    assert got == expected, text


def test_regsub_filter_on_certificates(
    broker: BrokerProcess, clients: ClientFactory, form: str
) -> None:
    """A certificate (the broker's retained copy of a BIRTH) is read as its BIRTH: a late
    subscriber's filter selects among the births it is sent."""
    group = unique("Plant")
    low_birth = _payload(Metric(name="Pressure", alias=1, datatype=DataType.Double, value=1.0))
    publisher = clients(broker.port)
    publisher.publish(f"spBv1.0/{group}/NBIRTH/edge1", BIRTH, qos=1)
    publisher.publish(f"spBv1.0/{group}/NBIRTH/edge2", low_birth, qos=1)
    publisher.sync()  # both births routed: their certificates are kept
    subscriber = clients(broker.port)
    certificates = f"$sparkplug/certificates/spBv1.0/{group}/"
    text = "Metric['Pressure'] > 3.5"
    assert_ok(
        subscriber.command(
            {"Command": "RegSub", "Topic": f"{certificates}#", "Filter": text}, form=form
        )
    )
    subscriber.sync(publisher)
    received = subscriber.deliveries(certificates)
    assert [(m.topic, m.payload) for m in received] == [(f"{certificates}NBIRTH/edge1", BIRTH)]
