"""`telemq subs`: what it refuses before sending anything, and what it says when the broker
refuses it (docs/mq.md "From the command line")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from telemq.cli.main import main

from .conftest import start_broker
from .helpers import BrokerProcess, users_and_acl

pytestmark = [pytest.mark.interop, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # carol may send commands, but not read the replies.
    acl = [("*", "command", "#", True), ("*", "all", "subs/#", True)]
    config = 'name = "QM.SUBSCLI"\n[sys]\ninterval = 0\n'
    process = start_broker(tmp_path_factory, config + users_and_acl({"carol": "carol-pw"}, acl))
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
