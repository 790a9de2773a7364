"""A real broker process (and NameServer) driven with raw requests over loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message import MessageConst
from lakemq.common.record import decode_message_id, iter_records
from lakemq.remoting import RemotingClient, RemotingCommand, SyncRemotingClient
from lakemq.remoting.bodies import TopicRouteData
from lakemq.remoting.fastjson import loads as fastjson_loads
from lakemq.remoting.headers import (
    CreateTopicRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from tests.broker.wire import batch_request, pull_request, request, send_request
from tests.cluster import Cluster

pytestmark = pytest.mark.timeout(120)
T = 10.0  # request timeout, seconds


def create_topic(client: SyncRemotingClient, addr: str, topic: str, queues: int = 4) -> None:
    header = CreateTopicRequestHeader(topic, "TBW102", queues, queues, 6, "SINGLE_TAG")
    response = client.invoke(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, header), T)
    assert response.code == ResponseCode.SUCCESS, response.remark


def max_offset(client: SyncRemotingClient, addr: str, topic: str, queue_id: int) -> int:
    response = client.invoke(
        addr, request(RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic, queue_id)), T
    )
    assert response.code == ResponseCode.SUCCESS, response.remark
    return int(response.ext_fields["offset"])


def wait_max_offset(client: SyncRemotingClient, addr: str, topic: str, queue_id: int, expected: int) -> None:
    """Dispatch (reput) is asynchronous: wait until the ConsumeQueue holds ``expected``."""
    deadline = time.monotonic() + 5
    while max_offset(client, addr, topic, queue_id) < expected:
        assert time.monotonic() < deadline, f"{topic}:{queue_id} never reached {expected}"
        time.sleep(0.02)


def test_send_v1_v2_batch_then_pull_back(cluster: Cluster, client: SyncRemotingClient) -> None:
    addr = cluster.broker_addr()
    create_topic(client, addr, "SendPull")
    r1 = client.invoke(addr, send_request("SendPull", b"v1-body", tags="A", keys="k1 k2", v2=False), T)
    r2 = client.invoke(addr, send_request("SendPull", b"v2-body", tags="B"), T)
    rb = client.invoke(addr, batch_request("SendPull", [b"b0", b"b1", b"b2"], tags="C"), T)
    for r in (r1, r2, rb):
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert r.ext_fields["queueId"] == "0"
    assert [r1.ext_fields["queueOffset"], r2.ext_fields["queueOffset"], rb.ext_fields["queueOffset"]] == [
        "0",
        "1",
        "2",
    ]
    assert len(rb.ext_fields["msgId"].split(",")) == 3
    wait_max_offset(client, addr, "SendPull", 0, 5)

    pulled = client.invoke(addr, pull_request("g-sendpull", "SendPull", 0, 0), T)
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    msgs = list(iter_records(pulled.body, check_crc=True))
    assert [m.body for m in msgs] == [b"v1-body", b"v2-body", b"b0", b"b1", b"b2"]
    assert [m.queue_offset for m in msgs] == [0, 1, 2, 3, 4]
    assert [m.tags for m in msgs] == ["A", "B", "C", "C", "C"]
    assert msgs[0].keys == ["k1", "k2"]
    assert msgs[0].msg_id == r1.ext_fields["msgId"] and msgs[1].msg_id == r2.ext_fields["msgId"]
    assert rb.ext_fields["msgId"].split(",") == [m.msg_id for m in msgs[2:]]
    assert all(m.topic == "SendPull" and m.properties["CLUSTER"] == "DefaultCluster" for m in msgs)
    assert MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX in msgs[0].properties
    assert pulled.ext_fields["nextBeginOffset"] == "5" and pulled.ext_fields["maxOffset"] == "5"

    # A tag subscription skips the others; the next begin offset still moves past them.
    tagged = client.invoke(addr, pull_request("g-sendpull", "SendPull", 0, 0, subscription="B || C"), T)
    assert [m.body for m in iter_records(tagged.body)] == [b"v2-body", b"b0", b"b1", b"b2"]
    # Pulling at the end answers PULL_NOT_FOUND at once without the suspend flag.
    end = client.invoke(addr, pull_request("g-sendpull", "SendPull", 0, 5), T)
    assert end.code == ResponseCode.PULL_NOT_FOUND and end.body == b""
    # Past the end: moved, to the min offset while the queue still starts at 0 (as RocketMQ).
    moved = client.invoke(addr, pull_request("g-sendpull", "SendPull", 0, 99), T)
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED and moved.ext_fields["nextBeginOffset"] == "0"


def test_auto_create_through_tbw102_registers_the_route(cluster: Cluster, client: SyncRemotingClient) -> None:
    addr = cluster.broker_addr()
    response = client.invoke(addr, send_request("AutoCreated", b"x", queue_id=1, default_queue_nums=4), T)
    assert response.code == ResponseCode.SUCCESS, response.remark
    # The broker re-registers at once after creating a topic.
    deadline = time.monotonic() + 5
    while True:
        route = client.invoke(
            cluster.namesrv_addr,
            request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader("AutoCreated")),
            T,
        )
        if route.code == ResponseCode.SUCCESS:
            break
        assert time.monotonic() < deadline, route.remark
        time.sleep(0.05)
    data = TopicRouteData.decode(route.body)
    assert [(q.broker_name, q.write_queue_nums, q.perm) for q in data.queue_datas] == [("broker-a", 4, 6)]
    assert data.broker_datas[0].broker_addrs[0] == addr
    unknown = client.invoke(addr, send_request("NoTemplate", b"x", default_topic="NotATemplate"), T)
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    forbidden = client.invoke(addr, send_request("SCHEDULE_TOPIC_XXXX", b"x"), T)
    assert forbidden.code == ResponseCode.NO_PERMISSION
    bad_queue = client.invoke(addr, send_request("AutoCreated", b"x", queue_id=9), T)
    assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId[9] is illegal" in bad_queue.remark


def test_long_polling_is_woken_by_a_send_and_times_out_when_nothing_comes(cluster: Cluster) -> None:
    addr = cluster.broker_addr()

    async def main() -> tuple[RemotingCommand, float, RemotingCommand, float]:
        client = RemotingClient()
        try:
            created = await client.invoke(
                addr,
                request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    CreateTopicRequestHeader("LongPoll", "TBW102", 1, 1, 6, "SINGLE_TAG"),
                ),
                T,
            )
            assert created.code == ResponseCode.SUCCESS
            held = asyncio.create_task(
                client.invoke(addr, pull_request("g-lp", "LongPoll", 0, 0, suspend_ms=15000), 30)
            )
            await asyncio.sleep(0.5)
            assert not held.done(), "the pull was not held"
            sent_at = time.monotonic()
            sent = await client.invoke(addr, send_request("LongPoll", b"wake up"), T)
            assert sent.code == ResponseCode.SUCCESS
            woken = await held
            wake_latency = time.monotonic() - sent_at
            started = time.monotonic()
            empty = await client.invoke(addr, pull_request("g-lp", "LongPoll", 0, 1, suspend_ms=700), T)
            return woken, wake_latency, empty, time.monotonic() - started
        finally:
            await client.shutdown()

    woken, wake_latency, empty, waited = asyncio.run(main())
    assert woken.code == ResponseCode.SUCCESS
    assert [m.body for m in iter_records(woken.body)] == [b"wake up"]
    assert wake_latency < 0.5, f"held pull answered {wake_latency:.3f}s after the send"
    assert empty.code == ResponseCode.PULL_NOT_FOUND
    assert 0.6 < waited < 3.0, f"suspend of 0.7s answered after {waited:.3f}s"


def test_topics_create_list_stats_and_queue_offsets(cluster: Cluster, client: SyncRemotingClient) -> None:
    addr = cluster.broker_addr()
    create_topic(client, addr, "AdminTopic", queues=2)
    bad = client.invoke(
        addr,
        request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            CreateTopicRequestHeader("bad/topic", "TBW102", 2, 2, 6, "SINGLE_TAG"),
        ),
        T,
    )
    assert bad.code == ResponseCode.SYSTEM_ERROR and "bad/topic" in bad.remark
    listed = json.loads(client.invoke(addr, request(RequestCode.GET_ALL_TOPIC_CONFIG), T).body)
    assert listed["topicConfigTable"]["AdminTopic"]["writeQueueNums"] == 2
    assert "bad/topic" not in listed["topicConfigTable"] and "TBW102" in listed["topicConfigTable"]

    before = int(time.time() * 1000)
    for i in range(3):
        assert (
            client.invoke(addr, send_request("AdminTopic", b"m%d" % i, queue_id=1), T).code
            == ResponseCode.SUCCESS
        )
        time.sleep(0.01)
    wait_max_offset(client, addr, "AdminTopic", 1, 3)
    assert max_offset(client, addr, "AdminTopic", 0) == 0
    min_resp = client.invoke(
        addr, request(RequestCode.GET_MIN_OFFSET, GetMinOffsetRequestHeader("AdminTopic", 1)), T
    )
    assert min_resp.ext_fields["offset"] == "0"
    earliest = client.invoke(
        addr,
        request(
            RequestCode.GET_EARLIEST_MSG_STORETIME, GetEarliestMsgStoretimeRequestHeader("AdminTopic", 1)
        ),
        T,
    )
    stored_at = int(earliest.ext_fields["timestamp"])
    assert before - 1000 <= stored_at <= int(time.time() * 1000)
    search = client.invoke(
        addr,
        request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SearchOffsetRequestHeader("AdminTopic", 1, stored_at)
        ),
        T,
    )
    assert search.ext_fields["offset"] == "0"
    future = client.invoke(
        addr,
        request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            SearchOffsetRequestHeader("AdminTopic", 1, stored_at + 3_600_000),
        ),
        T,
    )
    assert future.ext_fields["offset"] == "3"

    stats = client.invoke(
        addr, RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "AdminTopic"}), T
    )
    table = {dict(k)["queueId"]: v for k, v in fastjson_loads(stats.body)["offsetTable"].items()}
    assert (
        table[1]["maxOffset"] == 3
        and table[0]["maxOffset"] == 0
        and table[1]["lastUpdateTimestamp"] >= stored_at
    )
    missing = client.invoke(
        addr, RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"}), T
    )
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST


def test_oversized_message_is_refused_and_nothing_stored_is_lost(
    cluster: Cluster, client: SyncRemotingClient
) -> None:
    addr = cluster.broker_addr()
    create_topic(client, addr, "Big", queues=1)
    assert client.invoke(addr, send_request("Big", b"before"), T).code == ResponseCode.SUCCESS
    refused = client.invoke(addr, send_request("Big", b"x" * (4 * 1024 * 1024 + 1)), T)
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL, refused.remark
    bad_batch = batch_request("Big", [b"ok"])
    bad_batch.body = bad_batch.body[:-3]
    assert client.invoke(addr, bad_batch, T).code == ResponseCode.MESSAGE_ILLEGAL
    assert client.invoke(addr, send_request("Big", b"after"), T).code == ResponseCode.SUCCESS
    wait_max_offset(client, addr, "Big", 0, 2)
    pulled = client.invoke(addr, pull_request("g-big", "Big", 0, 0), T)
    assert [m.body for m in iter_records(pulled.body, check_crc=True)] == [b"before", b"after"]


def _raw_frame_exchange(addr: str, payload: bytes) -> bytes:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(payload)
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                return b"".join(chunks)  # the broker closed this connection
            chunks.append(data)


def test_malformed_frames_and_unknown_codes_leave_other_connections_alone(
    cluster: Cluster, client: SyncRemotingClient
) -> None:
    addr = cluster.broker_addr()
    create_topic(client, addr, "Robust", queues=1)
    # A frame whose header length exceeds the frame, and one with a broken JSON header.
    reply = _raw_frame_exchange(addr, struct.pack(">II", 8, 0x00FFFFFF) + b"\0" * 4)
    assert reply == b"" or b"bad frame" in reply
    garbage = b"{not json"
    reply = _raw_frame_exchange(addr, struct.pack(">II", 4 + len(garbage), len(garbage)) + garbage)
    assert reply == b"" or b"bad frame" in reply
    unknown = client.invoke(addr, RemotingCommand.request(9999), T)
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    missing_field = client.invoke(
        addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "Robust"}), T
    )
    assert missing_field.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in missing_field.remark
    assert client.invoke(addr, send_request("Robust", b"still fine"), T).code == ResponseCode.SUCCESS
    assert cluster.brokers["broker-a"].running


def test_consumer_offsets_survive_a_restart(fresh_cluster: Cluster, client: SyncRemotingClient) -> None:
    addr = fresh_cluster.broker_addr()
    create_topic(client, addr, "Durable", queues=2)
    for i in range(4):
        assert (
            client.invoke(addr, send_request("Durable", b"d%d" % i, queue_id=i % 2), T).code
            == ResponseCode.SUCCESS
        )
    update = UpdateConsumerOffsetRequestHeader("g-durable", "Durable", 0, 2)
    assert (
        client.invoke(addr, request(RequestCode.UPDATE_CONSUMER_OFFSET, update), T).code
        == ResponseCode.SUCCESS
    )
    wait_max_offset(client, addr, "Durable", 1, 2)
    # A pull with the commit flag commits too (queue 1, offset 1).
    client.invoke(addr, pull_request("g-durable", "Durable", 1, 1, commit_offset=1), T)
    query = QueryConsumerOffsetRequestHeader("g-durable", "Durable", 0)
    assert (
        client.invoke(addr, request(RequestCode.QUERY_CONSUMER_OFFSET, query), T).ext_fields["offset"] == "2"
    )
    client.close()

    fresh_cluster.restart_broker()
    store = fresh_cluster.root / "broker-a" / "store"
    log_text = (fresh_cluster.root / "broker-a" / "logs" / "broker-broker-a.log").read_text()
    assert "abnormal shutdown" not in log_text  # SIGTERM shut the store down cleanly
    with SyncRemotingClient() as again:
        q0 = again.invoke(addr, request(RequestCode.QUERY_CONSUMER_OFFSET, query), T)
        q1 = again.invoke(
            addr,
            request(
                RequestCode.QUERY_CONSUMER_OFFSET, QueryConsumerOffsetRequestHeader("g-durable", "Durable", 1)
            ),
            T,
        )
        assert (q0.code, q0.ext_fields["offset"]) == (ResponseCode.SUCCESS, "2")
        assert q1.ext_fields["offset"] == "1"
        never = again.invoke(
            addr,
            request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                QueryConsumerOffsetRequestHeader("g-other", "Durable", 0, set_zero_if_not_found=False),
            ),
            T,
        )
        assert never.code == ResponseCode.QUERY_NOT_FOUND
        pulled = again.invoke(addr, pull_request("g-durable", "Durable", 0, 0), T)
        assert [m.body for m in iter_records(pulled.body)] == [b"d0", b"d2"]
        assert json.loads((store / "config" / "consumerOffset.json").read_text())["offsetTable"][
            "Durable@g-durable"
        ] == {"0": 2, "1": 1}


def test_broker_unregisters_at_shutdown_and_registers_at_start(
    fresh_cluster: Cluster, client: SyncRemotingClient
) -> None:
    addr = fresh_cluster.broker_addr()
    create_topic(client, addr, "Routed", queues=1)
    route = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader("Routed"))

    def route_code() -> int:
        return client.invoke(fresh_cluster.namesrv_addr, route, T).code

    deadline = time.monotonic() + 5
    while route_code() != ResponseCode.SUCCESS:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert fresh_cluster.stop_broker() == 0
    assert route_code() == ResponseCode.TOPIC_NOT_EXIST  # unregistered before exiting
    fresh_cluster.start_broker()
    assert route_code() == ResponseCode.SUCCESS  # registered before the boot line


def test_sigterm_with_a_held_pull_exits_cleanly_and_promptly(fresh_cluster: Cluster) -> None:
    addr = fresh_cluster.broker_addr()

    async def main() -> tuple[object, float, int]:
        client = RemotingClient()
        try:
            await client.invoke(
                addr,
                request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    CreateTopicRequestHeader("Held", "TBW102", 1, 1, 6, "SINGLE_TAG"),
                ),
                T,
            )
            held = asyncio.create_task(
                client.invoke(addr, pull_request("g-held", "Held", 0, 0, suspend_ms=20000), 30)
            )
            await asyncio.sleep(0.3)
            started = time.monotonic()
            code = await asyncio.to_thread(fresh_cluster.stop_broker)
            elapsed = time.monotonic() - started
            try:
                outcome: object = (await held).code
            except Exception as exc:  # noqa: BLE001 - the connection closed before the answer: also acceptable
                outcome = type(exc).__name__
            return outcome, elapsed, code
        finally:
            await client.shutdown()

    outcome, elapsed, code = asyncio.run(main())
    assert code == 0
    assert elapsed < 5.0, f"shutdown took {elapsed:.2f}s with a held pull"
    assert outcome in (ResponseCode.PULL_NOT_FOUND, "RemotingConnectError")
    log_text = (fresh_cluster.root / "broker-a" / "logs" / "broker-broker-a.log").read_text()
    assert "broker broker-a stopped" in log_text


def test_query_by_key_and_view_by_offset(cluster: Cluster, client: SyncRemotingClient) -> None:
    addr = cluster.broker_addr()
    create_topic(client, addr, "Keyed", queues=1)
    sent = [
        client.invoke(addr, send_request("Keyed", b"body%d" % i, keys=f"order-{i % 2}"), T) for i in range(4)
    ]
    assert all(r.code == ResponseCode.SUCCESS for r in sent)
    wait_max_offset(client, addr, "Keyed", 0, 4)
    now = int(time.time() * 1000)
    query = RemotingCommand.request(
        RequestCode.QUERY_MESSAGE,
        {
            "topic": "Keyed",
            "key": "order-1",
            "maxNum": "32",
            "beginTimestamp": "0",
            "endTimestamp": str(now + 1000),
        },
    )
    deadline = time.monotonic() + 5
    while True:  # the IndexFile is built by dispatch, like the ConsumeQueue
        found = client.invoke(addr, query, T)
        if found.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert found.code == ResponseCode.SUCCESS, found.remark
    assert sorted(m.body for m in iter_records(found.body)) == [b"body1", b"body3"]
    assert int(found.ext_fields["indexLastUpdateTimestamp"]) > 0
    query.ext_fields["key"] = "order-9"
    assert client.invoke(addr, query, T).code == ResponseCode.QUERY_NOT_FOUND

    _host, offset = decode_message_id(sent[2].ext_fields["msgId"])
    viewed = client.invoke(
        addr, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}), T
    )
    assert [m.body for m in iter_records(viewed.body)] == [b"body2"]
    bad = client.invoke(addr, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "12345"}), T)
    assert bad.code == ResponseCode.SYSTEM_ERROR
