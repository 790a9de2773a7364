"""A master and its slave as real processes behind a NameServer: the slave learns its master
from the NameServer, replicates its CommitLog byte for byte and dispatches it, syncs the
master's metadata, refuses sends; consumers read from it while the master is down and
producers move to another broker group."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    MessageExt,
    Producer,
    ProducerConfig,
    PushConsumer,
    SendStatus,
)
from lakemq.client.admin import Admin
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.remoting import SyncRemotingClient, fastjson
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    SendMessageRequestHeader,
    decode_header,
    encode_header,
)
from tests.client.client_helpers import client_config, unique
from tests.cluster import Cluster, start_cluster
from tests.console.console_env import start_console, stop_console
from tests.ha.ha_helpers import (
    add_pair,
    assert_same_commit_logs,
    commit_log_dir,
    ha_errors,
    runtime,
    slave_name,
    wait_caught_up,
    wait_for,
    wait_topic_on_slave,
)

FIRST = ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Cluster]:
    with start_cluster(tmp_path, brokers=()) as cluster:
        add_pair(cluster)
        yield cluster


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


def _all_of(client: SyncRemotingClient, addr: str, code: int) -> dict[str, object]:
    response = client.invoke(addr, RemotingCommand.request(code), 5.0)
    assert response.code == ResponseCode.SUCCESS, response.remark
    data = fastjson.loads(response.body)
    assert isinstance(data, dict)
    return data


async def test_slave_replicates_dispatches_and_syncs(pair: Cluster) -> None:
    ns, topic, group = pair.namesrv_addr, unique("Replicated"), unique("cg")
    master, slave = pair.broker_addr("broker-a"), pair.broker_addr(slave_name("broker-a"))
    async with Admin(ns) as admin:
        info = await admin.cluster_info()
        assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": master, "1": slave}
        await admin.create_topic(topic, queue_nums=4)
    slave_info = await runtime(slave, ns)
    assert slave_info["brokerRole"] == "SLAVE" and slave_info["brokerId"] == "1"
    assert slave_info["haMasterAddress"] == (await runtime(master, ns))["haServerAddr"]  # from the NameServer

    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        sent = [await producer.send(Message(topic, b"m-%d" % i * (1 + i % 50))) for i in range(300)]
    assert all(r.send_status is SendStatus.SEND_OK for r in sent)
    await wait_caught_up(pair)
    master_info = await runtime(master, ns)
    assert master_info["haConnectedSlaves"] == "1" and master_info["slaveFallBehindBytes"] == "0"

    # Consume on the master, so it has offsets for the slave to copy.
    got: list[MessageExt] = []
    consumer = PushConsumer(group, config=FIRST, client_config=client_config(ns, unique("c")))
    consumer.subscribe(topic, "*")

    async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    await consumer.start()
    try:
        await wait_for(lambda: len(got) >= 300, what="consumption from the master")
        with SyncRemotingClient() as client:
            def synced() -> bool:
                master_offsets = _all_of(client, master, RequestCode.GET_ALL_CONSUMER_OFFSET)["offsetTable"]
                slave_offsets = _all_of(client, slave, RequestCode.GET_ALL_CONSUMER_OFFSET)["offsetTable"]
                key = f"{topic}@{group}"
                return key in slave_offsets and slave_offsets[key] == master_offsets[key]  # type: ignore[index,operator]

            await wait_for(synced, timeout=30, what="consumer offsets synced to the slave")
            topics = _all_of(client, slave, RequestCode.GET_ALL_TOPIC_CONFIG)
            assert topic in topics["topicConfigTable"]  # type: ignore[operator]
            groups = _all_of(client, slave, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            assert group in groups["subscriptionGroupTable"]  # type: ignore[operator]
            # Offsets come within a second, topic configs with the next full sync (10 s).
            await wait_for(lambda: _all_of(client, slave, RequestCode.GET_ALL_TOPIC_CONFIG)["dataVersion"]
                           == _all_of(client, master, RequestCode.GET_ALL_TOPIC_CONFIG)["dataVersion"],
                           timeout=30, what="the master's topic configs on the slave")

            # A slave refuses sends, before creating anything.
            header = SendMessageRequestHeader(producer_group="pg", topic=unique("NotHere"), default_topic="TBW102",
                                              default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                              born_timestamp=0, flag=0)
            refused = client.invoke(slave, RemotingCommand.request(
                RequestCode.SEND_MESSAGE, encode_header(header), b"x"), 5.0)
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE and "SLAVE" in (refused.remark or "")
    finally:
        await consumer.shutdown()
    pair.stop_broker("broker-a")
    pair.stop_broker(slave_name("broker-a"))
    assert_same_commit_logs(commit_log_dir(pair, "broker-a"), commit_log_dir(pair, slave_name("broker-a")))
    assert not ha_errors(pair, "broker-a", slave_name("broker-a"))


async def test_consumers_go_on_from_the_slave_and_producers_to_another_group(tmp_path: Path) -> None:
    with start_cluster(tmp_path, brokers=()) as cluster:
        add_pair(cluster)
        cluster.add_broker("broker-b")
        ns, topic, group = cluster.namesrv_addr, unique("Failover"), unique("cg")
        async with Admin(ns) as admin:
            assert sorted(await admin.create_topic(topic, queue_nums=2)) == ["broker-a", "broker-b"]
        got: list[MessageExt] = []

        async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
            got.extend(msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        def consumer() -> PushConsumer:
            c = PushConsumer(group, config=FIRST, client_config=client_config(ns, unique("c")))
            c.subscribe(topic, "*")
            c.register_message_listener_concurrently(listener)
            return c

        config = ProducerConfig(send_latency_fault_enable=True)
        async with Producer(unique("pg"), namesrv_addr=ns, config=config) as producer:
            first = [await producer.send(Message(topic, b"first-%d" % i)) for i in range(100)]
            assert {r.message_queue.broker_name for r in first} == {"broker-a", "broker-b"}
            c = consumer()
            await c.start()
            await wait_for(lambda: len(got) >= 100, what="the first 100")
            await c.shutdown()  # commits its offsets to the masters
            master, slave = cluster.broker_addr("broker-a"), cluster.broker_addr(slave_name("broker-a"))
            with SyncRemotingClient() as client:
                def offsets(addr: str) -> object:
                    table = _all_of(client, addr, RequestCode.GET_ALL_CONSUMER_OFFSET)["offsetTable"]
                    return table.get(f"{topic}@{group}")  # type: ignore[attr-defined]

                final = offsets(master)
                assert final
                await wait_for(lambda: offsets(slave) == final, what="the group's final offsets on the slave")
            second = [await producer.send(Message(topic, b"second-%d" % i)) for i in range(100)]
            await wait_caught_up(cluster)
            await wait_topic_on_slave(cluster, topic)
            cluster.kill_broker("broker-a")
            third = [await producer.send(Message(topic, b"third-%d" % i)) for i in range(50)]
        assert all(r.send_status is SendStatus.SEND_OK for r in [*first, *second, *third])
        assert {r.message_queue.broker_name for r in third[5:]} == {"broker-b"}  # failed over

        # The group resumes where it committed; broker-a's share of "second" can only come
        # from its slave now.
        assert {r.message_queue.broker_name for r in second} == {"broker-a", "broker-b"}
        got.clear()
        c = consumer()
        await c.start()
        try:
            want = {b"second-%d" % i for i in range(100)} | {b"third-%d" % i for i in range(50)}
            await wait_for(lambda: {m.body for m in got} >= want, timeout=60, what="the rest, partly from the slave")
            assert not {m.body for m in got} & {b"first-%d" % i for i in range(100)}  # no rewind
        finally:
            await c.shutdown()


async def test_metrics_and_console_show_roles_and_lag(pair: Cluster, tmp_path: Path) -> None:
    ns, topic = pair.namesrv_addr, unique("Shown")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=2)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(50):
            await producer.send(Message(topic, b"%d" % i))
    end = await wait_caught_up(pair)

    def scrape(name: str) -> str:
        port = pair.brokers[name].port + 2  # metricsPort -1: listen port + 2
        return _get(f"http://127.0.0.1:{port}/metrics")

    master_metrics, slave_metrics = scrape("broker-a"), scrape(slave_name("broker-a"))
    assert 'lakemq_broker_replication_slaves{broker="broker-a"} 1.0' in master_metrics
    assert 'lakemq_broker_replication_lag_bytes{broker="broker-a",slave="127.0.0.1:' in master_metrics
    assert "lakemq_broker_replication_acked_offset_bytes{broker=\"broker-a\",slave=\"127.0.0.1:" in master_metrics
    assert f"}} {float(end)}" in master_metrics.split("lakemq_broker_replication_acked_offset_bytes{")[1]
    assert 'lakemq_broker_ha_master_connected{broker="broker-a",master="127.0.0.1:' in slave_metrics
    assert "lakemq_broker_ha_received_bytes_total" in slave_metrics

    process, url = start_console(ns, None, tmp_path)
    try:
        page = _get(url)
    finally:
        stop_console(process)
    assert 'id="broker-count">1<' in page and 'id="slave-count">1<' in page
    assert '<td class="role">ASYNC_MASTER</td>' in page and '<td class="role">SLAVE</td>' in page
    assert "0 bytes, 0.0 s behind" in page  # the master's view of its caught-up slave
    assert "follows 127.0.0.1:" in page and ": connected</div>" in page


def _pull(client: SyncRemotingClient, addr: str, topic: str, group: str, offset: int = 0) -> tuple[int, int, int]:
    """(response code, suggestWhichBrokerId, next offset) of one raw PULL_MESSAGE."""
    header = PullMessageRequestHeader(consumer_group=group, topic=topic, queue_id=0, queue_offset=offset,
                                      max_msg_nums=4, sys_flag=0x4, commit_offset=0, suspend_timeout_millis=0,
                                      sub_version=0, subscription="*", expression_type="TAG")
    response = client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header)), 5.0)
    fields = decode_header(PullMessageResponseHeader, response.ext_fields)
    return response.code, fields.suggest_which_broker_id, fields.next_begin_offset


async def test_pulls_far_behind_are_sent_to_the_slave(tmp_path: Path) -> None:
    # Ratio 0: every pull that does not read the very last record counts as far behind.
    with start_cluster(tmp_path, brokers=()) as cluster:
        add_pair(cluster, master_conf={"slaveReadEnable": "true", "accessMessageInMemoryMaxRatio": "0"})
        ns, topic, group = cluster.namesrv_addr, unique("Behind"), unique("cg")
        master, slave = cluster.broker_addr("broker-a"), cluster.broker_addr(slave_name("broker-a"))
        async with Admin(ns) as admin:
            await admin.create_topic(topic, queue_nums=1)
        async with Producer(unique("pg"), namesrv_addr=ns) as producer:
            for i in range(200):
                await producer.send(Message(topic, b"%d" % i))
        await wait_caught_up(cluster)
        with SyncRemotingClient() as client:
            await wait_for(lambda: topic in _all_of(client, slave, RequestCode.GET_ALL_TOPIC_CONFIG)[
                "topicConfigTable"], what="the topic on the slave")  # type: ignore[operator]
            assert _pull(client, master, topic, group)[:2] == (ResponseCode.SUCCESS, 1)  # far behind: the slave
            # The slave (no slaveReadEnable of its own) serves the pull and points back at the master.
            assert _pull(client, slave, topic, group)[:2] == (ResponseCode.SUCCESS, 0)
            # Beyond its queue: the slave does not move the consumer, it says try again.
            assert _pull(client, slave, topic, group, offset=5000) == (ResponseCode.PULL_RETRY_IMMEDIATELY, 0, 5000)

        got: list[MessageExt] = []
        consumer = PushConsumer(group, config=FIRST, client_config=client_config(ns, unique("c")))
        consumer.subscribe(topic, "*")

        async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
            got.extend(msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer.register_message_listener_concurrently(listener)
        await consumer.start()
        try:
            await wait_for(lambda: len({m.body for m in got}) == 200, what="consumption")
        finally:
            await consumer.shutdown()
        # The lakemq client followed the suggestion: the slave served part of the reads.
        slave_metrics = _get(f"http://127.0.0.1:{cluster.brokers[slave_name('broker-a')].port + 2}/metrics")
        served = [line for line in slave_metrics.splitlines()
                  if line.startswith("lakemq_broker_get_messages_total") and group in line]
        assert served and float(served[0].rsplit(" ", 1)[1]) > 0


async def test_sync_master_with_sync_flush_waits_for_disk_and_slave(tmp_path: Path) -> None:
    with start_cluster(tmp_path, brokers=()) as cluster:
        add_pair(cluster, role="SYNC_MASTER", master_conf={"flushDiskType": "SYNC_FLUSH"})
        ns, topic = cluster.namesrv_addr, unique("SyncBoth")
        master = cluster.broker_addr("broker-a")
        async with Admin(ns) as admin:
            await admin.create_topic(topic, queue_nums=2)
        await wait_caught_up(cluster)
        config = ProducerConfig(retry_times_when_send_failed=0)
        async with Producer(unique("pg"), namesrv_addr=ns, config=config) as producer:
            replicated = [await producer.send(Message(topic, b"both-%d" % i)) for i in range(50)]
            assert {r.send_status for r in replicated} == {SendStatus.SEND_OK}
            assert await wait_caught_up(cluster) >= max(r.queue_offset for r in replicated)
            assert cluster.stop_broker(slave_name("broker-a")) == 0  # its link closes at once

            async def no_slave() -> bool:
                return (await runtime(master, ns))["haConnectedSlaves"] == "0"

            deadline = time.monotonic() + 10
            while not await no_slave():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            alone = [await producer.send(Message(topic, b"alone-%d" % i)) for i in range(10)]
            assert {r.send_status for r in alone} == {SendStatus.SLAVE_NOT_AVAILABLE}
        async with Admin(ns) as admin:
            assert sum(s.max_offset for s in await admin.topic_stats(topic)) == 60  # stored all the same
