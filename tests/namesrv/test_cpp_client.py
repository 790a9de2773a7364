"""The official RocketMQ C++ client (PyPI rocketmq 0.4.4, rocketmq-client-cpp 2.0) asks our
name server for a route and sends to the broker it names: the check of our route JSON.

The broker here is a bare RemotingServer that records requests and answers sends, so the
test is about the name server and the wire, not the broker. The client runs in a subprocess
(its native library owns threads and signals) with HOME in tmp_path, where it writes its logs.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from pathlib import Path

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.namesrv import NamesrvConfig, NamesrvController
from lakemq.remoting import RemotingClient, RemotingCommand, RemotingServer, RequestContext
from lakemq.remoting.bodies import DataVersion, RegisterBrokerBody
from lakemq.remoting.headers import (
    RegisterBrokerRequestHeader,
    SendMessageResponseHeader,
    decode_send_header,
    encode_header,
)

pytest.importorskip("rocketmq.client")
pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

PRODUCER = textwrap.dedent("""
    import sys
    from rocketmq.client import Message, Producer
    producer = Producer("PG")
    producer.set_namesrv_addr(sys.argv[1])
    producer.start()
    message = Message("T")
    message.set_keys("k1")
    message.set_tags("TagA")
    message.set_body("hello")
    result = producer.send_sync(message)
    print("RESULT", int(result.status), result.msg_id, result.offset, flush=True)
    producer.shutdown()
""")


class RecordingBroker:
    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        if request.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            header = decode_send_header(request)
            response = SendMessageResponseHeader("7F00000100002A9F0000000000000042", header.queue_id, 42)
            return request.reply(ResponseCode.SUCCESS, ext_fields=encode_header(response))
        return request.reply(ResponseCode.SUCCESS)

    def reject_request(self) -> bool:
        return False


async def test_cpp_producer_routes_through_our_namesrv(tmp_path: Path) -> None:
    ns = NamesrvController(NamesrvConfig(listen_port=0, kv_config_path=str(tmp_path / "kv.json")))
    await ns.start()
    recorder = RecordingBroker()
    broker = RemotingServer()
    broker.register_default_processor(recorder)
    await broker.start()
    client = RemotingClient()
    try:
        header = RegisterBrokerRequestHeader("broker-a", broker.address, "DefaultCluster", "", 0)
        body = RegisterBrokerBody({"T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4,
                                         "perm": 6}}, DataVersion(1, 1))
        registered = await client.invoke(ns.address, RemotingCommand.request(
            RequestCode.REGISTER_BROKER, encode_header(header), body.encode()), 2.0)
        assert registered.code == ResponseCode.SUCCESS

        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", PRODUCER, ns.address, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=dict(os.environ, HOME=str(tmp_path)))
        out, err = await asyncio.wait_for(proc.communicate(), 90)
        assert proc.returncode == 0, err.decode()[-2000:]
        _, status, msg_id, offset = out.decode().split()
        assert (status, offset) == ("0", "42")  # SEND_OK, our queueOffset

        sends = [r for r in recorder.requests
                 if r.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)]
        assert len(sends) == 1
        send = decode_send_header(sends[0])
        assert (send.topic, send.producer_group, sends[0].body) == ("T", "PG", b"hello")
        assert 0 <= send.queue_id < 4
        assert f"UNIQ_KEY\x01{msg_id}" in (send.properties or "")
    finally:
        await client.shutdown()
        await broker.shutdown()
        await ns.shutdown()
