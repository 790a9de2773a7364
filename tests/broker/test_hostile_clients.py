"""Careless and hostile clients against real brokers: malformed requests cost one escaped,
rate-limited log line each, and names that break RocketMQ's rules never reach a file."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import re
import time
from pathlib import Path

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.config import snake_to_camel
from lakemq.remoting import FrameDecoder, RemotingClient, RemotingCommand, encode
from lakemq.remoting import headers as wire_headers
from lakemq.remoting.bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    MessageQueue,
    SubscriptionData,
)
from lakemq.remoting.codec import FLAG_RESPONSE
from lakemq.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from tests.broker.wire import in_process_broker, pull_request, request, send_request
from tests.cluster import start_cluster

pytestmark = pytest.mark.timeout(120)

_LINE_START = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
# Names a careless or hostile client sends: path climbing, the offset key's separator, empty,
# too long, and control characters that would forge a log line or drive a terminal.
_HOSTILE = ["../escape", "LegitT@../escape", "", "g" * 300, "a\x00b", "\x1b[31mred\n2026-01-01 00:00:00,000 ERROR forged",
            "%RETRY%g", "x y", "TopicA"]


def _wire_fields() -> dict[str, type]:
    """Every header field name a request may carry, with how it is read (int or str)."""
    fields: dict[str, type] = {letter: str for letter in "abcdefghijklmn"}  # SendMessageRequestHeaderV2
    for value in vars(wire_headers).values():
        if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__name__.endswith("RequestHeader"):
            for f in dataclasses.fields(value):
                fields[snake_to_camel(f.name)] = int if "int" in str(f.type) else str
    fields["clientID"] = str
    return fields


def _hostile_requests(seed: int, count: int) -> list[RemotingCommand]:
    """Well-framed requests of every code with hostile fields and bodies (deterministic)."""
    rnd = random.Random(seed)
    fields = _wire_fields()
    numbers = ["0", "1", "-1", str(2**31), str(-(2**63)), str(2**63 - 1), str(2**64), "x"]

    def body() -> bytes:
        pick = rnd.random()
        if pick < 0.3:
            return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 48)))
        group, topic = rnd.choice(_HOSTILE), rnd.choice(_HOSTILE)
        if pick < 0.6:
            return json.dumps({"clientID": rnd.choice(_HOSTILE), "producerDataSet": [{"groupName": group}],
                               "consumerDataSet": [{"groupName": group, "subscriptionDataSet": [
                                   {"topic": topic, "subString": rnd.choice(["*", "a||", "a > "])}]}]}).encode()
        if pick < 0.8:
            return json.dumps({"consumerGroup": group, "clientId": "c",
                               "mqSet": [{"topic": topic, "brokerName": "b", "queueId": rnd.choice([0, -1, "x"])}],
                               "subscriptionData": {"topic": topic, "subString": "a >", "expressionType": "SQL92"}}
                              ).encode()
        return rnd.choice([b"", b"{", b"[]", b"null", b'{"mqSet": 5}', b'{"consumerDataSet": [5]}'])

    out = []
    for i in range(count):
        ext = {name: rnd.choice(numbers) if kind is int and rnd.random() < 0.8 else rnd.choice(_HOSTILE)
               for name, kind in fields.items() if rnd.random() < 0.6}
        ext["sysFlag"] = "0"  # no long-polled pulls: every request is answered at once
        cmd = RemotingCommand.request(rnd.choice(list(RequestCode)), ext, body())
        cmd.opaque = i
        if rnd.random() < 0.03:
            cmd.flag |= FLAG_RESPONSE  # a response nobody asked for
        out.append(cmd)
    return out


async def _flood(addr: str, commands: list[RemotingCommand]) -> None:
    """Send COMMANDS on one connection while draining its answers; end with a request the
    server must still answer on that connection, so that every command was handled (and
    logged) before the test reads the server's log."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    last = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
    last.opaque = len(commands)
    answered = asyncio.create_task(_answer_to(reader, last.opaque))
    for i, command in enumerate([*commands, last]):
        writer.write(encode(command))
        if i % 50 == 0:
            await writer.drain()
    await writer.drain()
    try:
        assert await asyncio.wait_for(answered, 30), f"{addr} closed the connection before answering the last request"
    finally:
        writer.close()
        await writer.wait_closed()
    # Malformed frames close their own connection and no other.
    for frame in (b"\x00\x00\x00\x08\x05\x00\x00\x04junk", b"\x7f\xff\xff\xff" + b"\x00" * 8):
        r, w = await asyncio.open_connection(host, int(port))
        w.write(frame)
        await w.drain()
        await r.read()
        w.close()


async def _answer_to(reader: asyncio.StreamReader, opaque: int) -> bool:
    """Read answers until the one to request ``opaque`` (True) or the end of the stream (False)."""
    decoder = FrameDecoder()
    while data := await reader.read(1 << 16):
        if any(c.opaque == opaque and c.flag & FLAG_RESPONSE for c in decoder.feed(data)):
            return True
    return False


def _log_text(root: Path, part: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((root / part / "logs").glob("*.log")))


def test_malformed_requests_cost_one_escaped_rate_limited_line_each(tmp_path: Path) -> None:
    with start_cluster(tmp_path) as cluster:
        started = time.monotonic()

        async def run() -> tuple[RemotingCommand, RemotingCommand, RemotingCommand]:
            client = RemotingClient()
            try:
                # First (the log's budget is not spent yet): a refusal that names a forging topic.
                forged = await client.invoke(cluster.broker_addr(), send_request(_HOSTILE[5], b"x"), 10)
                await _flood(cluster.broker_addr(), _hostile_requests(7, 1500))
                await _flood(cluster.namesrv_addr, _hostile_requests(8, 500))
                # Both still serve.
                broker = await client.invoke(cluster.broker_addr(), RemotingCommand.request(
                    RequestCode.GET_BROKER_RUNTIME_INFO), 10)
                namesrv = await client.invoke(cluster.namesrv_addr,
                                              RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
                                              10)
            finally:
                await client.shutdown()
            return forged, broker, namesrv

        forged, broker, namesrv = asyncio.run(run())
        elapsed = time.monotonic() - started
        assert forged.code == ResponseCode.SYSTEM_ERROR and "is invalid" in (forged.remark or "")
        assert broker.code == ResponseCode.SUCCESS and namesrv.code == ResponseCode.SUCCESS
        for part in ("broker-a", "namesrv"):
            text = _log_text(tmp_path, part)
            lines = text.splitlines()
            assert "Traceback" not in text, f"{part} logged a traceback for a client's bad request"
            levels = [_LINE_START.match(line) for line in lines]
            assert all(levels), "a client forged or split a log line"
            assert not [line for line, level in zip(lines, levels) if level and level.group(1) == "ERROR"]
            assert not [line for line in lines if re.search(r"[\x00-\x1f\x7f]", line)]
            bad = [line for line, level in zip(lines, levels)
                   if level and level.group(1) == "WARNING" and "bad request" in line]
            assert bad and all("from 127.0.0.1:" in line for line in bad)
            # 20 lines per 10 s window, whatever the flood.
            assert len(bad) <= 20 * (int(elapsed // 10) + 1), len(bad)
        assert "\\x1b[31mred\\n2026-01-01" in _log_text(tmp_path, "broker-a")


async def test_consumer_offsets_refuse_names_that_break_the_rules(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        created = await client.invoke(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                                    CreateTopicRequestHeader("LegitT", "TBW102", 2, 2, 6, "SINGLE_TAG")), 10)
        assert created.code == ResponseCode.SUCCESS, created.remark

        async def commit(group: str, topic: str = "LegitT", queue_id: int = 0) -> RemotingCommand:
            return await client.invoke(addr, request(RequestCode.UPDATE_CONSUMER_OFFSET,
                                                     UpdateConsumerOffsetRequestHeader(group, topic, queue_id, 5)), 10)

        for group in ("../escape", "", "g" * 300, "a@b", "x\ny"):
            refused = await commit(group)
            assert refused.code == ResponseCode.SYSTEM_ERROR and "group name" in (refused.remark or ""), group
        refused = await commit("g1", "../T")
        assert refused.code == ResponseCode.SYSTEM_ERROR and "topic name" in (refused.remark or "")
        assert (await commit("g1", "NoSuchTopic")).code == ResponseCode.TOPIC_NOT_EXIST
        out_of_range = await commit("g1", "LegitT", 2)
        assert out_of_range.code == ResponseCode.SYSTEM_ERROR and "queueId[2]" in (out_of_range.remark or "")
        assert (await commit("g1")).code == ResponseCode.SUCCESS
        query = await client.invoke(addr, RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "../escape", "topic": "LegitT", "queueId": "0"}), 10)
        assert query.code == ResponseCode.SYSTEM_ERROR and "group name" in (query.remark or "")
        controller.consumer_offset_manager.persist(force=True)
        table = json.loads((controller.consumer_offset_manager.path).read_text())["offsetTable"]
        assert table == {"LegitT@g1": {"0": 5}}


async def test_heartbeats_and_queue_locks_refuse_names_that_break_the_rules(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr

        def heartbeat(group: str, topic: str = "T", producer: str = "PG") -> RemotingCommand:
            consumer = ConsumerData(group, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
                                    (SubscriptionData(topic, "*"),))
            return RemotingCommand.request(RequestCode.HEART_BEAT,
                                           body=HeartbeatData("c1", (producer,), (consumer,)).encode())

        for data in (heartbeat("../escape"), heartbeat("g", topic="../T"), heartbeat("g", producer="p g")):
            refused = await client.invoke(addr, data, 10)
            assert refused.code == ResponseCode.SYSTEM_ERROR and "name" in (refused.remark or "")
        assert controller.consumer_manager.get_consumer_group_info("../escape") is None
        assert controller.consumer_manager.get_consumer_group_info("g") is None  # refused whole
        assert (await client.invoke(addr, heartbeat("g"), 10)).code == ResponseCode.SUCCESS
        lock = LockBatchRequestBody("../escape", "c1", (MessageQueue("T", "broker-a", 0),))
        refused = await client.invoke(addr, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=lock.encode()), 10)
        assert refused.code == ResponseCode.SYSTEM_ERROR and "group name" in (refused.remark or "")
        stats = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUME_STATS,
                                                                  {"consumerGroup": "a/b"}), 10)
        assert stats.code == ResponseCode.SYSTEM_ERROR and "group name" in (stats.remark or "")
        pull = await client.invoke(addr, pull_request("../escape", "T", 0, 0), 10)
        assert pull.code == ResponseCode.SYSTEM_ERROR and "group name" in (pull.remark or "")
        back = await client.invoke(addr, request(RequestCode.CONSUMER_SEND_MSG_BACK,
                                                 ConsumerSendMsgBackRequestHeader(0, "a b", 0)), 10)
        assert back.code == ResponseCode.SYSTEM_ERROR and "group name" in (back.remark or "")
        assert "../escape" not in controller.subscription_group_manager.groups()
