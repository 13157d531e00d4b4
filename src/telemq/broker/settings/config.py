"""Broker configuration: typed dataclasses, read from TOML, overridden by flags.

Every key has a default, so an empty file (or none) gives a working broker on
127.0.0.1:1883 with the SQLite store in `./telemq-data`. Unknown keys and
values of the wrong type are errors that name the key: a typo must not
silently fall back to a default.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ...protocol.peer5 import ServerLimits5
from ...store import STORE_KINDS, JournalLocation, PostgresLocation
from ..security.acl import AclRule
from ..security.auth import Authorizer
from ..security.users import AuthError, UserConfig
from .errors import ConfigError
from .network import BridgeConfig, LinkConfig, check_network
from .tls import server_context

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 1883
DEFAULT_DATA_DIR = "./telemq-data"


@dataclass(slots=True)
class ListenerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    sub_point: str = ""  # subscription point of publications received here
    # TLS (see docs/security.md): a certfile turns TLS on for this listener.
    certfile: str = ""
    keyfile: str = ""
    cafile: str = ""  # CA that signs client certificates (verified when sent)
    require_certificate: bool = False  # refuse clients without a valid certificate
    use_identity_as_username: bool = False  # the certificate's CN is the user name


@dataclass(slots=True)
class HttpConfig:
    """One `[[http]]` listener: the journal service (docs/pipeline.md) and MQTT over
    WebSockets (docs/websockets.md). TLS as for MQTT."""

    host: str = DEFAULT_HOST
    port: int = 8080
    certfile: str = ""
    keyfile: str = ""
    cafile: str = ""  # CA that signs client certificates (verified when sent)
    require_certificate: bool = False
    # MQTT over WebSockets: the paths that take the upgrade ([] turns it off), and the
    # subscription point of what its clients publish.
    websocket_paths: list[str] = field(default_factory=lambda: ["/mqtt", "/"])
    sub_point: str = ""

    def tls_listener(self) -> ListenerConfig:
        """The same TLS settings as an MQTT listener's, to build the SSL context alike; also
        the listener its WebSocket clients belong to."""
        return ListenerConfig(
            host=self.host,
            port=self.port,
            sub_point=self.sub_point,
            certfile=self.certfile,
            keyfile=self.keyfile,
            cafile=self.cafile,
            require_certificate=self.require_certificate,
        )


@dataclass(slots=True)
class StoreConfig:
    kind: str = "sqlite"  # "sqlite" | "postgres" | "memory"
    data_dir: str = DEFAULT_DATA_DIR
    sync: str = "full"  # "full" | "normal" | "off"
    linger: float = 0.5  # seconds writes nobody waits for (QoS 0 journal rows) may wait
    # The postgres store (docs/postgres.md): a libpq connection string or URI, and a file
    # holding the password (else the DSN, PGPASSWORD or ~/.pgpass, as libpq does).
    dsn: str = ""
    password_file: str = ""

    def postgres(self) -> PostgresLocation | None:
        """The postgres store's database; None for another kind of store."""
        if self.kind != "postgres":
            return None
        return PostgresLocation(self.dsn, self.password_file)

    def journal_location(self) -> JournalLocation | None:
        """Where readers find the journal (the journal service): the sqlite store's data
        directory, the postgres store's database; None for the memory store."""
        if self.kind == "sqlite":
            return self.data_dir
        return self.postgres()


@dataclass(slots=True)
class JournalConfig:
    enabled: bool = True
    exclude: list[str] = field(default_factory=lambda: ["$SYS/#"])  # topic filters
    # Retention (docs/pipeline.md): 0 keeps everything. Rows a running pipeline query has
    # not committed are kept regardless.
    max_age: float = 0.0  # seconds
    max_rows: int = 0
    retention_interval: float = 60.0  # seconds between retention passes


@dataclass(slots=True)
class LimitsConfig:
    max_packet_size: int = 1024 * 1024
    max_inflight: int = 100  # outbound QoS 1/2 messages in flight per session
    max_queued_messages: int = 1000  # per session, beyond what is in flight
    max_connections: int = 0  # 0 = unlimited
    connect_timeout: float = 10.0
    retry_interval: float = 20.0  # MQTT 3.1 peers: re-send unacknowledged after this
    max_topic_levels: int = 200  # levels of a topic name or filter (Mosquitto's limit)
    max_topic_length: int = 65535  # UTF-8 bytes of a topic name or filter (MQTT's limit)
    # Quotas (0 = unlimited): what one client can make the broker keep (docs/security.md).
    max_subscriptions_per_client: int = 10_000  # per session (an MQ queue is one)
    max_retained_messages: int = 1_000_000
    max_retained_bytes: int = 1024 * 1024 * 1024  # topic + payload, all retained messages
    max_queued_bytes: int = 256 * 1024 * 1024  # topic + payload queued per session
    max_topic_cache_bytes: int = 16 * 1024 * 1024  # topic names each routing cache keeps
    max_filter_size: int = 256  # of one content filter: its nodes and IN values (`a = 1`: 3)
    max_filter_size_per_user: int = 16_384  # of all the filters one user's subscriptions hold
    max_filter_time: float = 0.005  # seconds one user's content filters may spend per publication


@dataclass(slots=True)
class Mqtt5Config:
    """MQTT 5.0 (docs/mqtt5.md): what the broker advertises to 5.0 clients in CONNACK and
    enforces on them. `[limits]` keep their meaning at every protocol level."""

    enabled: bool = True  # false: a level-5 CONNECT gets CONNACK 1, as from a 3.1.1 server
    receive_maximum: int = 1024  # QoS 1/2 PUBLISHes a client may have unanswered
    maximum_qos: int = 2  # of PUBLISHes a 5.0 client sends, and of its subscriptions
    retain_available: bool = True
    topic_alias_maximum: int = 64  # aliases a client may use; 0: none
    wildcard_subscription_available: bool = True
    subscription_identifier_available: bool = True
    shared_subscription_available: bool = True  # false: $share/... is an ordinary filter
    max_session_expiry_interval: int = 0xFFFFFFFF  # seconds; longer requests are shortened
    server_keep_alive: int = 0  # seconds; 0: the client's keep-alive holds
    # Enhanced authentication with SCRAM-SHA-256 against [[users]] (when there are any).
    scram_sha_256: bool = True

    def server_limits(self, max_packet_size: int) -> ServerLimits5 | None:
        """The limits every 5.0 connection states in CONNACK; None when 5.0 is off."""
        if not self.enabled:
            return None
        return ServerLimits5(
            receive_maximum=self.receive_maximum,
            maximum_qos=self.maximum_qos,
            retain_available=self.retain_available,
            maximum_packet_size=max_packet_size,
            topic_alias_maximum=self.topic_alias_maximum,
            wildcard_subscription_available=self.wildcard_subscription_available,
            subscription_identifier_available=self.subscription_identifier_available,
            shared_subscription_available=self.shared_subscription_available,
            max_session_expiry_interval=self.max_session_expiry_interval,
            server_keep_alive=self.server_keep_alive,
        )


@dataclass(slots=True)
class SysConfig:
    interval: float = 10.0  # seconds between $SYS updates; 0 disables them


@dataclass(slots=True)
class HaConfig:
    """`[ha]`: one active broker and standbys on one PostgreSQL store (docs/ha.md)."""

    enabled: bool = False
    member: str = ""  # names this broker of the group to the database ("": the host name)
    server_reference: str = ""  # what a standby's CONNACK refers MQTT 5.0 clients to
    poll_interval: float = 1.0  # seconds between a standby's tries for the lock
    rejoin_delay: float = 5.0  # seconds a broker that stepped down waits before trying
    # Seconds the active broker may go without a word from its store (and the server
    # without a word from it) before it steps down (and the server ends its session).
    lease: float = 5.0


@dataclass(slots=True)
class SparkplugConfig:
    """`[sparkplug]`: the Sparkplug Aware MQTT Server of the Sparkplug 3.0 specification
    (docs/sparkplug.md). On by default: it costs one prefix test per publication."""

    aware: bool = True  # keep NBIRTH/DBIRTH as retained $sparkplug/certificates/... messages


Section = (
    StoreConfig
    | JournalConfig
    | LimitsConfig
    | Mqtt5Config
    | SysConfig
    | HaConfig
    | SparkplugConfig
)


@dataclass(slots=True)
class BrokerConfig:
    name: str = "telemq"
    listeners: list[ListenerConfig] = field(default_factory=lambda: [ListenerConfig()])
    http: list[HttpConfig] = field(default_factory=list)  # off unless configured
    sub_points: list[str] = field(default_factory=list)  # declared besides the default ""
    # Authentication and ACL (see docs/security.md); raw tables, checked by the authorizer.
    users: list[dict[str, Any]] = field(default_factory=list)
    acl: list[dict[str, Any]] = field(default_factory=list)
    allow_anonymous: bool | None = None  # None: True iff no user is configured
    store: StoreConfig = field(default_factory=StoreConfig)
    journal: JournalConfig = field(default_factory=JournalConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    mqtt5: Mqtt5Config = field(default_factory=Mqtt5Config)
    sys: SysConfig = field(default_factory=SysConfig)
    ha: HaConfig = field(default_factory=HaConfig)
    sparkplug: SparkplugConfig = field(default_factory=SparkplugConfig)
    # The broker's network (docs/network.md): neighbour telemq brokers, foreign brokers.
    links: list[LinkConfig] = field(default_factory=list)
    bridges: list[BridgeConfig] = field(default_factory=list)

    def validate(self) -> None:
        sections: dict[str, Section] = {
            "store": self.store,
            "journal": self.journal,
            "limits": self.limits,
            "mqtt5": self.mqtt5,
            "sys": self.sys,
            "ha": self.ha,
            "sparkplug": self.sparkplug,
        }
        for section_name, section in sections.items():
            for item in fields(section):
                value = getattr(section, item.name)
                if isinstance(value, float) and not math.isfinite(value):  # nan, inf
                    raise ConfigError(f"{section_name}.{item.name}: {value} is not a number")
        if not self.listeners:
            raise ConfigError("listeners: at least one listener is needed")
        for index, listener in enumerate(self.listeners):
            if not 0 <= listener.port <= 65535:
                raise ConfigError(f"listeners[{index}].port: {listener.port} is not a TCP port")
            if listener.sub_point and listener.sub_point not in self.sub_points:
                raise ConfigError(
                    f"listeners[{index}].sub_point: {listener.sub_point!r} is not declared "
                    "in sub_points"
                )
            _check_tls(listener, f"listeners[{index}]")
        for index, http in enumerate(self.http):
            if not 0 <= http.port <= 65535:
                raise ConfigError(f"http[{index}].port: {http.port} is not a TCP port")
            _check_tls(http.tls_listener(), f"http[{index}]")
            for path in http.websocket_paths:
                if not path.startswith("/") or any(c in path for c in "?#{} "):
                    raise ConfigError(
                        f"http[{index}].websocket_paths: {path!r} is not a path (it starts "
                        "with '/', without a query, '#', braces or spaces)"
                    )
            if http.sub_point and http.sub_point not in self.sub_points:
                raise ConfigError(
                    f"http[{index}].sub_point: {http.sub_point!r} is not declared in sub_points"
                )
        if self.store.kind not in STORE_KINDS:
            raise ConfigError(
                f"store.kind: {self.store.kind!r} is not 'sqlite', 'postgres' or 'memory'"
            )
        if self.store.kind == "postgres" and not self.store.dsn.strip():
            raise ConfigError(
                "store.dsn: the postgres store needs one (a libpq connection string or URI,"
                " such as 'host=db.example dbname=telemq user=telemq')"
            )
        if not 0 <= self.store.linger <= 60:
            raise ConfigError("store.linger: must be between 0 and 60 seconds")
        if self.store.sync not in ("full", "normal", "off"):
            raise ConfigError(f"store.sync: {self.store.sync!r} is not full, normal or off")
        limits = self.limits
        if limits.max_packet_size < 16:
            raise ConfigError("limits.max_packet_size: must be at least 16 bytes")
        for name in (
            "max_inflight",
            "max_queued_messages",
            "max_connections",
            "max_subscriptions_per_client",
            "max_retained_messages",
            "max_retained_bytes",
            "max_queued_bytes",
            "max_topic_cache_bytes",
            "max_filter_size",
            "max_filter_size_per_user",
            "max_filter_time",
        ):
            if getattr(limits, name) < 0:
                raise ConfigError(f"limits.{name}: must not be negative")
        if not 1 <= limits.max_topic_levels <= 65535:
            raise ConfigError("limits.max_topic_levels: must be between 1 and 65535")
        if not 1 <= limits.max_topic_length <= 65535:
            raise ConfigError("limits.max_topic_length: must be between 1 and 65535 bytes")
        if limits.connect_timeout <= 0:
            raise ConfigError("limits.connect_timeout: must be positive")
        journal = self.journal
        if journal.max_age < 0 or journal.max_rows < 0:
            raise ConfigError("journal.max_age / journal.max_rows: must not be negative")
        if journal.retention_interval <= 0:
            raise ConfigError("journal.retention_interval: must be positive")
        if self.sys.interval < 0:
            raise ConfigError("sys.interval: must not be negative")
        _check_mqtt5(self.mqtt5)
        _check_ha(self.ha, self.store.kind)
        check_network(
            self.name,
            self.links,
            self.bridges,
            {str(entry.get("name", "")) for entry in self.users},
            any(listener.use_identity_as_username for listener in self.listeners),
            ConfigError,
        )
        build_authorizer(self)


def _check_mqtt5(mqtt5: Mqtt5Config) -> None:
    for name, low, high in (
        ("receive_maximum", 1, 65535),
        ("maximum_qos", 0, 2),
        ("topic_alias_maximum", 0, 65535),
        ("max_session_expiry_interval", 0, 0xFFFFFFFF),
        ("server_keep_alive", 0, 65535),
    ):
        if not low <= getattr(mqtt5, name) <= high:
            raise ConfigError(f"mqtt5.{name}: must be between {low} and {high}")


def _check_ha(ha: HaConfig, store_kind: str) -> None:
    if not ha.enabled:
        return
    if store_kind != "postgres":
        raise ConfigError('ha.enabled: needs the postgres store ([store] kind = "postgres")')
    if not 0.01 <= ha.poll_interval <= 60:
        raise ConfigError("ha.poll_interval: must be between 0.01 and 60 seconds")
    if not 0 <= ha.rejoin_delay <= 3600:
        raise ConfigError("ha.rejoin_delay: must be between 0 and 3600 seconds")
    if not 0.1 <= ha.lease <= 3600:
        raise ConfigError("ha.lease: must be between 0.1 and 3600 seconds")
    if ha.lease < 2 * ha.poll_interval:
        raise ConfigError(
            f"ha.lease: must be at least twice ha.poll_interval ({2 * ha.poll_interval:g} s):"
            " the watchdog renews it every poll interval"
        )


TLS_OPTIONS_NEEDING_CERTFILE = (
    "keyfile",
    "cafile",
    "require_certificate",
    "use_identity_as_username",
)


def _check_tls(listener: ListenerConfig, where: str) -> None:
    """Reject TLS settings that would be ignored, and build the context to test its files.

    Building the SSL context here makes `telemq serve` stop at once with a message naming
    the setting and the file, instead of failing later while it opens the listeners.
    """
    if not listener.certfile:
        for option in TLS_OPTIONS_NEEDING_CERTFILE:
            if getattr(listener, option):
                raise ConfigError(
                    f"{where}.{option}: set without certfile; a listener speaks TLS only "
                    "when certfile is set"
                )
        return
    for option in ("require_certificate", "use_identity_as_username"):
        if getattr(listener, option) and not listener.cafile:
            raise ConfigError(
                f"{where}.{option}: needs cafile, the CA that signs the client certificates"
            )
    server_context(listener, where)


def build_authorizer(config: BrokerConfig) -> Authorizer:
    """The users, anonymous access and ACL of `config`; ConfigError names a bad entry."""
    try:
        users = [
            UserConfig.from_mapping(entry, f"users[{index}]")
            for index, entry in enumerate(config.users)
        ]
        acl = [
            AclRule.from_mapping(entry, f"acl[{index}]") for index, entry in enumerate(config.acl)
        ]
        from_certificates = [listener.use_identity_as_username for listener in config.listeners]
        certificate_names = (
            "all" if all(from_certificates) else "some" if any(from_certificates) else "none"
        )
        return Authorizer(users, acl, config.allow_anonymous, certificate_names)
    except AuthError as error:
        raise ConfigError(str(error)) from None


def _build(cls: type[Any], values: Mapping[str, Any], where: str) -> Any:
    """Build dataclass `cls` from a TOML table, checking names and types."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where}: expected a table, got {type(values).__name__}")
    known = {item.name: item for item in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        path = f"{where}.{key}" if where else key
        if key not in known:
            raise ConfigError(f"{path}: unknown setting (known: {', '.join(sorted(known))})")
        default = getattr(cls(), key)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"{path}: expected true or false, got {value!r}")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{path}: expected a number, got {value!r}")
            value = float(value)
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{path}: expected an integer, got {value!r}")
        elif isinstance(default, str):
            if not isinstance(value, str):
                raise ConfigError(f"{path}: expected a string, got {value!r}")
        elif (
            isinstance(default, list)
            and key not in ("listeners", "http", "users", "acl", "links", "bridges")
            and (not isinstance(value, list) or not all(isinstance(v, str) for v in value))
        ):
            raise ConfigError(f"{path}: expected a list of strings, got {value!r}")
        kwargs[key] = value
    return cls(**kwargs)


# The arrays of tables ([[listeners]], ...) and the dataclass of their entries.
ENTRY_TABLES: dict[str, type[Any]] = {
    "listeners": ListenerConfig,
    "http": HttpConfig,
    "links": LinkConfig,
    "bridges": BridgeConfig,
}


def config_from_mapping(data: Mapping[str, Any]) -> BrokerConfig:
    tables = {
        "store": StoreConfig,
        "journal": JournalConfig,
        "limits": LimitsConfig,
        "mqtt5": Mqtt5Config,
        "sys": SysConfig,
        "ha": HaConfig,
        "sparkplug": SparkplugConfig,
    }
    top: dict[str, Any] = {}
    for key, value in data.items():
        if key in tables:
            top[key] = _build(tables[key], value, key)
        elif key in ("users", "acl"):
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise ConfigError(f"{key}: expected an array of tables ([[{key}]])")
            top[key] = value
        elif key == "allow_anonymous":
            if not isinstance(value, bool):
                raise ConfigError(f"allow_anonymous: expected true or false, got {value!r}")
            top[key] = value
        elif key in ENTRY_TABLES:
            if not isinstance(value, list):
                raise ConfigError(f"{key}: expected an array of tables ([[{key}]])")
            kind = ENTRY_TABLES[key]
            top[key] = [_build(kind, item, f"{key}[{index}]") for index, item in enumerate(value)]
        else:
            top[key] = value
    config: BrokerConfig = _build(BrokerConfig, top, "")
    config.validate()
    return config


def load_config(path: str | Path | None) -> BrokerConfig:
    """Read a TOML file (None: all defaults)."""
    if path is None:
        return BrokerConfig()
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {path}") from None
    except OSError as error:  # a directory, no permission, ...
        raise ConfigError(f"cannot read configuration file {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML: the file is not UTF-8") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    return config_from_mapping(data)
