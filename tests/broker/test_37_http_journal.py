"""The journal service over HTTP (docs/pipeline.md, "The journal service"): `[[http]]` and
`telemq serve --http-port`, the bounds and range endpoints, and who may read them.

A broker subprocess with users and ACL rules, MQTT publications through paho, and a real HTTP
client (the standard library's `urllib`; pyarrow reads the streams): the bounds follow what
was published; a range comes back as Arrow with the data source's schema, narrowed to the
topics asked for; a range retention deleted is 410; no credentials, a wrong password and a
malformed header are 401 with a Basic challenge; a user whose rules do not cover the
requested topics is 403; a topic that is no filter, or no range, is 400.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testsupport.process import users_and_acl, wait_until

from .helpers import BrokerProcess, PahoClient, free_port, unique

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

PASSWORDS = {"reader": "reader-pw-7", "sensor": "sensor-pw-8"}
ACL = [
    ("reader", "journal", "#", True),
    ("sensor", "journal", "sensors/#", True),
    ("*", "publish", "#", True),
]


def _config() -> str:
    return "[sys]\ninterval = 0\n" + users_and_acl(PASSWORDS, ACL)


def get(url: str, user: str | None = None, password: str | None = None, **headers: str) -> Any:
    """(status, JSON body, headers) of a GET."""
    request = urllib.request.Request(url, headers=headers)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    http_port = free_port()
    broker = BrokerProcess(
        tmp_path_factory.mktemp("http"),
        config_text=_config(),
        args=["--http-port", str(http_port)],
    )
    broker.start()
    yield broker, f"http://127.0.0.1:{http_port}"
    broker.finalize()


def test_the_bounds_follow_the_journal(
    served: tuple[BrokerProcess, str], paho_factory: Callable[..., PahoClient]
) -> None:
    broker, base = served
    status, before, _ = get(f"{base}/journal/v1/bounds", "reader", PASSWORDS["reader"])
    assert status == 200, before
    publisher = paho_factory(broker.port, unique("pub"))
    publisher.client.username_pw_set("sensor", PASSWORDS["sensor"])
    publisher.connect()
    for n in range(5):
        publisher.publish(f"sensors/{n}", b"%d" % n, qos=1)
    status, after, _ = get(f"{base}/journal/v1/bounds", "reader", PASSWORDS["reader"])
    assert status == 200
    assert after == {"first": before["first"] if before["last"] else 1, "last": before["last"] + 5}
    # A user whose rules cover the topics it names reads the same bounds.
    status, narrow, _ = get(
        f"{base}/journal/v1/bounds?topic=sensors/%2B", "sensor", PASSWORDS["sensor"]
    )
    assert (status, narrow) == (200, after)


@pytest.mark.parametrize(
    ("credentials", "headers", "error"),
    [
        (None, {}, "anonymous access is off"),
        (("reader", "wrong"), {}, "bad user name or password"),
        (("nobody", "x"), {}, "bad user name or password"),
        (None, {"Authorization": "Basic !!!"}, "malformed Basic credentials"),
        (None, {"Authorization": "Bearer abc"}, "only HTTP Basic"),
    ],
)
def test_without_good_credentials_it_is_401_with_a_challenge(
    served: tuple[BrokerProcess, str],
    credentials: tuple[str, str] | None,
    headers: dict[str, str],
    error: str,
) -> None:
    _, base = served
    user, password = credentials if credentials else (None, None)
    status, body, response_headers = get(f"{base}/journal/v1/bounds", user, password, **headers)
    assert status == 401 and error in body["error"], body
    assert response_headers["WWW-Authenticate"].startswith('Basic realm="telemq"')
    assert set(body) == {"error"}


def test_a_topic_the_user_may_not_read_is_403_and_no_filter_400(
    served: tuple[BrokerProcess, str],
) -> None:
    _, base = served
    sensor = ("sensor", PASSWORDS["sensor"])
    status, body, _ = get(f"{base}/journal/v1/bounds", *sensor)  # `#` by default
    assert status == 403 and "'#'" in body["error"], body
    status, body, _ = get(f"{base}/journal/v1/bounds?topic=sensors/x&topic=other", *sensor)
    assert status == 403 and "'other'" in body["error"], body
    status, body, _ = get(f"{base}/journal/v1/bounds?topic=a/%23/b", *sensor)
    assert status == 400 and "not a topic filter" in body["error"], body


def test_http_is_off_unless_configured_and_its_config_is_checked(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory()
    assert "journal service on" not in broker.log_text()
    config = tmp_path / "bad.toml"
    config.write_text("[[http]]\nport = 70000\n", encoding="utf-8")
    bad = broker_factory(config=config, start=False)
    bad.start(wait=False)
    assert bad.proc is not None and bad.proc.wait(30) == 2
    assert "http[0].port: 70000 is not a TCP port" in bad.log_text()


def test_an_open_broker_serves_anonymous_readers(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    http_port = free_port()
    broker = broker_factory("--http-port", str(http_port))
    status, body, _ = get(f"http://127.0.0.1:{http_port}/journal/v1/bounds")
    assert status == 200 and set(body) == {"first", "last"}, body
    assert f"journal service on http://127.0.0.1:{http_port}" in broker.log_text()


def test_over_tls_the_password_travels_encrypted(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    from .test_20_tls import client_context, make_pki

    pki = make_pki(tmp_path / "pki")
    http_port = free_port()
    config = tmp_path / "tls.toml"
    config.write_text(
        _config()
        + f'\n[[http]]\nhost = "127.0.0.1"\nport = {http_port}\n'
        + f'certfile = "{pki.server.cert}"\nkeyfile = "{pki.server.key}"\n',
        encoding="utf-8",
    )
    broker_factory(config=config)
    url = f"https://127.0.0.1:{http_port}/journal/v1/bounds"
    token = base64.b64encode(f"reader:{PASSWORDS['reader']}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    context = client_context(pki.ca)
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        assert response.status == 200 and set(json.loads(response.read())) == {"first", "last"}
    with pytest.raises(OSError):  # plain HTTP to the TLS port: the connection is dropped
        urllib.request.urlopen(url.replace("https", "http"), timeout=10)


def range_rows(url: str, user: str, password: str) -> tuple[int, Any]:
    """(status, the Arrow table or the JSON error) of a range request."""
    import pyarrow as pa

    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["Content-Type"] == "application/vnd.apache.arrow.stream"
            return response.status, pa.ipc.open_stream(response.read()).read_all()
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_range_streams_as_arrow_with_the_sources_schema(
    served: tuple[BrokerProcess, str], paho_factory: Callable[..., PahoClient]
) -> None:
    from telemq.journal.arrow import JOURNAL_SCHEMA

    broker, base = served
    reader = ("reader", PASSWORDS["reader"])
    _, bounds, _ = get(f"{base}/journal/v1/bounds", *reader)
    publisher = paho_factory(broker.port, unique("ranger"))
    publisher.client.username_pw_set("sensor", PASSWORDS["sensor"])
    publisher.connect()
    tag = unique("r")
    for n in range(30):
        publisher.publish(f"sensors/{tag}/{n % 3}", b"v%d" % n, qos=1)
    first, last = bounds["last"] + 1, bounds["last"] + 30
    status, table = range_rows(f"{base}/journal/v1/range?from={first}&to={last + 100}", *reader)
    assert status == 200, table
    assert table.schema == JOURNAL_SCHEMA
    assert table.column("seq").to_pylist() == list(range(first, last + 1))
    assert table.column("payload").to_pylist() == [b"v%d" % n for n in range(30)]
    # Only the topics asked for, and a user may ask for those its rules cover.
    url = f"{base}/journal/v1/range?from={first}&to={last}&topic=sensors/{tag}/1"
    status, table = range_rows(url, "sensor", PASSWORDS["sensor"])
    assert status == 200, table
    assert table.column("payload").to_pylist() == [b"v%d" % n for n in range(1, 30, 3)]
    # An empty range is a stream with the schema and no rows.
    status, table = range_rows(f"{base}/journal/v1/range?from={last + 1}&to={last}", *reader)
    assert (status, table.num_rows, table.schema) == (200, 0, JOURNAL_SCHEMA)
    for query in ("from=5", "from=x&to=9", "from=0&to=3", "from=9&to=3"):
        status, body, _ = get(f"{base}/journal/v1/range?{query}", *reader)
        assert (status == 400 and "range" in body["error"]) or "sequence" in body["error"], body


def test_a_range_trimmed_by_retention_is_410(
    broker_factory: Callable[..., BrokerProcess],
    paho_factory: Callable[..., PahoClient],
    tmp_path: Path,
) -> None:
    http_port = free_port()
    config = tmp_path / "retention.toml"
    config.write_text("[journal]\nmax_rows = 5\nretention_interval = 0.2\n", encoding="utf-8")
    broker = broker_factory("--http-port", str(http_port), config=config)
    publisher = paho_factory(broker.port, unique("trim"))
    publisher.connect()
    for n in range(20):
        publisher.publish("t", b"%d" % n, qos=1)
    base = f"http://127.0.0.1:{http_port}"
    assert wait_until(lambda: get(f"{base}/journal/v1/bounds")[1]["first"] > 1, 15.0)
    status, body, _ = get(f"{base}/journal/v1/range?from=1&to=20")
    assert status == 410 and "deleted by journal retention" in body["error"], body
    first = get(f"{base}/journal/v1/bounds")[1]["first"]
    assert get(f"{base}/journal/v1/bounds")[1]["last"] == 20
    status, table = range_rows(f"{base}/journal/v1/range?from={first}&to=20", "x", "y")
    assert status == 200 and table.column("seq").to_pylist() == list(range(first, 21))
