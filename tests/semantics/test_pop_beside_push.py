"""A 4.x push consumer (lakemq's client) and a POP consumer (RocketMQ 5's remoting codes) of
different groups read the same topic side by side: each group gets every message once, and
neither's progress moves the other's."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    MessageExt,
    SyncProducer,
    SyncPushConsumer,
)
from lakemq.client.config import ClientConfig
from lakemq.common.codes import ResponseCode
from lakemq.remoting import SyncRemotingClient
from tests.broker.pop_wire import ack_request, pop_request, popped
from tests.cluster import start_cluster

TOPIC, N = "SideBySide", 40


def test_push_and_pop_groups_each_get_every_message(tmp_path: Path) -> None:
    with start_cluster(tmp_path) as cluster, SyncRemotingClient() as client:
        ns, addr = cluster.namesrv_addr, cluster.broker_addr()
        bodies = {f"s{i}".encode() for i in range(N)}
        pushed: list[bytes] = []
        lock = threading.Lock()

        def listener(msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
            with lock:
                pushed.extend(m.body for m in msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        config = ConsumerConfig(consumer_group="Push4x", consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer = SyncPushConsumer("Push4x", config=config,
                                    client_config=ClientConfig(namesrv_addr=ns, instance_name="side"))
        consumer.subscribe(TOPIC, "*")
        consumer.register_message_listener_concurrently(listener)
        with SyncProducer("SideProducer", namesrv_addr=ns) as producer:
            producer.create_topic(TOPIC, 4)
            for body in sorted(bodies):
                producer.send(Message(TOPIC, body))
        consumer.start()
        try:
            popped_bodies: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(popped_bodies) < N:
                assert time.monotonic() < deadline, f"POP group got {len(popped_bodies)} of {N}"
                for m in popped(client.invoke(addr, pop_request("Pop5x", TOPIC, poll_ms=2000), 30), "broker-a"):
                    popped_bodies.append(m.body)
                    assert client.invoke(addr, ack_request("Pop5x", TOPIC, m), 10).code == ResponseCode.SUCCESS
            while True:
                with lock:
                    if len(pushed) >= N:
                        break
                assert time.monotonic() < deadline, f"push group got {len(pushed)} of {N}"
                time.sleep(0.1)
            assert popped(client.invoke(addr, pop_request("Pop5x", TOPIC, poll_ms=1500), 30), "broker-a") == []
        finally:
            consumer.shutdown()
        assert sorted(popped_bodies) == sorted(bodies)
        with lock:
            assert sorted(pushed) == sorted(bodies)
