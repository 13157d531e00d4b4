"""`telemq subs`: what it refuses before sending anything, and what it says when the broker
refuses it (docs/mq.md "From the command line")."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator

import pytest

from telemq.cli.main import main

from .conftest import ClientFactory, start_broker
from .helpers import BrokerProcess, unique, users_and_acl

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # carol may send commands, but not read the replies; dave may do everything.
    acl = [("dave", "all", "#", True), ("*", "command", "#", True), ("*", "all", "subs/#", True)]
    config = 'name = "QM.SUBSCLI"\n[sys]\ninterval = 0\n'
    users = {"carol": "carol-pw", "dave": "dave-pw"}
    process = start_broker(tmp_path_factory, config + users_and_acl(users, acl))
    yield process
    process.finalize()


@pytest.mark.parametrize("expiry", ["nan", "inf", "-5", "0", "soon"])
def test_a_bad_expiry_is_refused_before_sending(
    expiry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["subs", "register", "-p", "1", "-t", "subs/a", "-q", "q", "--expiry", expiry])
    assert stopped.value.code == 2
    assert "--expiry" in capsys.readouterr().err


def test_an_argument_that_is_not_utf8_is_refused_before_sending(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # How Python passes the argument byte 0xff that is not UTF-8.
    code = main(["subs", "register", "-p", "1", "-t", "subs/a", "-q", "q", "--name", "\udcff"])
    assert code == 2
    assert "not valid UTF-8" in capsys.readouterr().err


def test_a_refused_reply_topic_is_named_at_once(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    port = str(broker.port)
    code = main(["subs", "list", "-p", port, "-u", "carol", "-P", "carol-pw"])
    assert code == 2
    err = capsys.readouterr().err
    assert "refused the subscription to the reply topic" in err, err


def dave(*args: str) -> list[str]:
    return [*args, "-u", "dave", "-P", "dave-pw"]


def test_deregister_removes_the_subscription_and_then_says_it_is_gone(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    port = str(broker.port)
    queue, topic = unique("q"), unique("subs/dereg/")
    assert main(dave("subs", "register", "-p", port, "-q", queue, "-t", topic)) == 0
    assert main(dave("subs", "list", "-p", port, "-q", queue)) == 0
    assert f"Topic: {topic}" in capsys.readouterr().out
    assert main(dave("subs", "deregister", "-p", port, "-q", queue, "-t", topic)) == 0
    assert main(dave("subs", "list", "-p", port, "-q", queue)) == 0
    assert topic not in capsys.readouterr().out
    assert main(dave("subs", "deregister", "-p", port, "-q", queue, "-t", topic)) == 2
    assert "completion: error\n  reason 3073" in capsys.readouterr().out


def test_request_update_sends_the_retained_publication_or_fails_without_one(
    broker: BrokerProcess, clients: ClientFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    port = str(broker.port)
    queue, topic = unique("q"), unique("subs/upd/")
    register = ("subs", "register", "-p", port, "-q", queue, "-t", topic, "-o", "PubOnReqOnly")
    assert main(dave(*register)) == 0
    update = ("subs", "request-update", "-p", port, "-q", queue, "-t", topic)
    assert main(dave(*update)) == 2  # nothing retained: MQRCCF_NO_RETAINED_MSG
    assert "completion: error\n  reason 3077" in capsys.readouterr().out
    publisher = clients(broker.port, username="dave", password="dave-pw")
    publisher.publish(topic, b"kept", qos=1, retain=True)
    receiver = clients(broker.port, queue, clean=False, username="dave", password="dave-pw")
    receiver.sync()
    assert receiver.deliveries(topic) == []  # PubOnReqOnly: nothing until asked
    assert main(dave(*update)) == 0
    assert [m.payload for m in receiver.wait_deliveries(1, topic)] == [b"kept"]


def test_list_shows_iso_times_and_not_its_own_reply_subscription(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """Times as ISO-8601 UTC, not epoch seconds; the subscription the tool makes to read the
    reply (its own session's) is not listed as one of the user's."""
    port = str(broker.port)
    queue, topic = unique("q"), unique("subs/iso/")
    register = ("subs", "register", "-p", port, "-q", queue, "-t", topic, "--expiry", "3600")
    assert main(dave(*register)) == 0
    capsys.readouterr()
    assert main(dave("subs", "list", "-p", port)) == 0
    out = capsys.readouterr().out
    assert "SYSTEM.BROKER.RESPONSE/telemq-tool-" not in out  # the tool's own client ids
    block = out[out.index(f"Topic: {topic}") :].split("subscription ")[0]
    times = {
        line.split(": ", 1)[0].strip(): line.split(": ", 1)[1]
        for line in block.splitlines()
        if line.strip().startswith(("Expiry:", "CreationTime:"))
    }
    assert set(times) == {"Expiry", "CreationTime"}, block
    for value in times.values():
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", value), value
    created = datetime.datetime.fromisoformat(times["CreationTime"].replace("Z", "+00:00"))
    expires = datetime.datetime.fromisoformat(times["Expiry"].replace("Z", "+00:00"))
    assert 3590 <= (expires - created).total_seconds() <= 3610
