"""A slave's copy of its master's metadata (RocketMQ's SlaveSynchronize): every 10 s (the
first 3 s after start) it asks the master for its topic configs, consumer offsets, delay
offsets and subscription groups with RocketMQ's own request codes, and takes them:

- topics and groups replace the slave's when the master's data version differs;
- each consumer offset the master holds replaces the slave's (offsets committed to the slave
  while the master was away stay until the master has that topic@group again);
- delay offsets replace the slave's delayOffset.json.

The master's address is the one the NameServer answers the slave's registration with; with
none (the master is down) nothing is asked. Files are written in the default executor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfigManager
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import FrameError, LakeMQError
from lakemq.remoting import fastjson
from lakemq.remoting.client import RemotingClient
from lakemq.remoting.codec import RemotingCommand

__all__ = ["FIRST_SYNC_DELAY_S", "SYNC_PERIOD_S", "SlaveSynchronize"]

log = logging.getLogger(__name__)

FIRST_SYNC_DELAY_S = 3.0
SYNC_PERIOD_S = 10.0


class SlaveSynchronize:
    def __init__(self, client: RemotingClient, timeout_s: float, topics: TopicConfigManager,
                 offsets: ConsumerOffsetManager, groups: SubscriptionGroupManager,
                 replace_delay_offsets: Callable[[str], None], own_addr: Callable[[], str]) -> None:
        self._client = client
        self._timeout = timeout_s
        self._topics = topics
        self._offsets = offsets
        self._groups = groups
        self._replace_delay_offsets = replace_delay_offsets
        self._own_addr = own_addr
        self.master_addr: str | None = None

    async def run(self) -> None:
        await asyncio.sleep(FIRST_SYNC_DELAY_S)
        while True:
            await self.sync_all()
            await asyncio.sleep(SYNC_PERIOD_S)

    async def sync_all(self) -> bool:
        """One round of the four; True when the master answered all of them."""
        master = self.master_addr
        if not master or master == self._own_addr():
            return False
        loop = asyncio.get_running_loop()
        ok = True
        for code, what, take in (
            (RequestCode.GET_ALL_TOPIC_CONFIG, "topic configs", self._take_topics),
            (RequestCode.GET_ALL_CONSUMER_OFFSET, "consumer offsets", self._take_offsets),
            (RequestCode.GET_ALL_DELAY_OFFSET, "delay offsets", self._take_delay_offsets),
            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscription groups", self._take_groups),
        ):
            try:
                body = await self._ask(master, code, optional=code == RequestCode.GET_ALL_DELAY_OFFSET)
                await loop.run_in_executor(None, take, body)
            except (LakeMQError, OSError, ValueError) as exc:
                log.warning("slave sync of %s from master %s failed: %s", what, master, exc)
                ok = False
        return ok

    async def _ask(self, master: str, code: int, *, optional: bool = False) -> bytes:
        response = await self._client.invoke(master, RemotingCommand.request(code), self._timeout)
        if optional and response.code == ResponseCode.SYSTEM_ERROR:
            return b""  # a Java master without delayOffset.json answers "No delay offset in this broker"
        if response.code != ResponseCode.SUCCESS:
            raise LakeMQError(f"code {response.code}: {response.remark}")
        return bytes(response.body or b"")

    @staticmethod
    def _json(body: bytes) -> dict[str, Any]:
        data = fastjson.loads(body)  # a Java master writes fastjson's bare integer keys
        if not isinstance(data, dict):
            raise FrameError("the body is not a JSON object")
        return data

    def _take_topics(self, body: bytes) -> None:
        if self._topics.replace_from_master(self._json(body)):
            log.info("slave: topic configs updated from master %s", self.master_addr)

    def _take_offsets(self, body: bytes) -> None:
        self._offsets.put_from_master(self._json(body))

    def _take_delay_offsets(self, body: bytes) -> None:
        if body:  # a master without the file answers nothing
            self._replace_delay_offsets(body.decode("utf-8"))

    def _take_groups(self, body: bytes) -> None:
        if self._groups.replace_from_master(self._json(body)):
            log.info("slave: subscription groups updated from master %s", self.master_addr)
