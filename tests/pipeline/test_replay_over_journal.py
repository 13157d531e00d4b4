"""`telemq pipeline replay --journal URL --subscription NAME` (docs/pipeline.md, replay): the
subscription comes from the broker's admin API, for an administrator; anyone else gets one
line saying to give `--topics` and `--filter` instead.

A broker subprocess serving the journal, with an administrator (`root`) and a user (`app`),
a persistent queue with a named MQ subscription and its SQL filter plus a plain MQTT one,
and the CLI itself as a subprocess. `--dry-run` shows what the job would evaluate without
starting Spark; one test runs the whole job on Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from telemq.client import MqttClient
from telemq.journal.client import JournalClient
from testsupport.process import users_and_acl

from .helpers import command, journal_service

pytestmark = pytest.mark.timeout(300)

PASSWORDS = {"root": "root-pw-3", "app": "app-pw-4"}
ACL = [("root", "all", "#", True), ("app", "all", "#", True)]
HOT = "temp > 30"
TEMPS = [22.5, 31.0, 35.5, 18.0, 30.0, 33.3, 40.1, 29.9]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The journal service's URL, with queue `q-hot` subscribed (SubName `hot-plant`:
    `plant/#` WHERE `temp > 30`, and `alarm/+`) and `TEMPS` published on `plant/a`; and the
    broker's data directory."""
    config = users_and_acl(PASSWORDS, ACL, admins={"root"})
    workdir = tmp_path_factory.mktemp("replay-journal")
    with journal_service(workdir, config_text=config) as (broker, url):
        login = {"username": "app", "password": PASSWORDS["app"]}
        subscriber = MqttClient("127.0.0.1", broker.port, "q-hot", clean_session=False, **login)
        subscriber.connect()
        try:
            psc = {"Command": "RegSub", "Topic": ["plant/#"], "Filter": HOT, "SubName": "hot-plant"}
            assert command(subscriber, psc)["pscr"]["Completion"] == "ok"
            assert subscriber.subscribe([("alarm/+", 1)]) == [1]
        finally:
            subscriber.close()
        with MqttClient("127.0.0.1", broker.port, "publisher", **login) as publisher:
            for temp in TEMPS:
                publisher.publish("plant/a", json.dumps({"temp": temp}).encode(), qos=1)
            publisher.publish("other/b", json.dumps({"temp": 99}).encode(), qos=1)
        yield url, broker.data_dir


def replay(
    url: str, user: str | None, *arguments: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """`telemq pipeline replay --journal URL` as `user`, its password in the environment."""
    env = dict(os.environ)
    env.pop("TELEMQ_JOURNAL_PASSWORD", None)
    command_line = [sys.executable, "-m", "telemq", "pipeline", "replay", "--journal", url]
    if user is not None:
        command_line += ["--journal-user", user]
        env["TELEMQ_JOURNAL_PASSWORD"] = PASSWORDS.get(user, "wrong")
    return subprocess.run(
        [*command_line, *arguments],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=cwd,
        env=env,
    )


def test_an_administrator_gets_the_subscription_from_the_admin_api(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = served
    first, last = JournalClient(url, "root", PASSWORDS["root"]).bounds()
    done = replay(url, "root", "--subscription", "hot-plant", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"dry run: would replay seq {first:,}..{last:,} of {url}",
        f"  subscription 'hot-plant' of queue 'q-hot': plant/# WHERE {HOT}",
    ]
    # A queue's name: all of its subscriptions, the plain MQTT one too.
    done = replay(url, "root", "--subscription", "q-hot", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"  subscription 'hot-plant' of queue 'q-hot': plant/# WHERE {HOT}" in done.stdout
    assert "  subscription of queue 'q-hot': alarm/+" in done.stdout
    done = replay(url, "root", "--subscription", "nobody", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == f"telemq: no subscription or queue named 'nobody' in {url}\n"
    assert not (tmp_path / "telemq-spark.log").exists()  # Spark never started


def test_anyone_else_is_told_to_give_topics_and_filter_in_one_line(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = served
    done = replay(url, "app", "--subscription", "hot-plant", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "telemq: --subscription over --journal needs an administrator (the subscription is"
        " read from the broker's admin API, which answered 403: the admin API is for"
        " administrators, not 'app'); give --topics and --filter instead\n"
    )
    assert done.stdout == ""  # nothing started
    # The advice works: the same user, the subscription's topics and filter.
    done = replay(url, "app", "--topics", "plant/#", "--filter", HOT, "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"  topics plant/# WHERE {HOT}" in done.stdout
    # Credentials the broker does not take are that, not a matter of rights.
    done = replay(url, "nobody", "--subscription", "hot-plant", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "telemq: admin API: 401 bad user name or password\n"
    assert not (tmp_path / "telemq-spark.log").exists()


@pytest.mark.spark
def test_the_administrators_replay_runs_on_spark(served: tuple[str, Path], tmp_path: Path) -> None:
    url, data = served
    done = replay(
        url, "root", "--subscription", "hot-plant", "--master", "local[1]", "-q", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    hot = [t for t in TEMPS if t > 30]
    assert done.stdout.splitlines()[0].startswith(f"{len(hot)} match(es) in seq "), done.stdout
    # The same as the replay of the store file, where the subscription is read directly.
    offline = subprocess.run(
        [sys.executable, "-m", "telemq", "pipeline", "replay", "-d", str(data),
         "--subscription", "hot-plant", "--master", "local[1]", "-q"],
        capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout.splitlines()[1:] == done.stdout.splitlines()[1:]
