"""A slave's copy of its master's metadata (RocketMQ's SlaveSynchronize): every 10 s (the
first 3 s after start) it asks the master for its topic configs, consumer offsets, delay
offsets and subscription groups with RocketMQ's own request codes, and takes them:

- topics and groups replace the slave's when the master's data version differs;
- each consumer offset the master holds replaces the slave's (offsets committed to the slave
  while the master was away stay until the master has that topic@group again);
- delay offsets replace the slave's delayOffset.json.

Between those rounds, every half second, it asks a lakemq master for the consumer offsets committed
since its last ask (LAKEMQ_GET_CONSUMER_OFFSET_CHANGES), so a failover re-delivers at most the
last second's messages; a master that does not know the code (Apache RocketMQ's) is not asked
again. A topic the slave learned from its replicated log (TopicConfigManager.learn_queues) makes
it ask for the master's topic configs at the next second, for their exact queue counts.

The master's address is the one the NameServer answers the slave's registration with; with
none (the master is down) nothing is asked. Files are written in the default executor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfigManager
from lakemq.common.aio import wait_event
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import FrameError, LakeMQError
from lakemq.remoting import fastjson
from lakemq.remoting.client import RemotingClient
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.headers import ConsumerOffsetChangesHeader, decode_header, encode_header
from lakemq.store.consume_queue_store import ConsumeQueueStore

__all__ = ["FIRST_SYNC_DELAY_S", "OFFSET_SYNC_PERIOD_S", "SYNC_PERIOD_S", "SlaveSynchronize"]

log = logging.getLogger(__name__)

FIRST_SYNC_DELAY_S = 3.0
SYNC_PERIOD_S = 10.0
OFFSET_SYNC_PERIOD_S = 0.5  # a commit is on the slave within a second, poll and answer included


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
        # The fast offset sync's place in the master's numbering of its commits.
        self._offsets_of: tuple[str, str, int] = ("", "", 0)  # (master, epoch, seq)
        self._no_offset_changes: str | None = None  # a master that does not know the request
        self._offsets_failing = ""  # the last failure, logged once rather than at every ask
        self._soon = asyncio.Event()
        self._topics_wanted = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def learn_from(self, queues: ConsumeQueueStore) -> None:
        """Serve every topic the replicated log holds: those its ConsumeQueues have now, and
        each queue dispatch makes from here on (on the dispatching thread, before the queue's
        first entry is written), without waiting for the master's config."""
        queues.on_queue_created = self._learn
        if self._topics.learn_queues((cq.topic, cq.queue_id) for cq in queues.all()):
            self.topics_soon()

    def _learn(self, topic: str, queue_id: int) -> None:
        if self._topics.learn_queues([(topic, queue_id)]):
            self.topics_soon()

    def topics_soon(self) -> None:
        """Ask for the master's topic configs within a second (any thread)."""
        self._topics_wanted = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._soon.set)

    async def run(self) -> None:
        """One loop, so a full round's offsets are never older than the changes before it."""
        self._loop = asyncio.get_running_loop()
        next_full = time.monotonic() + FIRST_SYNC_DELAY_S
        while True:
            self._soon.clear()
            if time.monotonic() >= next_full:
                self._topics_wanted = False
                await self.sync_all()
                next_full = time.monotonic() + SYNC_PERIOD_S
            else:
                if self._topics_wanted:
                    self._topics_wanted = False
                    await self._sync(RequestCode.GET_ALL_TOPIC_CONFIG, "topic configs", self._take_topics)
                await self.sync_offset_changes()
            await wait_event(self._soon, min(OFFSET_SYNC_PERIOD_S, max(0.0, next_full - time.monotonic())))

    async def sync_offset_changes(self) -> bool:
        """The consumer offsets committed on the master since the last ask; False when the
        master is unknown, did not answer, or does not know the request."""
        master = self.master_addr
        if not master or master == self._own_addr() or master == self._no_offset_changes:
            return False
        known, epoch, seq = self._offsets_of
        if known != master:
            epoch, seq = "", 0
        request = RemotingCommand.request(RequestCode.LAKEMQ_GET_CONSUMER_OFFSET_CHANGES,
                                          encode_header(ConsumerOffsetChangesHeader(epoch, seq)))
        try:
            response = await self._client.invoke(master, request, self._timeout)
            if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                log.info("master %s does not send offset changes; its offsets come every %.0f s", master,
                         SYNC_PERIOD_S)
                self._no_offset_changes = master
                return False
            if response.code != ResponseCode.SUCCESS:
                raise LakeMQError(f"code {response.code}: {response.remark}")
            now = decode_header(ConsumerOffsetChangesHeader, response)
            wrapper = self._json(bytes(response.body or b"{}"))
            await asyncio.get_running_loop().run_in_executor(None, self._offsets.put_changes_from_master, wrapper)
        except (LakeMQError, OSError, ValueError) as exc:
            failing = f"{master}: {exc}"
            if failing != self._offsets_failing:
                log.warning("slave sync of consumer offset changes from master %s failed: %s", master, exc)
            self._offsets_failing = failing
            return False
        self._offsets_failing = ""
        self._offsets_of = (master, now.epoch, now.seq)
        return True

    async def sync_all(self) -> bool:
        """One round of the four; True when the master answered all of them."""
        master = self.master_addr
        if not master or master == self._own_addr():
            return False
        results = [await self._sync(code, what, take) for code, what, take in (
            (RequestCode.GET_ALL_TOPIC_CONFIG, "topic configs", self._take_topics),
            (RequestCode.GET_ALL_CONSUMER_OFFSET, "consumer offsets", self._take_offsets),
            (RequestCode.GET_ALL_DELAY_OFFSET, "delay offsets", self._take_delay_offsets),
            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscription groups", self._take_groups),
        )]
        return all(results)

    async def _sync(self, code: int, what: str, take: Callable[[bytes], None]) -> bool:
        master = self.master_addr
        if not master or master == self._own_addr():
            return False
        try:
            body = await self._ask(master, code, optional=code == RequestCode.GET_ALL_DELAY_OFFSET)
            await asyncio.get_running_loop().run_in_executor(None, take, body)
        except (LakeMQError, OSError, ValueError) as exc:
            log.warning("slave sync of %s from master %s failed: %s", what, master, exc)
            return False
        return True

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
