"""Every configuration key, given a value of the wrong type (and some values out of range),
stops `telemq serve` with exit status 2 and a one-line error naming the key (README,
"Configuration file").

The keys are read from the configuration's own dataclasses, so a key added later is covered
without editing this test. In process: `telemq.cli.main`, which returns the exit status.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from telemq.broker.settings.config import (
    BrokerConfig,
    HaConfig,
    HttpConfig,
    JournalConfig,
    LimitsConfig,
    ListenerConfig,
    Mqtt5Config,
    SparkplugConfig,
    StoreConfig,
    SysConfig,
)
from telemq.broker.settings.network import BridgeConfig, LinkConfig
from telemq.cli.main import main

TABLES: dict[str, type[Any]] = {
    "store": StoreConfig,
    "journal": JournalConfig,
    "limits": LimitsConfig,
    "mqtt5": Mqtt5Config,
    "sys": SysConfig,
    "ha": HaConfig,
    "sparkplug": SparkplugConfig,
}
TOP_LEVEL = {"name": "5", "sub_points": '"not a list"', "allow_anonymous": '"yes"'}
TOP_LEVEL |= {"users": '"nobody"', "acl": "3", "listeners": '"everywhere"', "http": "8080"}
TOP_LEVEL |= {"links": '"hub"', "bridges": "1"}
ARRAYS: dict[str, type[Any]] = {
    "listeners": ListenerConfig,
    "http": HttpConfig,
    "links": LinkConfig,
    "bridges": BridgeConfig,
}
LINK = 'name = "edge"\n[[links]]\nname = "hub"\n'
PG = '[store]\nkind = "postgres"\ndsn = "dbname=telemq"\n'
BRIDGE = 'name = "edge"\n[[bridges]]\nname = "cloud"\nhost = "localhost"\n'


# Values of the right type that a check refuses.
OUT_OF_RANGE = [
    ("[limits]\nmax_topic_levels = 0\n", "limits.max_topic_levels"),
    ("[limits]\nmax_topic_length = 70000\n", "limits.max_topic_length"),
    ("[limits]\nmax_queued_bytes = -1\n", "limits.max_queued_bytes"),
    ("[limits]\nmax_subscriptions_per_client = -5\n", "limits.max_subscriptions_per_client"),
    ('[[users]]\nname = "a"\npassword_hash = "x"\nadmin = "yes"\n', "users[0].admin"),
    ('[[acl]]\naction = "queues"\ntopic = "#"\n', "acl[0]"),
    ("[[http]]\nport = -1\n", "http[0].port"),
    ("[mqtt5]\nreceive_maximum = 0\n", "mqtt5.receive_maximum"),
    ("[mqtt5]\nmaximum_qos = 3\n", "mqtt5.maximum_qos"),
    ("[mqtt5]\ntopic_alias_maximum = 65536\n", "mqtt5.topic_alias_maximum"),
    ("[mqtt5]\nmax_session_expiry_interval = -1\n", "mqtt5.max_session_expiry_interval"),
    ("[mqtt5]\nserver_keep_alive = 70000\n", "mqtt5.server_keep_alive"),
    ("[ha]\nenabled = true\n", "ha.enabled"),  # without the postgres store
    (PG + "[ha]\nenabled = true\npoll_interval = 0\n", "ha.poll_interval"),
    (PG + "[ha]\nenabled = true\nrejoin_delay = -1\n", "ha.rejoin_delay"),
    (PG + "[ha]\nenabled = true\npoll_interval = 3\n", "ha.lease"),  # lease < 2 polls
    ('[[http]]\nkeyfile = "k.pem"\n', "http[0].keyfile"),
    ('[[http]]\nwebsocket_paths = ["mqtt"]\n', "http[0].websocket_paths"),
    ('[[http]]\nwebsocket_paths = "/mqtt"\n', "http[0].websocket_paths"),
    ('[[http]]\nsub_point = "nowhere"\n', "http[0].sub_point"),
    # The network (docs/network.md §2).
    ('name = "a b"\n[[links]]\nname = "hub"\nhost = "h"\n', "name"),
    (LINK, "links[0]"),  # neither host nor user
    (LINK + 'host = "h"\nuser = "u"\n', "links[0]"),  # both
    ('name = "edge"\n[[links]]\nname = "edge"\nhost = "h"\n', "links[0].name"),
    ('name = "edge"\n[[links]]\nname = "hub/1"\nhost = "h"\n', "links[0].name"),
    (LINK + 'host = "h"\n[[links]]\nname = "hub"\nhost = "h2"\n', "links[1].name"),
    (LINK + 'user = "nobody"\n', "links[0].user"),
    (LINK + 'host = "h"\nport = 0\n', "links[0].port"),
    (LINK + 'host = "h"\nkeepalive = 1\n', "links[0].keepalive"),
    (LINK + 'host = "h"\nreconnect_min = 5.0\nreconnect_max = 1.0\n', "links[0].reconnect_min"),
    (LINK + 'host = "h"\npassword = "p"\npassword_file = "f"\n', "links[0]"),
    (LINK + 'host = "h"\npassword_file = "no-such-file"\n', "links[0].password_file"),
    (LINK + 'host = "h"\ncafile = "no-such-ca.pem"\n', "links[0].cafile"),
    (LINK + 'host = "h"\ncertfile = "c.pem"\n', "links[0]"),
    (LINK + 'host = "h"\nmax_inflight = 0\n', "links[0].max_inflight"),
    ('name = "edge"\n[[bridges]]\nname = "cloud"\ntopics = ["a/#"]\n', "bridges[0].host"),
    (BRIDGE, "bridges[0].topics"),
    (BRIDGE + 'topics = ["a/# sideways 1"]\n', "bridges[0].topics[0]"),
    (BRIDGE + 'topics = ["a/# out 3"]\n', "bridges[0].topics[0]"),
    (BRIDGE + 'topics = ["\\"\\" both 1"]\n', "bridges[0].topics[0]"),
    (BRIDGE + 'topics = ["a/# in 1 local"]\n', "bridges[0].topics[0]"),
    (BRIDGE + 'topics = ["a/#/b"]\n', "bridges[0].topics[0]"),
    (BRIDGE + 'protocol = "4"\ntopics = ["a/#"]\n', "bridges[0].protocol"),
    (
        'name = "edge"\n[[links]]\nname = "cloud"\nhost = "h"\n' + BRIDGE[14:] + 'topics = ["#"]\n',
        "bridges[0].name",
    ),
]


def wrong_value(default: object) -> str:
    """A TOML value of another type than `default`'s."""
    if isinstance(default, bool):
        return '"yes"'
    if isinstance(default, int | float):
        return '"many"'
    if isinstance(default, str):
        return "5"
    return "5"  # lists


def cases() -> list[tuple[str, str]]:
    """(TOML text, the key path the error must name) for every key."""
    found: list[tuple[str, str]] = []
    for field in dataclasses.fields(BrokerConfig):
        if field.name in TABLES:
            continue
        found.append((f"{field.name} = {TOP_LEVEL[field.name]}\n", field.name))
    for table, cls in TABLES.items():
        defaults = cls()
        for field in dataclasses.fields(cls):
            value = wrong_value(getattr(defaults, field.name))
            found.append((f"[{table}]\n{field.name} = {value}\n", f"{table}.{field.name}"))
        found.append((f"[{table}]\nno_such_key = 1\n", f"{table}.no_such_key"))
        found.append((f"{table} = 3\n", table))
    for array, cls in ARRAYS.items():
        entry = cls()
        for field in dataclasses.fields(cls):
            value = wrong_value(getattr(entry, field.name))
            found.append((f"[[{array}]]\n{field.name} = {value}\n", f"{array}[0].{field.name}"))
    return found + OUT_OF_RANGE


@pytest.mark.parametrize(("text", "key"), cases(), ids=[key for _, key in cases()])
def test_a_wrong_value_for_any_key_is_exit_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str
) -> None:
    config = tmp_path / "telemq.toml"
    config.write_text(text, encoding="utf-8")
    status = main(["serve", "--config", str(config), "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert status == 2, err
    lines = [line for line in err.splitlines() if line.startswith("telemq: configuration error")]
    assert len(lines) == 1, err
    assert f"{key}:" in lines[0] or f"{key} " in lines[0], lines[0]
    assert not (tmp_path / "data").exists()  # refused before anything was created
