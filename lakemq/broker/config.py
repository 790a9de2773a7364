"""The broker's configuration (RocketMQ's BrokerConfig, the keys this broker reads).

Bound from broker.conf with :func:`lakemq.common.config.bind` next to the store's
:class:`~lakemq.store.config.StoreConfig`; every camelCase key is RocketMQ's own
(``brokerName``, ``namesrvAddr``, ``autoCreateTopicEnable`` ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lakemq.common.constants import MASTER_ID, PermName
from lakemq.common.validation import is_valid_name
from lakemq.errors import ConfigError
from lakemq.remoting.server import DEFAULT_BACKLOG

__all__ = ["KEY_ALIASES", "BrokerConfig", "apply_key_aliases"]


# RocketMQ keys that the camelCase rule does not produce from a field name.
KEY_ALIASES = {"brokerIP1": "brokerIp1", "brokerIP2": "brokerIp2",
               "osPageCacheBusyTimeOutMills": "osPageCacheBusyTimeoutMills"}


def apply_key_aliases(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` with RocketMQ's spellings (``brokerIP1``) renamed to the bound keys."""
    return {KEY_ALIASES.get(key, key): value for key, value in props.items()}


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = MASTER_ID  # 0 is the master, > 0 a slave of the same brokerName (brokerRole)
    broker_ip1: str = "127.0.0.1"  # the address registered with the NameServers
    broker_ip2: str = ""  # the host of the HA listener (haServerAddr); empty: brokerIP1
    listen_port: int = 10911  # 0 binds an ephemeral port (tests); the bound one is registered
    namesrv_addr: tuple[str, ...] = ("127.0.0.1:9876",)  # ``;``-separated in broker.conf
    # Connections the kernel queues before the server accepts them (RocketMQ's default).
    server_socket_backlog: int = DEFAULT_BACKLOG
    broker_permission: int = PermName.PERM_READ | PermName.PERM_WRITE
    # Queues of the TBW102 template (RocketMQ's 8); an auto-created topic gets
    # min(the producer's defaultTopicQueueNums, this).
    default_topic_queue_nums: int = 8
    auto_create_topic_enable: bool = True
    cluster_topic_enable: bool = True  # a topic named after the cluster, for admin tools
    broker_topic_enable: bool = True  # a topic named after the broker
    auto_create_subscription_group: bool = True
    # Business pools per request family (RocketMQ's sendMessageThreadPoolNums and the like).
    send_message_thread_pool_nums: int = 4
    pull_message_thread_pool_nums: int = 8
    admin_broker_thread_pool_nums: int = 4
    client_manage_thread_pool_nums: int = 4
    consumer_manage_thread_pool_nums: int = 4
    query_message_thread_pool_nums: int = 4
    send_thread_pool_queue_capacity: int = 10_000
    pull_thread_pool_queue_capacity: int = 100_000
    client_manager_thread_pool_queue_capacity: int = 100_000
    consumer_manager_thread_pool_queue_capacity: int = 100_000
    admin_broker_thread_pool_queue_capacity: int = 10_000
    # Fast failure: a send that waited longer than this in the send queue gets SYSTEM_BUSY.
    broker_fast_failure_enable: bool = True
    wait_time_mills_in_send_queue: int = 200
    wait_time_mills_in_pull_queue: int = 5_000
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1_000  # hold time of a suspended pull without long polling
    # lakemq: the longest a pull is held, whatever its suspendTimeoutMillis asks (RocketMQ's
    # clients ask 15 s (push) or 20 s (pull) and wait 30 s for the answer).
    max_suspend_timeout_millis: int = 20_000
    # How often held pulls are re-checked against the queue's max offset (a safety net: the
    # store's arrival notification normally wakes them at once).
    pull_hold_check_interval_mills: int = 5_000
    notify_consumer_ids_changed_enable: bool = True
    flush_consumer_offset_interval: int = 5_000
    register_name_server_period: int = 30_000
    register_broker_timeout_mills: int = 6_000
    # A client silent for this long is dropped (RocketMQ's ClientChannelInfo expiry).
    channel_expired_timeout: int = 120_000
    client_housekeeping_interval: int = 10_000
    rebalance_lock_max_live_time: int = 60_000  # an orderly consumer's queue lock lives this long
    # SQL92 property filters for consumers (RocketMQ's enablePropertyFilter, false there by
    # default; lakemq turns it on: the filter is compiled once and pre-checked on raw bytes).
    enable_property_filter: bool = True
    # ACL 1.0 (RocketMQ's aclEnable, off by default): every request must be signed by an
    # account of aclFile (plain_acl.yml format) and have the permissions it needs.
    acl_enable: bool = False
    acl_file: str = "conf/plain_acl.yml"  # relative paths are taken from the working directory
    # Transactional messages: a half message left pending this long (ms) is checked back with
    # a producer of its group every transactionCheckInterval ms, at most transactionCheckMax
    # times, then rolled back.
    transaction_time_out: int = 6_000
    transaction_check_max: int = 15
    transaction_check_interval: int = 60_000
    end_transaction_thread_pool_nums: int = 4
    # Pulls from consumers may be sent to a slave: a master suggests the group's
    # whichBrokerWhenConsumeSlowly when a pull reads far behind (accessMessageInMemoryMaxRatio
    # of RAM), and a slave keeps its readers. Off: every pull is pointed back to the master.
    slave_read_enable: bool = False
    # request() / reply: a reply is pushed to the requesting client and also stored in the
    # {cluster}_REPLY_TOPIC (RocketMQ's storeReplyMessageEnable, true there too).
    store_reply_message_enable: bool = True
    # Prometheus metrics over HTTP on brokerIP1 (GET /metrics): -1 = listenPort + 2 (a free
    # port when listenPort is 0), 0 = a free port, -2 = off; the URL is printed at boot.
    metrics_port: int = -1
    # RocketMQ's VIP channel: the same requests on a second port, which RocketMQ brokers call
    # each other on (a RocketMQ slave syncs its master's topics and offsets there): -1 =
    # listenPort - 2 (none when listenPort is 0), -2 = off, else that port.
    fast_listen_port: int = -1
    # The lake this broker's CommitLog is tiered to (a path or s3://bucket/prefix, as given to
    # `lakemq tier`); empty = none. The metrics then report the tiering lag.
    lake_uri: str = ""
    # RocketMQ 5's gRPC front door (apache.rocketmq.v2, for the 5.x clients; lakemq.broker.grpc)
    # on brokerIP1: 0 = off (RocketMQ's proxy listens on 8081).
    grpc_listen_port: int = 0
    # TLS on that port (RocketMQ proxy's tlsMode): disabled, permissive (plaintext and TLS on
    # the one port, the proxy's default), enforcing. The certificate and key (PEM): both, or
    # neither for a self-signed pair made at each start.
    grpc_tls_mode: str = "permissive"
    grpc_tls_cert_path: str = ""
    grpc_tls_key_path: str = ""
    # Push consumers' deliveries (ReceiveMessage with auto_renew): hidden for the slice, renewed
    # that long again when less than ``ahead`` is left, for at most ``max`` in all (RocketMQ
    # proxy's renewSliceTimeMillis, renewAheadTimeMillis, renewMaxTimeMillis).
    grpc_renew_slice_millis: int = 60_000
    grpc_renew_ahead_millis: int = 10_000
    grpc_renew_max_millis: int = 3 * 3600_000

    def __post_init__(self) -> None:
        if not is_valid_name(self.broker_name) or not is_valid_name(self.broker_cluster_name):
            raise ConfigError(
                f"brokerName {self.broker_name!r} / brokerClusterName {self.broker_cluster_name!r}: "
                "use letters, digits, '%', '|', '_' and '-'"
            )
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort must be 0..65535, got {self.listen_port}")
        if not 0 <= self.grpc_listen_port <= 65535:
            raise ConfigError(f"grpcListenPort must be 0..65535, got {self.grpc_listen_port}")
        if self.grpc_tls_mode not in ("disabled", "permissive", "enforcing"):
            raise ConfigError(f"grpcTlsMode must be disabled, permissive or enforcing, got {self.grpc_tls_mode!r}")
        if not 0 < self.grpc_renew_ahead_millis < self.grpc_renew_slice_millis <= self.grpc_renew_max_millis:
            raise ConfigError("grpcRenewAheadMillis < grpcRenewSliceMillis <= grpcRenewMaxMillis must hold, all "
                              f"positive; got {self.grpc_renew_ahead_millis}, {self.grpc_renew_slice_millis}, "
                              f"{self.grpc_renew_max_millis}")
        if not -2 <= self.metrics_port <= 65535:
            raise ConfigError(f"metricsPort must be -2..65535, got {self.metrics_port}")
        if not -2 <= self.fast_listen_port <= 65535:
            raise ConfigError(f"fastListenPort must be -2..65535, got {self.fast_listen_port}")
        if self.broker_id < 0:
            raise ConfigError(f"brokerId must be >= 0, got {self.broker_id}")
        for addr in self.namesrv_addr:
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"namesrvAddr entry {addr!r} is not host:port")
        positive = (
            "default_topic_queue_nums",
            "send_message_thread_pool_nums",
            "pull_message_thread_pool_nums",
            "admin_broker_thread_pool_nums",
            "client_manage_thread_pool_nums",
            "consumer_manage_thread_pool_nums",
            "query_message_thread_pool_nums",
            "send_thread_pool_queue_capacity",
            "pull_thread_pool_queue_capacity",
            "client_manager_thread_pool_queue_capacity",
            "consumer_manager_thread_pool_queue_capacity",
            "admin_broker_thread_pool_queue_capacity",
            "wait_time_mills_in_send_queue",
            "wait_time_mills_in_pull_queue",
            "short_polling_time_mills",
            "max_suspend_timeout_millis",
            "pull_hold_check_interval_mills",
            "flush_consumer_offset_interval",
            "register_name_server_period",
            "register_broker_timeout_mills",
            "channel_expired_timeout",
            "client_housekeeping_interval",
            "rebalance_lock_max_live_time",
            "transaction_check_max",
            "transaction_check_interval",
            "end_transaction_thread_pool_nums",
            "server_socket_backlog",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.transaction_time_out < 0:
            raise ConfigError(f"transactionTimeOut must be >= 0, got {self.transaction_time_out}")
        if self.acl_enable and not self.acl_file.strip():
            raise ConfigError("aclEnable=true needs aclFile (a plain_acl.yml)")
        if self.broker_permission & ~(PermName.PERM_READ | PermName.PERM_WRITE):
            raise ConfigError(
                f"brokerPermission may only hold read (4) and write (2), got {self.broker_permission}"
            )

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def fast_port(self) -> int | None:
        """The VIP channel's port (fastListenPort), None when there is none."""
        if self.fast_listen_port == -2 or (self.fast_listen_port == -1 and self.listen_port < 3):
            return None
        return self.listen_port - 2 if self.fast_listen_port == -1 else self.fast_listen_port

    @property
    def ha_host(self) -> str:
        return self.broker_ip2 or self.broker_ip1
