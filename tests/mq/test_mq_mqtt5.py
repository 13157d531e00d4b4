"""The MQ command model on MQTT 5.0 (docs/mq.md, "MQTT 5.0"), with paho-mqtt `MQTTv5`:

- a command PUBLISH's Response Topic and Correlation Data stand for `<mqmd>`'s ReplyToQ and
  CorrelId: the reply goes to the Response Topic and carries the Correlation Data, its
  Content Type and Payload Format Indicator, in both command forms and at each QoS;
- `<mqmd>` wins over the properties when it gives the field;
- a CorrelAsId registration keyed by Correlation Data; its deliveries to a 5.0 subscriber
  carry the CorrelId as Correlation Data, replacing the publisher's own, live and retained;
  a 3.1.1 subscriber still gets the message;
- a malformed command still gets its 3097 reply on the Response Topic;
- content filters read `Properties.ContentType` and `Properties.User.<name>`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from testsupport.paho import MQTT5, PahoClient, Received

from .conftest import start_broker
from .helpers import CONTROL_QUEUE, BrokerProcess, json_command, parse_reply, unique, xml_command

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory, 'name = "QM.FIVE"\n[sys]\ninterval = 0\n')
    yield process
    process.finalize()


@pytest.fixture
def made() -> Iterator[list[PahoClient]]:
    clients: list[PahoClient] = []
    yield clients
    for client in clients:
        client.close()


def client5(broker: BrokerProcess, made: list[PahoClient], name: str) -> PahoClient:
    client = PahoClient(broker.port, unique(name), version=MQTT5)
    made.append(client)
    client.connect()
    return client


def publish_props(
    response_topic: str | None = None,
    correlation: bytes | None = None,
    content_type: str | None = None,
    user: list[tuple[str, str]] | None = None,
) -> PahoProperties:
    props = PahoProperties(PacketTypes.PUBLISH)
    if response_topic is not None:
        props.ResponseTopic = response_topic
    if correlation is not None:
        props.CorrelationData = correlation
    if content_type is not None:
        props.ContentType = content_type
    if user:
        props.UserProperty = user
    return props


def reply_on(client: PahoClient, topic: str) -> Received:
    (message,) = client.wait_messages(1, topic=topic)
    return message


@pytest.mark.parametrize("form", ["xml", "json"])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_the_reply_goes_to_the_response_topic_with_the_correlation_data(
    broker: BrokerProcess, made: list[PahoClient], form: str, qos: int
) -> None:
    client = client5(broker, made, "req")
    replies = f"replies/{unique('r')}"
    client.subscribe(replies, qos=1)
    build = xml_command if form == "xml" else json_command
    queue = unique("q")
    command = build({"Command": "RegSub", "Topic": "mq5/x", "QName": queue})
    correlation = b"\x00\x01request-7\xff"
    client.publish(CONTROL_QUEUE, command, qos=qos, properties=publish_props(replies, correlation))
    message = reply_on(client, replies)
    reply = parse_reply(message.payload, message.topic)
    assert reply.completion == "ok"
    assert reply.correl_id == correlation.hex().upper()  # the CorrelId the reply states
    props = message.properties
    assert props.CorrelationData == correlation
    assert props.ContentType == f"application/{form}"
    assert props.PayloadFormatIndicator == 1


def test_mqmd_wins_over_the_properties(broker: BrokerProcess, made: list[PahoClient]) -> None:
    client = client5(broker, made, "req")
    from_mqmd = f"replies/{unique('mqmd')}"
    from_props = f"replies/{unique('props')}"
    client.subscribe(from_mqmd, qos=1)
    client.subscribe(from_props, qos=1)
    command = xml_command(
        {"Command": "RegSub", "Topic": "mq5/y", "QName": unique("q")},
        mqmd={"ReplyToQ": from_mqmd, "CorrelId": "0A0B"},
    )
    client.publish(CONTROL_QUEUE, command, qos=1, properties=publish_props(from_props, b"zz"))
    message = reply_on(client, from_mqmd)
    assert parse_reply(message.payload).correl_id == "0A0B"
    # The reply echoes the command's own Correlation Data, which the requester matches on.
    assert message.properties.CorrelationData == b"zz"
    # The broker sent its reply(ies) while handling the command; a sentinel the client
    # publishes now, into its own session, comes after them.
    sentinel = f"replies/{unique('sentinel')}"
    client.subscribe(sentinel, qos=1)
    client.publish(sentinel, b"sentinel", qos=1)
    client.wait_messages(1, topic=sentinel)
    assert client.received(from_props) == []  # no reply went to the property's topic


def test_a_malformed_command_gets_its_error_on_the_response_topic(
    broker: BrokerProcess, made: list[PahoClient]
) -> None:
    client = client5(broker, made, "bad")
    replies = f"replies/{unique('bad')}"
    client.subscribe(replies, qos=1)
    client.publish(
        CONTROL_QUEUE, b"<psc><Command>RegSub", qos=1, properties=publish_props(replies, b"c-1")
    )
    message = reply_on(client, replies)
    reply = parse_reply(message.payload)
    assert reply.completion == "error"
    assert reply.responses[0]["Reason"] == 3097
    assert message.properties.CorrelationData == b"c-1"


def test_a_correlasid_registration_delivers_its_correlid_as_correlation_data(
    broker: BrokerProcess, made: list[PahoClient]
) -> None:
    subscriber = client5(broker, made, "corr")
    replies = f"replies/{unique('c')}"
    subscriber.subscribe(replies, qos=1)
    topic = f"mq5/{unique('corr')}"
    publisher = client5(broker, made, "pub")
    # A retained message, there before the registration.
    publisher.publish(
        topic, b"retained", qos=1, retain=True, properties=publish_props(correlation=b"own")
    )
    command = xml_command(
        {"Command": "RegSub", "Topic": topic, "QName": subscriber.client_id, "RegOpt": "CorrelAsId"}
    )
    correl = b"sub-A\x00\x01"
    subscriber.publish(CONTROL_QUEUE, command, qos=1, properties=publish_props(replies, correl))
    assert parse_reply(reply_on(subscriber, replies).payload).completion == "ok"
    (retained,) = subscriber.wait_messages(1, topic=topic)
    assert retained.payload == b"retained"
    assert retained.properties.CorrelationData == correl
    for qos in (0, 1, 2):
        publisher.publish(
            topic,
            b"live %d" % qos,
            qos=qos,
            properties=publish_props(correlation=b"publisher's own", content_type="text/plain"),
        )
    live = subscriber.wait_messages(4, topic=topic)[1:]
    assert [m.payload for m in live] == [b"live 0", b"live 1", b"live 2"]
    for message in live:
        assert message.properties.CorrelationData == correl  # the CorrelId replaces the own
        assert message.properties.ContentType == "text/plain"  # the rest passes through


def test_a_311_correlasid_subscriber_gets_the_message(
    broker: BrokerProcess, made: list[PahoClient]
) -> None:
    subscriber = PahoClient(broker.port, unique("v3"))
    made.append(subscriber)
    subscriber.connect()
    topic = f"mq5/{unique('v3')}"
    command = xml_command(
        {"Command": "RegSub", "Topic": topic, "RegOpt": "CorrelAsId"},
        mqmd={"CorrelId": "0102"},
    )
    subscriber.subscribe(f"SYSTEM.BROKER.RESPONSE/{subscriber.client_id}", qos=1)
    subscriber.publish(CONTROL_QUEUE, command, qos=1)
    subscriber.wait_messages(1, topic=f"SYSTEM.BROKER.RESPONSE/{subscriber.client_id}")
    publisher = client5(broker, made, "pub")
    publisher.publish(topic, b"hello", qos=1, properties=publish_props(correlation=b"x"))
    (message,) = subscriber.wait_messages(1, topic=topic)
    assert message.payload == b"hello"


@pytest.mark.parametrize(
    ("filter_text", "wanted"),
    [
        ("Properties.ContentType = 'application/json'", [b"1", b"3"]),
        ("Properties.User.site = 'lab'", [b"1", b"2"]),
        ("Properties.User.site IS NULL", [b"3", b"4"]),
        ("Properties.ContentType LIKE 'text/%' AND Properties.User.site = 'lab'", [b"2"]),
    ],
)
def test_filters_read_content_type_and_user_properties(
    broker: BrokerProcess, made: list[PahoClient], filter_text: str, wanted: list[bytes]
) -> None:
    subscriber = client5(broker, made, "filtered")
    replies = f"replies/{unique('f')}"
    subscriber.subscribe(replies, qos=1)
    topic = f"mq5/{unique('filter')}"
    command = xml_command(
        {"Command": "RegSub", "Topic": topic, "QName": subscriber.client_id, "Filter": filter_text}
    )
    subscriber.publish(CONTROL_QUEUE, command, qos=1, properties=publish_props(replies))
    assert parse_reply(reply_on(subscriber, replies).payload).completion == "ok"
    publisher = client5(broker, made, "pub")
    sent = [
        (b"1", publish_props(content_type="application/json", user=[("site", "lab")])),
        (b"2", publish_props(content_type="text/plain", user=[("site", "lab"), ("site", "x")])),
        (b"3", publish_props(content_type="application/json", user=[("other", "lab")])),
        (b"4", None),
    ]
    for payload, props in sent:
        publisher.publish(topic, payload, qos=1, properties=props)
    subscriber.wait_messages(len(wanted), topic=topic)
    # Nothing else arrives: a sentinel from the same publisher into the same session (the
    # queue the RegSub named is the subscriber's own) comes after whatever it was sent.
    sentinel = f"mq5/{unique('sentinel')}"
    subscriber.subscribe(sentinel, qos=1)
    publisher.publish(sentinel, b"sentinel", qos=1)
    subscriber.wait_messages(1, topic=sentinel)
    assert [m.payload for m in subscriber.received(topic)] == wanted
