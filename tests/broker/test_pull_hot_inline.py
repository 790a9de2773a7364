"""A pull of an existing group reading the CommitLog's recent bytes runs on the event loop: it is
answered while every pull-pool thread is busy. A pull that would create its group (a file write)
still waits for the pool."""

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

SUBSCRIPTION = 0x4


def send(topic: str, body: bytes) -> RemotingCommand:
    header = SendMessageRequestHeader("pg", topic, "TBW102", 4, 0, 0, int(time.time() * 1000), 0, "")
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(header), body)


def pull(group: str, topic: str, offset: int) -> RemotingCommand:
    header = PullMessageRequestHeader(group, topic, 0, offset, 32, SUBSCRIPTION, 0, 0, 0, "*", "TAG")
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))


async def test_hot_pull_answers_while_the_pull_pool_is_busy(tmp_path: Path) -> None:
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
        for body in (b"one", b"two"):
            assert (await client.invoke(addr, send("Hot", body), 5.0)).code == ResponseCode.SUCCESS
        store = controller.store
        assert store is not None
        while store.get_max_offset_in_queue("Hot", 0) < 2:
            await asyncio.sleep(0.01)
        # The group is created by a first pull (through the pool: it writes the group file).
        first = await client.invoke(addr, pull("known_group", "Hot", 0), 5.0)
        assert first.code == ResponseCode.SUCCESS
        threads = controller.broker_config.pull_message_thread_pool_nums
        blockers = [asyncio.create_task(controller.pull_pool.run(release.wait)) for _ in range(threads)]
        await asyncio.sleep(0.1)
        hot = await client.invoke(addr, pull("known_group", "Hot", 0), 5.0)
        assert hot.code == ResponseCode.SUCCESS
        assert [m.body for m in iter_records(hot.body)] == [b"one", b"two"]
        # A new group would be created and persisted: that pull queues behind the busy pool.
        new_group = asyncio.create_task(client.invoke(addr, pull("new_group", "Hot", 0), 10.0))
        await asyncio.sleep(0.3)
        assert not new_group.done()
        release.set()
        answered = await asyncio.wait_for(new_group, 10.0)
        assert answered.code == ResponseCode.SUCCESS
        assert [m.body for m in iter_records(answered.body)] == [b"one", b"two"]
    finally:
        release.set()
        await asyncio.gather(*blockers, return_exceptions=True)
        await client.shutdown()
        await controller.shutdown()
