"""Transactions whose producer goes away, ends that are wrong or repeated, and broker restarts
(SIGTERM and kill -9) with transactions pending: real NameServer and broker processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lakemq.client import Message, MessageExt
from lakemq.client.config import ClientConfig
from lakemq.client.sync import SyncTransactionProducer
from lakemq.client.transaction_producer import LocalTransactionState
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message import MessageSysFlag
from lakemq.common.record import decode_message_id
from lakemq.remoting import RemotingCommand, SyncRemotingClient
from lakemq.remoting.headers import EndTransactionRequestHeader, encode_header
from tests.cluster import start_cluster
from tests.transaction.helpers import (
    Receiver,
    ScriptedListener,
    queue_max_offset,
    sys_trans_offset,
    wait_until,
)

HALF, OP = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"
FAST = {"transactionCheckInterval": "500", "transactionTimeOut": "1000"}
ROOT = Path(__file__).resolve().parents[2]

# A producer process that leaves three transactions unknown and dies without a goodbye.
_DOOMED_PRODUCER = textwrap.dedent("""
    import os, sys
    from lakemq.client import Message, MessageExt
    from lakemq.client.config import ClientConfig
    from lakemq.client.sync import SyncTransactionProducer
    from lakemq.client.transaction_producer import LocalTransactionState

    class Unknown:
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.UNKNOW
        def check_local_transaction(self, msg):
            return LocalTransactionState.UNKNOW

    ns, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    producer = SyncTransactionProducer(group, Unknown(), client_config=ClientConfig(namesrv_addr=ns))
    producer.start()
    producer.create_topic(topic, 2)
    for i in range(3):
        producer.send_message_in_transaction(Message(topic, b"gone%d" % i))
    print("sent", flush=True)
    os._exit(0)
""")


def _producer(ns: str, group: str, listener: ScriptedListener) -> SyncTransactionProducer:
    client = ClientConfig(namesrv_addr=ns, instance_name=group, heartbeat_broker_interval=1000)
    return SyncTransactionProducer(group, listener, client_config=client)


def _topic_max_offsets(broker: str, topic: str, queues: int) -> list[int]:
    with SyncRemotingClient() as client:
        offsets = []
        for q in range(queues):
            r = client.invoke(
                broker,
                RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}),
                5.0,
            )
            offsets.append(int(r.ext_fields.get("offset", "0")) if r.code == ResponseCode.SUCCESS else 0)
        return offsets


def test_producer_gone_rolled_back_after_max_checks(tmp_path: Path) -> None:
    with start_cluster(tmp_path, broker_conf={**FAST, "transactionCheckMax": "2"}) as cluster:
        ns, topic, broker = cluster.namesrv_addr, "TxGone", cluster.broker_addr()
        done = subprocess.run(
            [sys.executable, "-c", _DOOMED_PRODUCER, ns, topic, "GoneProducer"],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and "sent" in done.stdout, done.stderr
        # Stored only as half messages: the real topic's queues hold nothing.
        assert _topic_max_offsets(broker, topic, 2) == [0, 0]
        # Two counted checks each (no producer online to answer), then rolled back: one Op
        # message per transaction and the half queue walked to its end.
        wait_until(
            lambda: (
                queue_max_offset(broker, OP) == 3
                and sys_trans_offset(broker, HALF) == queue_max_offset(broker, HALF)
            ),
            20,
            "rollback of all three",
        )
        # 3 originals + 2 counted copies each.
        assert queue_max_offset(broker, HALF) == 9
        # A producer of that group coming back would commit if asked: it is never asked.
        listener = ScriptedListener()
        listener.release.set()
        receiver = Receiver(ns, topic, "GoneConsumer")
        with _producer(ns, "GoneProducer", listener) as producer:
            producer.send_message_in_transaction(Message(topic, b"c-after"))
            receiver.consumer.start()
            try:
                receiver.wait_for({b"c-after"}, timeout=15)
                time.sleep(2.0)
            finally:
                receiver.consumer.shutdown()
        assert receiver.seen() == {b"c-after": 1}
        assert not listener.checks()
        assert "rolled back (no answer after 2 checks)" in cluster.brokers["broker-a"].logs(tail=400)


class _CommitOnCheck:
    def __init__(self) -> None:
        self.checked: list[bytes] = []

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        raise AssertionError("this producer sends nothing")

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checked.append(msg.body)
        return LocalTransactionState.COMMIT_MESSAGE


def test_restarted_producer_answers_check_backs_without_sending(tmp_path: Path) -> None:
    with start_cluster(tmp_path, broker_conf={**FAST, "transactionCheckMax": "40"}) as cluster:
        ns, topic, broker = cluster.namesrv_addr, "TxTakeover", cluster.broker_addr()
        done = subprocess.run(
            [sys.executable, "-c", _DOOMED_PRODUCER, ns, topic, "TakeoverProducer"],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and "sent" in done.stdout, done.stderr
        # A new process of the group, which only starts: its heartbeat at start lets the
        # broker check back with it, and it commits what the dead one left unknown.
        listener = _CommitOnCheck()
        client = ClientConfig(namesrv_addr=ns, instance_name="takeover")
        with SyncTransactionProducer("TakeoverProducer", listener, client_config=client):
            wait_until(lambda: queue_max_offset(broker, OP) == 3, 20, "three commits from check-backs")
        assert sorted(set(listener.checked)) == [b"gone0", b"gone1", b"gone2"]
        receiver = Receiver(ns, topic, "TakeoverConsumer")
        receiver.consumer.start()
        try:
            receiver.wait_for({b"gone0", b"gone1", b"gone2"}, timeout=15)
            time.sleep(1.0)
        finally:
            receiver.consumer.shutdown()
        assert receiver.seen() == {b"gone0": 1, b"gone1": 1, b"gone2": 1}
        assert sum(_topic_max_offsets(broker, topic, 2)) == 3


def _end(client: SyncRemotingClient, broker: str, header: EndTransactionRequestHeader) -> RemotingCommand:
    return client.invoke(
        broker, RemotingCommand.request(RequestCode.END_TRANSACTION, encode_header(header)), 5.0
    )


def test_wrong_and_repeated_ends(tmp_path: Path) -> None:
    """END_TRANSACTION answered (not oneway) to see the broker's verdicts."""
    with start_cluster(tmp_path, broker_conf={"transactionCheckInterval": "60000"}) as cluster:
        ns, topic, broker = cluster.namesrv_addr, "TxEnds", cluster.broker_addr()
        listener = ScriptedListener()  # "u" bodies stay unknown: the test ends them itself
        receiver = Receiver(ns, topic, "EndsConsumer")
        with _producer(ns, "EndsProducer", listener) as producer, SyncRemotingClient() as client:
            producer.create_topic(topic, 1)
            sent = producer.send_message_in_transaction(Message(topic, b"u-ended-by-hand"))
            _, cl_offset = decode_message_id(sent.offset_msg_id)

            def end(
                group: str, state: int, table_offset: int = sent.queue_offset, offset: int = cl_offset
            ) -> RemotingCommand:
                return _end(
                    client,
                    broker,
                    EndTransactionRequestHeader(
                        group, table_offset, offset, state, sent.msg_id, transaction_id=sent.msg_id
                    ),
                )

            commit = MessageSysFlag.TRANSACTION_COMMIT_TYPE
            for bad, remark in (
                (end("OtherGroup", commit), "producer group wrong"),
                (end("EndsProducer", commit, table_offset=sent.queue_offset + 5), "offset wrong"),
                (end("EndsProducer", commit, offset=cl_offset + 1), "Find prepared"),
                (end("EndsProducer", 5), "not 0, 8 or 12"),
            ):
                assert bad.code == ResponseCode.SYSTEM_ERROR and remark in (bad.remark or ""), bad
            assert end("EndsProducer", MessageSysFlag.TRANSACTION_NOT_TYPE).code == ResponseCode.SUCCESS
            first = end("EndsProducer", commit)
            assert first.code == ResponseCode.SUCCESS and first.remark is None
            again = end("EndsProducer", commit)
            rollback_late = end("EndsProducer", MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
            assert again.code == rollback_late.code == ResponseCode.SUCCESS
            assert again.remark == rollback_late.remark == "transaction already resolved"
            receiver.consumer.start()
            try:
                receiver.wait_for({b"u-ended-by-hand"}, timeout=15)
                time.sleep(1.5)
            finally:
                receiver.consumer.shutdown()
        assert receiver.seen() == {b"u-ended-by-hand": 1}
        assert _topic_max_offsets(broker, topic, 1) == [1]
        assert queue_max_offset(broker, OP) == 1


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_pending_transactions_survive_a_broker_restart(tmp_path: Path, how: str) -> None:
    with start_cluster(tmp_path, broker_conf=FAST) as cluster:
        ns, topic, broker = cluster.namesrv_addr, f"TxRestart{how}", cluster.broker_addr()
        listener = ScriptedListener()
        with _producer(ns, "RestartProducer", listener) as producer:
            producer.create_topic(topic, 2)
            for body in (b"c0", b"u0", b"c1", b"u1", b"r0", b"c2", b"u2"):
                producer.send_message_in_transaction(Message(topic, body))
            # Let the check service put back copies of the pending ones before the restart.
            wait_until(
                lambda: min(listener.checks()[b] for b in (b"u0", b"u1", b"u2")) >= 2,
                15,
                "two check-backs before the restart",
            )
            if how == "sigterm":
                cluster.restart_broker()
            else:
                cluster.kill_broker()
                cluster.start_broker()
            checks_before = listener.checks()
            listener.release.set()
            # The producer heartbeats the restarted broker; its checks now commit.
            wait_until(lambda: queue_max_offset(broker, OP) >= 7, 30, "all seven resolved after the restart")
            assert sum(listener.checks().values()) > sum(checks_before.values())
        receiver = Receiver(ns, topic, f"RestartConsumer{how}")
        receiver.consumer.start()
        try:
            receiver.wait_for({b"c0", b"c1", b"c2", b"u0", b"u1", b"u2"}, timeout=20)
            time.sleep(2.0)
        finally:
            receiver.consumer.shutdown()
        assert receiver.seen() == {b: 1 for b in (b"c0", b"c1", b"c2", b"u0", b"u1", b"u2")}
        assert sum(_topic_max_offsets(broker, topic, 2)) == 6
