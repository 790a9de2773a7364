"""Heartbeats, consumer groups, notifications, consume stats and queue locks against a real
broker process."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message import MessageConst
from lakemq.common.message_queue import MessageQueue
from lakemq.common.record import iter_records
from lakemq.common.subscription import SubscriptionData
from lakemq.remoting import RemotingClient, RemotingCommand, RequestContext
from lakemq.remoting.bodies import (
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
)
from lakemq.remoting.fastjson import loads as fastjson_loads
from lakemq.remoting.headers import (
    CreateTopicRequestHeader,
    GetConsumerListByGroupRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    encode_header,
)
from tests.broker.wire import pull_request, request, send_request
from tests.cluster import Cluster

pytestmark = pytest.mark.timeout(120)
T = 10.0


def heartbeat(client_id: str, group: str, topic: str, sub: str = "*") -> RemotingCommand:
    data = HeartbeatData(
        client_id,
        ("PG-" + client_id,),
        (
            ConsumerData(
                group,
                "CONSUME_PASSIVELY",
                "CLUSTERING",
                "CONSUME_FROM_LAST_OFFSET",
                (SubscriptionData(topic, sub, sub_version=int(time.time() * 1000)),),
            ),
        ),
    )
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=data.encode())


class _Notifications:
    """Records NOTIFY_CONSUMER_IDS_CHANGED the broker sends to a client."""

    def __init__(self) -> None:
        self.groups: list[str] = []
        self.event = asyncio.Event()

    def reject_request(self) -> bool:
        return False

    async def process_request(self, ctx: RequestContext, req: RemotingCommand) -> None:
        self.groups.append(req.ext_fields["consumerGroup"])
        self.event.set()


def test_heartbeats_group_membership_and_notifications(cluster: Cluster) -> None:
    addr = cluster.broker_addr()

    async def main() -> None:
        first, second = RemotingClient(), RemotingClient()
        notified = _Notifications()
        first.register_processor(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, notified)
        try:
            await first.invoke(
                addr,
                request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    CreateTopicRequestHeader("Members", "TBW102", 2, 2, 6, "SINGLE_TAG"),
                ),
                T,
            )
            assert (
                await first.invoke(addr, heartbeat("c1", "g-members", "Members", "tagA"), T)
            ).code == ResponseCode.SUCCESS
            notified.event.clear()
            assert (
                await second.invoke(addr, heartbeat("c2", "g-members", "Members", "tagA"), T)
            ).code == ResponseCode.SUCCESS
            await asyncio.wait_for(notified.event.wait(), 5)  # c1 is told to rebalance
            assert notified.groups[-1] == "g-members"
            listed = await first.invoke(
                addr,
                request(
                    RequestCode.GET_CONSUMER_LIST_BY_GROUP, GetConsumerListByGroupRequestHeader("g-members")
                ),
                T,
            )
            assert sorted(GetConsumerListByGroupResponseBody.decode(listed.body).consumer_id_list) == [
                "c1",
                "c2",
            ]

            # The heartbeat created the group's retry topic and registered the subscription:
            # a pull without its own subscription uses it (tag filter tagA).
            topics = json.loads((await first.invoke(addr, request(RequestCode.GET_ALL_TOPIC_CONFIG), T)).body)
            assert "%RETRY%g-members" in topics["topicConfigTable"]
            for tag in ("tagA", "tagB"):
                sent = await first.invoke(addr, send_request("Members", tag.encode(), tags=tag), T)
                assert sent.code == ResponseCode.SUCCESS
            await asyncio.sleep(0.2)
            pulled = await first.invoke(
                addr, pull_request("g-members", "Members", 0, 0, subscription=None, sub_version=0), T
            )
            assert pulled.code == ResponseCode.SUCCESS, pulled.remark
            assert [m.body for m in iter_records(pulled.body)] == [b"tagA"]
            stranger = await first.invoke(
                addr, pull_request("g-nobody", "Members", 0, 0, subscription=None), T
            )
            assert stranger.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
            newer = await first.invoke(
                addr,
                pull_request(
                    "g-members",
                    "Members",
                    0,
                    0,
                    subscription=None,
                    sub_version=int(time.time() * 1000) + 60_000,
                ),
                T,
            )
            assert newer.code == ResponseCode.SUBSCRIPTION_NOT_LATEST

            # Unregistering c2 (or its connection closing) leaves c1 alone in the group.
            notified.event.clear()
            gone = await second.invoke(
                addr,
                RemotingCommand.request(
                    RequestCode.UNREGISTER_CLIENT,
                    encode_header(UnregisterClientRequestHeader("c2", consumer_group="g-members")),
                ),
                T,
            )
            assert gone.code == ResponseCode.SUCCESS
            await asyncio.wait_for(notified.event.wait(), 5)
            listed = await first.invoke(
                addr,
                request(
                    RequestCode.GET_CONSUMER_LIST_BY_GROUP, GetConsumerListByGroupRequestHeader("g-members")
                ),
                T,
            )
            assert GetConsumerListByGroupResponseBody.decode(listed.body).consumer_id_list == ("c1",)
            await first.shutdown()
            deadline = time.monotonic() + 5
            while True:
                listed = await second.invoke(
                    addr,
                    request(
                        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                        GetConsumerListByGroupRequestHeader("g-members"),
                    ),
                    T,
                )
                if listed.code == ResponseCode.SYSTEM_ERROR:  # "no consumer for this group"
                    break
                assert time.monotonic() < deadline, "closed connection still listed"
                await asyncio.sleep(0.05)
        finally:
            await first.shutdown()
            await second.shutdown()

    asyncio.run(main())


def test_consume_stats_lag_locks_and_runtime_info(cluster: Cluster) -> None:
    addr = cluster.broker_addr()

    async def main() -> None:
        client = RemotingClient()
        try:
            await client.invoke(
                addr,
                request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    CreateTopicRequestHeader("Lagging", "TBW102", 2, 2, 6, "SINGLE_TAG"),
                ),
                T,
            )
            for i in range(5):
                await client.invoke(addr, send_request("Lagging", b"%d" % i, queue_id=0), T)
            await client.invoke(
                addr,
                request(
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    UpdateConsumerOffsetRequestHeader("g-lag", "Lagging", 0, 2),
                ),
                T,
            )
            await asyncio.sleep(0.2)
            stats = await client.invoke(
                addr,
                RemotingCommand.request(
                    RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g-lag", "topic": "Lagging"}
                ),
                T,
            )
            assert stats.code == ResponseCode.SUCCESS, stats.remark
            table = {dict(k)["queueId"]: v for k, v in fastjson_loads(stats.body)["offsetTable"].items()}
            assert table[0]["brokerOffset"] - table[0]["consumerOffset"] == 3
            assert table[1] == {"brokerOffset": 0, "consumerOffset": 0, "lastTimestamp": 0}
            all_offsets = json.loads(
                (await client.invoke(addr, request(RequestCode.GET_ALL_CONSUMER_OFFSET), T)).body
            )
            assert all_offsets["offsetTable"]["Lagging@g-lag"] == {"0": 2}

            mqs = (MessageQueue("Lagging", "broker-a", 0), MessageQueue("Lagging", "broker-a", 1))
            lock = RemotingCommand.request(
                RequestCode.LOCK_BATCH_MQ, body=LockBatchRequestBody("g-lag", "c1", mqs).encode()
            )
            assert (
                LockBatchResponseBody.decode((await client.invoke(addr, lock, T)).body).lock_ok_mq_set == mqs
            )
            other = RemotingCommand.request(
                RequestCode.LOCK_BATCH_MQ, body=LockBatchRequestBody("g-lag", "c2", mqs).encode()
            )
            assert (
                LockBatchResponseBody.decode((await client.invoke(addr, other, T)).body).lock_ok_mq_set == ()
            )
            unlock = RemotingCommand.request(
                RequestCode.UNLOCK_BATCH_MQ, body=LockBatchRequestBody("g-lag", "c1", mqs[:1]).encode()
            )
            assert (await client.invoke(addr, unlock, T)).code == ResponseCode.SUCCESS
            other = RemotingCommand.request(
                RequestCode.LOCK_BATCH_MQ, body=LockBatchRequestBody("g-lag", "c2", mqs).encode()
            )
            assert (
                LockBatchResponseBody.decode((await client.invoke(addr, other, T)).body).lock_ok_mq_set
                == mqs[:1]
            )

            info = KVTable.decode(
                (await client.invoke(addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), T)).body
            )
            assert int(info.table["commitLogMaxOffset"]) > 0 and info.table["brokerAddr"] == addr
        finally:
            await client.shutdown()

    asyncio.run(main())


def test_send_back_redelivers_through_retry_topic_then_dlq(cluster: Cluster) -> None:
    addr = cluster.broker_addr()

    async def pull_all(client: RemotingClient, topic: str, expected: int) -> list:
        deadline = time.monotonic() + 10
        while True:
            response = await client.invoke(addr, pull_request("g-back", topic, 0, 0), T)
            msgs = list(iter_records(response.body)) if response.code == ResponseCode.SUCCESS else []
            if len(msgs) >= expected or time.monotonic() > deadline:
                return msgs
            await asyncio.sleep(0.1)

    async def main() -> None:
        client = RemotingClient()
        try:
            await client.invoke(
                addr,
                request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    CreateTopicRequestHeader("Failing", "TBW102", 1, 1, 6, "SINGLE_TAG"),
                ),
                T,
            )
            sent = await client.invoke(addr, send_request("Failing", b"retry me", tags="t1"), T)
            await asyncio.sleep(0.2)
            original = (await pull_all(client, "Failing", 1))[0]
            back = {
                "offset": str(original.commit_log_offset),
                "group": "g-back",
                "delayLevel": "1",
                "originMsgId": sent.ext_fields["msgId"],
                "originTopic": "Failing",
                "maxReconsumeTimes": "1",
            }
            started = time.monotonic()
            assert (
                await client.invoke(
                    addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, back), T
                )
            ).code == ResponseCode.SUCCESS
            retried = await pull_all(client, "%RETRY%g-back", 1)
            assert time.monotonic() - started >= 0.9  # delay level 1 is 1 s
            assert [m.body for m in retried] == [b"retry me"] and retried[0].reconsume_times == 1
            assert retried[0].properties[MessageConst.RETRY_TOPIC] == "Failing"
            assert retried[0].properties[MessageConst.ORIGIN_MESSAGE_ID] == sent.ext_fields["msgId"]
            assert retried[0].tags == "t1"
            # Handed back again after maxReconsumeTimes (1): to the DLQ, without delay.
            back["offset"] = str(retried[0].commit_log_offset)
            assert (
                await client.invoke(
                    addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, back), T
                )
            ).code == ResponseCode.SUCCESS
            dead = await pull_all(client, "%DLQ%g-back", 1)
            assert [m.body for m in dead] == [b"retry me"] and dead[0].reconsume_times == 2
            missing = dict(back, offset=str(10**12))
            assert (
                await client.invoke(
                    addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, missing), T
                )
            ).code == ResponseCode.SYSTEM_ERROR
        finally:
            await client.shutdown()

    asyncio.run(main())


def test_pull_right_after_a_version_bump_heartbeat_is_served(cluster: Cluster) -> None:
    """A Java consumer bumps its subscription version and heartbeats as it dispatches its first
    pulls; both go out on one connection, heartbeat first. The pull must see the new version
    (it was refused SUBSCRIPTION_NOT_LATEST, and the client waited a second, when heartbeats
    took a thread hop that pulls do not)."""
    addr = cluster.broker_addr()

    def versioned(version: int) -> RemotingCommand:
        data = HeartbeatData("c-bump", (), (ConsumerData(
            "g-bump", "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_FIRST_OFFSET",
            (SubscriptionData("Bumped", "*", sub_version=version),)),))
        return RemotingCommand.request(RequestCode.HEART_BEAT, body=data.encode())

    async def main() -> None:
        client = RemotingClient()
        try:
            await client.invoke(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                              CreateTopicRequestHeader("Bumped", "TBW102", 1, 1, 6, "SINGLE_TAG")), T)
            # The first heartbeat creates the group and its retry topic.
            assert (await client.invoke(addr, versioned(1000), T)).code == ResponseCode.SUCCESS
            for version in range(2000, 2020):
                beat, pulled = await asyncio.gather(
                    client.invoke(addr, versioned(version), T),
                    client.invoke(addr, pull_request("g-bump", "Bumped", 0, 0, subscription=None,
                                                     sub_version=version), T))
                assert beat.code == ResponseCode.SUCCESS
                assert pulled.code == ResponseCode.PULL_NOT_FOUND, (version, pulled.code, pulled.remark)
        finally:
            await client.shutdown()

    asyncio.run(main())
