"""Consumer offsets kept by the journal service (docs/pipeline.md, "The journal service").

A broker subprocess with users, ACL rules and a short journal retention; the journal
service's own client (`telemq.journal.JournalClient`, the standard library's HTTP) and raw
`urllib` requests: offsets are kept across a SIGKILL, belong to the user who wrote them,
need the right to read the journal, and hold retention back while the consumer is live; a
bad request is 400 with a message.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from telemq.journal.client import JournalClient, JournalServiceError
from testsupport.process import users_and_acl, wait_until

from .helpers import BrokerProcess, PahoClient, free_port, unique

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

PASSWORDS = {"ingest": "ingest-pw-1", "other": "other-pw-2", "boss": "boss-pw-3"}
ACL = [
    ("ingest", "journal", "#", True),
    ("other", "journal", "sensors/#", True),
    ("boss", "journal", "#", True),
    ("*", "publish", "#", True),
]


def _broker(
    factory: Callable[..., BrokerProcess], tmp_path: Path, extra: str = ""
) -> tuple[BrokerProcess, str]:
    http_port = free_port()
    config = tmp_path / "consumers.toml"
    users = users_and_acl(PASSWORDS, ACL).replace('name = "boss"', 'name = "boss"\nadmin = true')
    config.write_text("[sys]\ninterval = 0\n" + extra + users, encoding="utf-8")
    broker = factory("--http-port", str(http_port), config=config)
    return broker, f"http://127.0.0.1:{http_port}"


def client(base: str, user: str) -> JournalClient:
    return JournalClient(base, user=user, password=PASSWORDS[user], timeout=10)


def raw(method: str, url: str, user: str, body: bytes | None = None) -> tuple[int, Any]:
    token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    request = urllib.request.Request(url, data=body, method=method)
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_offsets_are_kept_owned_and_listed(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    _, base = _broker(broker_factory, tmp_path)
    ingest, other, boss = client(base, "ingest"), client(base, "other"), client(base, "boss")
    first = ingest.commit_offset("ingest-1", None)
    assert first["committed_seq"] is None and first["owner"] == "ingest" and first["live"]
    assert ingest.commit_offset("ingest-1", 41)["committed_seq"] == 41
    # A heartbeat (null) keeps the committed seq; stopping is recorded.
    assert ingest.commit_offset("ingest-1", None)["committed_seq"] == 41
    stopped = ingest.commit_offset("ingest-1", None, running=False)
    assert (stopped["committed_seq"], stopped["running"], stopped["live"]) == (41, False, False)
    # The name is the first writer's: another user may neither move nor delete it.
    with pytest.raises(JournalServiceError, match="belongs to another user") as refused:
        other.commit_offset("ingest-1", 99, topics=["sensors/#"])
    assert refused.value.status == 403
    with pytest.raises(JournalServiceError, match="belongs to another user"):
        other.delete_offset("ingest-1")
    other.commit_offset("mine", 3, topics=["sensors/#"])
    assert [o["name"] for o in ingest.offsets()] == ["ingest-1"]
    assert [o["name"] for o in other.offsets()] == ["mine"]
    assert [o["name"] for o in boss.offsets()] == ["ingest-1", "mine"]  # an administrator
    assert ingest.delete_offset("ingest-1") is True
    assert ingest.delete_offset("ingest-1") is False
    assert [o["name"] for o in boss.offsets()] == ["mine"]


def test_holding_retention_back_needs_the_right_to_read(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    _, base = _broker(broker_factory, tmp_path)
    other = client(base, "other")
    with pytest.raises(JournalServiceError, match="'#'") as refused:
        other.commit_offset("wide", 1)  # topics default to `#`, beyond its rules
    assert refused.value.status == 403
    assert other.offsets() == []


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        ("consumers/a%20b", b"{}", "consumer name"),
        ("consumers/ok", b"[1]", "JSON object"),
        ("consumers/ok", b"{", "JSON object"),
        ("consumers/ok", b'{"committed_seq": -1}', "committed_seq"),
        ("consumers/ok", b'{"committed_seq": "7"}', "committed_seq"),
        ("consumers/ok", b'{"committed_seq": true}', "committed_seq"),
        ("consumers/ok", b'{"running": "yes"}', "running"),
        ("consumers/ok", b'{"topics": "#"}', "topics"),
        ("consumers/ok", b'{"topics": ["a/#/b"]}', "not a topic filter"),
    ],
)
def test_a_bad_offset_is_400_naming_the_problem(
    broker_factory: Callable[..., BrokerProcess],
    tmp_path: Path,
    path: str,
    body: bytes,
    error: str,
) -> None:
    _, base = _broker(broker_factory, tmp_path)
    status, reply = raw("PUT", f"{base}/journal/v1/{path}", "ingest", body)
    assert status == 400 and error in reply["error"], reply
    assert client(base, "ingest").offsets() == []


def test_offsets_survive_sigkill(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    http_port = free_port()
    config = tmp_path / "kill.toml"
    config.write_text(users_and_acl(PASSWORDS, ACL), encoding="utf-8")
    broker = broker_factory("--http-port", str(http_port), config=config)
    base = f"http://127.0.0.1:{http_port}"
    client(base, "ingest").commit_offset("durable", 17)
    broker.kill()
    broker.start()
    (kept,) = client(base, "ingest").offsets()
    assert (kept["name"], kept["committed_seq"], kept["running"]) == ("durable", 17, True)


def test_retention_keeps_what_a_live_consumer_has_not_committed(
    broker_factory: Callable[..., BrokerProcess],
    paho_factory: Callable[..., PahoClient],
    tmp_path: Path,
) -> None:
    broker, base = _broker(
        broker_factory, tmp_path, "[journal]\nmax_rows = 5\nretention_interval = 0.2\n"
    )
    ingest = client(base, "ingest")
    ingest.commit_offset("slow-reader", 8)
    publisher = paho_factory(broker.port, unique("pub"))
    publisher.client.username_pw_set("ingest", PASSWORDS["ingest"])
    publisher.connect()
    for n in range(40):
        publisher.publish("sensors/t", b"%d" % n, qos=1)
    # Retention alone would keep seqs 36..40; the consumer holds everything after 8.
    assert wait_until(lambda: ingest.bounds()[0] == 9, 15.0), ingest.bounds()
    ingest.commit_offset("slow-reader", 30)
    assert wait_until(lambda: ingest.bounds()[0] == 31, 15.0), ingest.bounds()
    # A stopped consumer no longer holds it back.
    ingest.commit_offset("slow-reader", None, running=False)
    assert wait_until(lambda: ingest.bounds()[0] == 36, 15.0), ingest.bounds()
    assert ingest.bounds()[1] == 40
