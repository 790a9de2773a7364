"""Client settings: one frozen dataclass per role, bound from RocketMQ's camelCase names
(``namesrvAddr``, ``retryTimesWhenSendFailed``, ...) with :func:`lakemq.common.config.bind`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum

from lakemq.client.message_id import local_ip

__all__ = ["ClientConfig", "ConsumeFromWhere", "ConsumerConfig", "MessageModel", "ProducerConfig"]


class MessageModel(Enum):
    BROADCASTING = "BROADCASTING"  # every consumer of the group gets every message
    CLUSTERING = "CLUSTERING"  # each message goes to one consumer of the group


class ConsumeFromWhere(Enum):
    """Where a group with no stored offset starts on a queue."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


def _default_namesrv() -> str:
    return os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876")


@dataclass(frozen=True, slots=True)
class ClientConfig:
    namesrv_addr: str = field(default_factory=_default_namesrv)  # "host:port;host:port"
    client_ip: str = field(default_factory=local_ip)
    # RocketMQ replaces DEFAULT by the pid, so two processes on a host get two client ids.
    instance_name: str = "DEFAULT"
    poll_name_server_interval: int = 30000
    heartbeat_broker_interval: int = 30000
    persist_consumer_offset_interval: int = 5000
    rebalance_interval: int = 20000
    mq_client_api_timeout: int = 3000
    # ACL 1.0 credentials (RocketMQ SessionCredentials); with an access key every request is
    # signed (lakemq.client.acl). Empty: requests go unsigned, as to a broker without ACL.
    access_key: str = ""
    secret_key: str = field(default="", repr=False)

    @property
    def client_id(self) -> str:
        instance = str(os.getpid()) if self.instance_name == "DEFAULT" else self.instance_name
        return f"{self.client_ip}@{instance}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    producer_group: str = "DEFAULT_PRODUCER"
    send_msg_timeout: int = 3000
    compress_msg_body_over_howmuch: int = 4096
    compress_level: int = 5
    retry_times_when_send_failed: int = 2
    retry_times_when_send_async_failed: int = 0
    retry_another_broker_when_not_store_ok: bool = False
    max_message_size: int = 4 * 1024 * 1024
    send_latency_fault_enable: bool = False
    create_topic_key: str = "TBW102"
    default_topic_queue_nums: int = 4


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    consumer_group: str = "DEFAULT_CONSUMER"
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    # yyyyMMddHHmmss (local time) for CONSUME_FROM_TIMESTAMP; empty = half an hour ago.
    consume_timestamp: str = ""
    allocate_strategy: str = "AVG"
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100  # MiB
    consume_concurrently_max_span: int = 2000
    pull_batch_size: int = 32
    pull_interval: int = 0
    consume_message_batch_max_size: int = 1
    consume_thread_max: int = 20
    max_reconsume_times: int = 16
    suspend_current_queue_time_millis: int = 1000
    broker_suspend_max_time_millis: int = 15000
    consumer_timeout_millis_when_suspend: int = 30000
    pull_time_delay_millis_when_exception: int = 3000
    pull_time_delay_millis_when_flow_control: int = 50
    offsets_dir: str = ""  # broadcasting offset files; empty = ~/.lakemq_offsets
