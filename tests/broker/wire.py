"""Raw RocketMQ requests for broker integration tests, built with lakemq.remoting's headers
exactly as a producer or consumer puts them on the wire."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from lakemq.broker.broker_controller import BrokerController
from lakemq.broker.business_pool import BusinessPool
from lakemq.cli.broker_cmds import load_broker_configs
from lakemq.common.codes import RequestCode
from lakemq.common.message import MessageConst, properties_to_string
from lakemq.remoting import RemotingClient, RemotingCommand
from lakemq.remoting.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode_header,
    encode_send_header_v2,
)
from tests.cluster import SMALL_STORE

PULL_COMMIT_OFFSET, PULL_SUSPEND, PULL_SUBSCRIPTION = 0x1, 0x2, 0x4


def send_request(
    topic: str,
    body: bytes,
    *,
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    v2: bool = True,
    group: str = "PG",
    default_topic: str = "TBW102",
    default_queue_nums: int = 4,
    properties: dict[str, str] | None = None,
) -> RemotingCommand:
    props = {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"U{time.time_ns()}", **(properties or {})}
    if tags:
        props[MessageConst.TAGS] = tags
    if keys:
        props[MessageConst.KEYS] = keys
    header = SendMessageRequestHeader(
        group,
        topic,
        default_topic,
        default_queue_nums,
        queue_id,
        0,
        int(time.time() * 1000),
        0,
        properties_to_string(props),
        0,
    )
    if v2:
        return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(header), body)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, encode_header(header), body)


def encode_batch(bodies: list[bytes], tags: str | None = None) -> bytes:
    """MessageDecoder.encodeMessages: size, magic, crc, flag, body len + body, props len + props."""
    out = bytearray()
    for body in bodies:
        props = properties_to_string({MessageConst.TAGS: tags} if tags else {}).encode()
        out += struct.pack(">iiiii", 22 + len(body) + len(props), 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(props)) + props
    return bytes(out)


def batch_request(
    topic: str, bodies: list[bytes], *, queue_id: int = 0, tags: str | None = None
) -> RemotingCommand:
    header = SendMessageRequestHeader(
        "PG", topic, "TBW102", 4, queue_id, 0, int(time.time() * 1000), 0, batch=True
    )
    return RemotingCommand.request(
        RequestCode.SEND_BATCH_MESSAGE, encode_send_header_v2(header), encode_batch(bodies, tags)
    )


def pull_request(
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_nums: int = 32,
    suspend_ms: int = 0,
    subscription: str | None = "*",
    commit_offset: int | None = None,
    sub_version: int | None = None,
) -> RemotingCommand:
    """Without ``subscription`` the broker uses the group's heartbeat subscription, which must
    be at least ``sub_version`` (a client sends the version it heartbeated)."""
    flag = (PULL_SUSPEND if suspend_ms else 0) | (PULL_SUBSCRIPTION if subscription is not None else 0)
    if commit_offset is not None:
        flag |= PULL_COMMIT_OFFSET
    header = PullMessageRequestHeader(
        group,
        topic,
        queue_id,
        offset,
        max_nums,
        flag,
        commit_offset or 0,
        suspend_ms,
        int(time.time() * 1000) if sub_version is None else sub_version,
        subscription,
        "TAG",
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))


def request(code: int, header: object | None = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, encode_header(header) if header is not None else {}, body)


@asynccontextmanager
async def in_process_broker(
    tmp_path: Path, **conf: str
) -> AsyncIterator[tuple[BrokerController, RemotingClient]]:
    """A broker on the test's own event loop (small store; no NameServer, so it registers
    nowhere) and a client for it; both shut down at the end."""
    conf_file = tmp_path / "broker.conf"
    conf_file.write_text("".join(f"{k}={v}\n" for k, v in {**SMALL_STORE, **conf}.items()))
    configs = load_broker_configs(str(conf_file), data_dir=str(tmp_path / "store"), port=0,
                                  namesrv="127.0.0.1:1")
    controller = BrokerController(*configs)
    await controller.start()
    client = RemotingClient()
    try:
        yield controller, client
    finally:
        await client.shutdown()
        await controller.shutdown()


@asynccontextmanager
async def pool_held_busy(pool: BusinessPool) -> AsyncIterator[threading.Event]:
    """Every thread of POOL blocked until the yielded event is set (at the latest when the block
    ends): only work done on the event loop is answered meanwhile."""
    release = threading.Event()
    blockers = [asyncio.create_task(pool.run(release.wait)) for _ in range(pool.threads)]
    await asyncio.sleep(0.1)
    try:
        yield release
    finally:
        release.set()
        await asyncio.gather(*blockers, return_exceptions=True)
