"""Shared parts of the transaction tests: a recording consumer, a scripted listener, and
direct reads of the broker's transaction queues."""

from __future__ import annotations

import threading
import time
from collections import Counter

from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    MessageExt,
    SyncPushConsumer,
)
from lakemq.client.config import ClientConfig
from lakemq.client.transaction_producer import LocalTransactionState
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.remoting import RemotingCommand, SyncRemotingClient

__all__ = ["Receiver", "ScriptedListener", "queue_max_offset", "sys_trans_offset", "wait_until"]


def wait_until(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what}")


class Receiver:
    """A push consumer counting deliveries per body."""

    def __init__(self, ns: str, topic: str, group: str) -> None:
        self.counts: Counter[bytes] = Counter()
        self.lock = threading.Lock()
        config = ConsumerConfig(
            consumer_group=group, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        client = ClientConfig(
            namesrv_addr=ns, instance_name=group, rebalance_interval=1000, heartbeat_broker_interval=1000
        )
        self.consumer = SyncPushConsumer(group, config=config, client_config=client)
        self.consumer.subscribe(topic, "*")
        self.consumer.register_message_listener_concurrently(self._listener)

    def _listener(self, msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
        with self.lock:
            for m in msgs:
                self.counts[m.body] += 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def seen(self) -> Counter[bytes]:
        with self.lock:
            return Counter(self.counts)

    def wait_for(self, bodies: set[bytes], timeout: float) -> None:
        wait_until(
            lambda: bodies <= set(self.seen()), timeout, f"delivery of {sorted(bodies - set(self.seen()))}"
        )


class ScriptedListener:
    """Decides by body prefix: c = commit, r = rollback, u = unknown until ``release`` is
    set, then commit. Records every call."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.executed: list[bytes] = []
        self.checked: Counter[bytes] = Counter()
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg, arg):  # type: ignore[no-untyped-def]
        with self.lock:
            self.executed.append(msg.body)
        return {b"c": LocalTransactionState.COMMIT_MESSAGE, b"r": LocalTransactionState.ROLLBACK_MESSAGE}.get(
            msg.body[:1], LocalTransactionState.UNKNOW
        )

    def check_local_transaction(self, msg):  # type: ignore[no-untyped-def]
        with self.lock:
            self.checked[msg.body] += 1
        if msg.body.startswith(b"u") and self.release.is_set():
            return LocalTransactionState.COMMIT_MESSAGE
        if msg.body.startswith(b"c"):
            return LocalTransactionState.COMMIT_MESSAGE
        if msg.body.startswith(b"r"):
            return LocalTransactionState.ROLLBACK_MESSAGE
        return LocalTransactionState.UNKNOW

    def checks(self) -> Counter[bytes]:
        with self.lock:
            return Counter(self.checked)


def _ask(broker_addr: str, code: int, fields: dict[str, str]) -> RemotingCommand:
    with SyncRemotingClient() as client:
        return client.invoke(broker_addr, RemotingCommand.request(code, fields), 5.0)


def queue_max_offset(broker_addr: str, topic: str, queue_id: int = 0) -> int:
    response = _ask(broker_addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    assert response.code == ResponseCode.SUCCESS, response.remark
    return int(response.ext_fields["offset"])


def sys_trans_offset(broker_addr: str, topic: str) -> int:
    """CID_RMQ_SYS_TRANS's committed offset on ``topic`` queue 0 (-1 if none)."""
    response = _ask(
        broker_addr,
        RequestCode.QUERY_CONSUMER_OFFSET,
        {"consumerGroup": "CID_RMQ_SYS_TRANS", "topic": topic, "queueId": "0"},
    )
    if response.code != ResponseCode.SUCCESS:
        return -1
    return int(response.ext_fields["offset"])
