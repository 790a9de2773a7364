"""Under ASYNC_FLUSH a send to a known topic is put on the event loop (no send-pool hop);
under SYNC_FLUSH, and for a topic still to be created, it waits for a send-pool thread."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from lakemq.broker.broker_controller import BrokerController
from lakemq.cli.broker_cmds import load_broker_configs
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.remoting import RemotingClient, RemotingCommand
from lakemq.remoting.headers import SendMessageRequestHeader, encode_send_header_v2
from tests.cluster import SMALL_STORE

pytestmark = pytest.mark.timeout(60)


def send(topic: str) -> RemotingCommand:
    header = SendMessageRequestHeader("pg", topic, "TBW102", 4, 0, 0, int(time.time() * 1000), 0, "")
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(header), b"body")


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_send_pool_hop_only_where_a_put_may_wait(tmp_path: Path, flush: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in {**SMALL_STORE, "flushDiskType": flush}.items()))
    controller = BrokerController(*load_broker_configs(str(conf), data_dir=str(tmp_path / "store"), port=0,
                                                       namesrv="127.0.0.1:1"))
    await controller.start()
    client = RemotingClient()
    release = threading.Event()
    blockers: list[asyncio.Task[object]] = []
    try:
        created = await client.invoke(controller.broker_addr, send("Known"), 5.0)
        assert created.code == ResponseCode.SUCCESS, created.remark
        # Every send-pool thread busy: only a put made on the loop can be answered now.
        threads = controller.broker_config.send_message_thread_pool_nums
        blockers = [asyncio.create_task(controller.send_pool.run(release.wait)) for _ in range(threads)]
        await asyncio.sleep(0.1)
        known = await client.invoke(controller.broker_addr, send("Known"), 5.0)
        new = await client.invoke(controller.broker_addr, send("New"), 5.0)
        # A send queued behind the blocked threads is refused by the queue's fast failure.
        if flush == "ASYNC_FLUSH":
            assert known.code == ResponseCode.SUCCESS, known.remark
        else:
            assert known.code == ResponseCode.SYSTEM_BUSY and "TIMEOUT_CLEAN_QUEUE" in (known.remark or "")
        assert new.code == ResponseCode.SYSTEM_BUSY  # creating a topic writes its config file: pool only
        release.set()
        assert (await client.invoke(controller.broker_addr, send("New"), 5.0)).code == ResponseCode.SUCCESS
        store = controller.store
        assert store is not None
        deadline = time.monotonic() + 5  # dispatch to the ConsumeQueue runs behind the put
        while store.get_max_offset_in_queue("Known", 0) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert store.get_max_offset_in_queue("Known", 0) == (2 if flush == "ASYNC_FLUSH" else 1)
    finally:
        release.set()
        await asyncio.gather(*blockers, return_exceptions=True)
        await client.shutdown()
        await controller.shutdown()
