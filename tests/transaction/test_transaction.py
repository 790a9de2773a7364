"""Transactional messages end to end: real NameServer and broker processes, lakemq's client.

The broker checks pending transactions every 0.5 s once they are 1 s old, so check-backs
happen within seconds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.client import Message
from lakemq.client.config import ClientConfig
from lakemq.client.sync import SyncTransactionProducer
from lakemq.client.transaction_producer import LocalTransactionState
from tests.cluster import Cluster, start_cluster
from tests.transaction.helpers import (
    Receiver,
    ScriptedListener,
    queue_max_offset,
    sys_trans_offset,
    wait_until,
)

TX_CONF = {"transactionCheckInterval": "500", "transactionTimeOut": "1000", "transactionCheckMax": "15"}
HALF, OP = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with start_cluster(tmp_path, broker_conf=TX_CONF) as running:
        yield running


def _producer(ns: str, group: str, listener: ScriptedListener) -> SyncTransactionProducer:
    client = ClientConfig(namesrv_addr=ns, instance_name=group, heartbeat_broker_interval=1000)
    return SyncTransactionProducer(group, listener, client_config=client)


def test_commit_rollback_and_check_back(cluster: Cluster) -> None:
    ns, topic = cluster.namesrv_addr, "TxTopic"
    listener = ScriptedListener()
    receiver = Receiver(ns, topic, "TxConsumer")
    with _producer(ns, "TxProducer", listener) as producer:
        producer.create_topic(topic, 2)
        receiver.consumer.start()
        try:
            results = {}
            for body in (b"c0", b"r0", b"u0", b"c1", b"r1", b"u1", b"c2"):
                result = producer.send_message_in_transaction(Message(topic, body), arg=body)
                results[body] = result
            assert results[b"c0"].local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
            assert results[b"r0"].local_transaction_state is LocalTransactionState.ROLLBACK_MESSAGE
            assert results[b"u0"].local_transaction_state is LocalTransactionState.UNKNOW
            assert {r.message_queue.topic for r in results.values()} == {topic}
            # As RocketMQ's Java client: the transaction id is the unique key.
            assert all(r.transaction_id == r.msg_id and r.transaction_id for r in results.values())
            assert listener.executed == list(results)
            receiver.wait_for({b"c0", b"c1", b"c2"}, timeout=15)
            # The unknown ones get checked back (more than once), and stay invisible meanwhile.
            wait_until(
                lambda: min(listener.checks()[b] for b in (b"u0", b"u1")) >= 2, 10, "two check-backs each"
            )
            assert set(receiver.seen()) == {b"c0", b"c1", b"c2"}
            assert not any(body.startswith((b"c", b"r")) for body in listener.checks())
            listener.release.set()
            receiver.wait_for({b"u0", b"u1"}, timeout=10)
            time.sleep(2.0)  # a second delivery or a late rollback would show by now
        finally:
            receiver.consumer.shutdown()
    assert receiver.seen() == {b"c0": 1, b"c1": 1, b"c2": 1, b"u0": 1, b"u1": 1}
    broker = cluster.broker_addr()
    # Every half message copy is walked past, and 7 transactions left 7 Op messages.
    assert sys_trans_offset(broker, HALF) == queue_max_offset(broker, HALF)
    assert queue_max_offset(broker, OP) == 7
