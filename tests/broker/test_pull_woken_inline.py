"""A held pull woken by an arriving message reads it on the event loop: it is answered even
while every pull-pool thread is busy."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from lakemq.broker.broker_controller import BrokerController
from lakemq.cli.broker_cmds import load_broker_configs
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.record import iter_records
from lakemq.remoting import RemotingClient, RemotingCommand
from lakemq.remoting.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode_header,
    encode_send_header_v2,
)
from tests.cluster import SMALL_STORE

pytestmark = pytest.mark.timeout(60)

SUSPEND_WITH_SUBSCRIPTION = 0x2 | 0x4


def send(topic: str, body: bytes) -> RemotingCommand:
    header = SendMessageRequestHeader("pg", topic, "TBW102", 4, 0, 0, int(time.time() * 1000), 0, "")
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(header), body)


def pull(topic: str, offset: int) -> RemotingCommand:
    header = PullMessageRequestHeader("cg", topic, 0, offset, 32, SUSPEND_WITH_SUBSCRIPTION, 0, 10_000, 0, "*", "TAG")
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))


async def test_woken_pull_answers_while_the_pull_pool_is_busy(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in SMALL_STORE.items()))
    controller = BrokerController(*load_broker_configs(str(conf), data_dir=str(tmp_path / "store"), port=0,
                                                       namesrv="127.0.0.1:1"))
    await controller.start()
    client = RemotingClient()
    release = threading.Event()
    blockers: list[asyncio.Task[object]] = []
    try:
        addr = controller.broker_addr
        assert (await client.invoke(addr, send("Held", b"first"), 5.0)).code == ResponseCode.SUCCESS
        store = controller.store
        assert store is not None
        while store.get_max_offset_in_queue("Held", 0) < 1:
            await asyncio.sleep(0.01)
        held = asyncio.create_task(client.invoke(addr, pull("Held", 1), 15.0))
        while controller.hold_service is None or controller.hold_service.held_count == 0:
            await asyncio.sleep(0.01)
        threads = controller.broker_config.pull_message_thread_pool_nums
        blockers = [asyncio.create_task(controller.pull_pool.run(release.wait)) for _ in range(threads)]
        await asyncio.sleep(0.1)
        assert (await client.invoke(addr, send("Held", b"second"), 5.0)).code == ResponseCode.SUCCESS
        response = await asyncio.wait_for(held, 5.0)
        assert response.code == ResponseCode.SUCCESS
        assert [m.body for m in iter_records(response.body)] == [b"second"]
    finally:
        release.set()
        await asyncio.gather(*blockers, return_exceptions=True)
        await client.shutdown()
        await controller.shutdown()
