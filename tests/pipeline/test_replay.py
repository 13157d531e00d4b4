"""`telemq pipeline replay`: Spark finds what the broker delivered live to a subscription."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from telemq.cli.main import main
from telemq.client import MqttClient
from telemq.pipeline.replay import replay_frame, run_replay
from telemq.pipeline.subscriptions import find_subscriptions, topic_regex

from .helpers import command, drain

pytestmark = pytest.mark.spark

HOT = "temp > 30 AND Properties.QoS > 0 OR site.alarm = TRUE"


def publish_mix(port: int, count: int) -> None:
    rng = random.Random(3)
    with MqttClient("127.0.0.1", port, "replay-publisher") as publisher:
        for i in range(count):
            topic = rng.choice(["plant/a", "plant/b/c", "alarm/x", "alarm/x/y", "other/z"])
            body: Any = {"temp": round(rng.uniform(20, 40), 1)}
            if i % 11 == 0:
                body = {"temp": "35", "site": {"alarm": True}}
            elif i % 13 == 0:
                body = "not json"
            payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            publisher.publish(topic, payload, qos=i % 3)


def test_replay_matches_the_brokers_live_deliveries(
    spark: Any, broker: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, port, data = broker
    subscriber = MqttClient("127.0.0.1", port, "q-live", clean_session=False)
    subscriber.connect()
    try:
        reply = command(
            subscriber,
            {"Command": "RegSub", "Topic": ["plant/#"], "Filter": HOT, "SubName": "hot-plant"},
        )
        assert reply["pscr"]["Completion"] == "ok", reply
        assert subscriber.subscribe([("alarm/+", 2)]) == [2]  # a plain MQTT one, same queue
        publish_mix(port, 300)
        live = [m for m in drain(subscriber, 2.0) if not m.topic.startswith("SYSTEM.")]
    finally:
        subscriber.close()
    delivered = sorted((m.topic, m.payload) for m in live)
    assert 20 < len(delivered) < 300

    subs = find_subscriptions(data, "q-live")  # the queue: all of its subscriptions
    reply_topic = "SYSTEM.BROKER.RESPONSE/q-live"  # subscribed to by `command`
    assert sorted(s.topic_filter for s in subs) == [reply_topic, "alarm/+", "plant/#"]
    rows = replay_frame(spark, data, subscriptions=subs).where("topic <> '" + reply_topic + "'")
    assert sorted((r["topic"], bytes(r["payload"])) for r in rows.collect()) == delivered

    named = find_subscriptions(data, "hot-plant")  # by SubName: the RegSub only
    assert [(s.queue, s.filter) for s in named] == [("q-live", HOT)]
    result = run_replay(spark, data, subscription="hot-plant", limit=5)
    assert result.matched == sum(1 for t, _ in delivered if t.startswith("plant/"))
    assert len(result.preview) == 5

    # The same through the CLI, with --topics/--filter and a seq range, written as Parquet.
    out = tmp_path / "matches"
    code = main(
        ["pipeline", "replay", "-d", str(data), "--topics", "plant/#", "--filter", HOT,
         "--from-seq", "1", "--to-seq", "1000000", "-o", str(out), "--limit", "3", "-q"]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert f"{result.matched:,} match(es)" in printed
    assert spark.read.parquet(str(out)).count() == result.matched


def test_replay_errors_are_one_line(
    spark: Any, broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, data = broker
    assert main(["pipeline", "replay", "-d", str(data), "--topics", "a/#", "--filter", "x >"]) == 2
    assert "invalid filter (reason 3150)" in capsys.readouterr().err
    assert main(["pipeline", "replay", "-d", str(data), "--subscription", "nobody"]) == 2
    assert "no subscription or queue named 'nobody'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs --queue"):
        run_replay(spark, data, topics=["a/#"], deliver=True)
    assert main(["pipeline", "replay", "-d", str(data), "--topics", "a/#", "--deliver"]) == 2
    assert "--deliver with --topics needs --queue" in capsys.readouterr().err
    assert main(["pipeline", "replay", "-d", str(data), "--topics", "a/#", "--queue", "q"]) == 2
    assert "--queue goes with --deliver" in capsys.readouterr().err


def test_replay_deliver_backfills_the_subscribers_queue(
    spark: Any, broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """History published before the subscription existed is put on its queue: the
    subscriber, offline meanwhile, gets exactly the matches, in seq order, once."""
    _, port, data = broker
    publish_mix(port, 200)
    subscriber = MqttClient("127.0.0.1", port, "q-back", clean_session=False)
    subscriber.connect()
    reply = command(
        subscriber,
        {"Command": "RegSub", "Topic": ["plant/#"], "Filter": HOT, "SubName": "backfill"},
    )
    assert reply["pscr"]["Completion"] == "ok", reply
    subscriber.disconnect()  # offline: the backfill waits in its queue (QoS 1)
    subs = find_subscriptions(data, "backfill")
    expected = [
        (r["topic"], bytes(r["payload"]))
        for r in replay_frame(spark, data, subscriptions=subs).orderBy("seq").collect()
    ]
    assert 10 < len(expected) < 200

    broker_address = f"127.0.0.1:{port}"
    code = main(
        ["pipeline", "replay", "-d", str(data), "--subscription", "backfill", "--deliver",
         "--broker", broker_address, "--limit", "0", "-q"]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert f"delivered {len(expected):,} of {len(expected):,} to queue 'q-back'" in printed

    subscriber = MqttClient("127.0.0.1", port, "q-back", clean_session=False)
    assert subscriber.connect() is True
    try:
        got = [m for m in drain(subscriber, 2.0) if not m.topic.startswith("SYSTEM.")]
    finally:
        subscriber.close()
    assert [(m.topic, m.payload) for m in got] == expected  # exactly the matches, in order
    assert {m.qos for m in got} == {1} and not any(m.retain for m in got)

    # A queue the broker does not know: every match is refused, and the summary says why.
    code = main(
        ["pipeline", "replay", "-d", str(data), "--topics", "plant/#", "--filter", HOT,
         "--deliver", "--queue", "nobody", "--broker", broker_address, "--limit", "0", "-q"]
    )  # fmt: skip
    assert code == 1
    printed = capsys.readouterr().out
    assert f"delivered 0 of {len(expected):,} to queue 'nobody'" in printed
    assert f"refused {len(expected):,} (first: " in printed and "reason 3076" in printed


def test_topic_filters_as_regular_expressions(spark: Any) -> None:
    from pyspark.sql import functions as F

    from telemq.protocol import topic_matches

    topics = ["a", "a/b", "a/b/c", "/a", "a//b", "$SYS/x", "b/a", "a.b", "a+b", "a\\E/c"]
    filters = ["a/#", "#", "+/b", "a/+/c", "+", "/+", "a//b", "$SYS/#", "a.b", "a\\E/+", "+/+"]
    frame = spark.createDataFrame([(t,) for t in topics], "topic string")
    got = frame.select(
        "topic",
        *[F.col("topic").rlike(topic_regex(f)).alias(str(i)) for i, f in enumerate(filters)],
    ).collect()
    for row in got:
        for i, f in enumerate(filters):
            assert row[str(i)] == topic_matches(f, row["topic"]), (f, row["topic"])
