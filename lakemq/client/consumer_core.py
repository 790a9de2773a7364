"""What the pull and push consumers share: the client instance, the offset store of the
message model, the pull API, and queue/offset look-ups on the brokers."""

from __future__ import annotations

import logging
from dataclasses import replace

from lakemq.client.client_instance import ClientInstance
from lakemq.client.config import ClientConfig, ConsumerConfig, MessageModel
from lakemq.client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from lakemq.client.pull_api import PullAPI
from lakemq.client.route import subscribe_queues
from lakemq.common.message_queue import MessageQueue
from lakemq.common.validation import check_group
from lakemq.errors import LakeMQError

__all__ = ["ConsumerCore", "retry_topic"]

log = logging.getLogger(__name__)


def retry_topic(group: str) -> str:
    return f"%RETRY%{group}"


class ConsumerCore:
    def __init__(self, group: str, config: ConsumerConfig | None, client_config: ClientConfig | None,
                 namesrv_addr: str | None) -> None:
        self.group = check_group(group)
        self.config = replace(config or ConsumerConfig(), consumer_group=group)
        client = client_config or ClientConfig()
        self.client_config = replace(client, namesrv_addr=namesrv_addr) if namesrv_addr else client
        self._instance: ClientInstance | None = None
        self._offset_store: OffsetStore | None = None
        self._pull_api: PullAPI | None = None

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise LakeMQError(f"consumer {self.group} is not started")
        return self._instance

    @property
    def offset_store(self) -> OffsetStore:
        if self._offset_store is None:
            raise LakeMQError(f"consumer {self.group} is not started")
        return self._offset_store

    @property
    def pull_api(self) -> PullAPI:
        if self._pull_api is None:
            raise LakeMQError(f"consumer {self.group} is not started")
        return self._pull_api

    @property
    def started(self) -> bool:
        return self._instance is not None

    async def open(self, member: object) -> ClientInstance:
        instance = ClientInstance.acquire(self.client_config)
        instance.register_consumer(member)  # type: ignore[arg-type]
        self._instance = instance
        if self.config.message_model is MessageModel.BROADCASTING:
            self._offset_store = LocalFileOffsetStore(instance.client_id, self.group, self.config.offsets_dir or None)
        else:
            self._offset_store = RemoteBrokerOffsetStore(self, self.group)
        self._pull_api = PullAPI(instance, self.group)
        try:
            await self._offset_store.load()
            await instance.start()
        except BaseException:
            instance.consumers.pop(self.group, None)
            self._instance = None
            raise
        return instance

    async def close(self) -> None:
        instance, self._instance = self._instance, None
        if instance is None:
            return
        await instance.unregister(consumer_group=self.group)
        await instance.release()

    # -- OffsetBroker for the remote store --------------------------------------------
    # Offsets and queue bounds are read from the master, or a slave while the master is away.
    async def query_consumer_offset(self, mq: MessageQueue, group: str) -> int:
        addr = await self.instance.broker_addr(mq.broker_name, mq.topic, master_only=False)
        return await self.instance.api.query_consumer_offset(addr, mq, group)

    async def update_consumer_offset(self, mq: MessageQueue, group: str, offset: int) -> None:
        addr = await self.instance.broker_addr(mq.broker_name, mq.topic, master_only=False)
        await self.instance.api.update_consumer_offset(addr, mq, group, offset)

    # -- look-ups ---------------------------------------------------------------------
    async def subscribe_queues(self, topic: str, *, refresh: bool = False) -> list[MessageQueue]:
        route = None if refresh else self.instance.routes.get(topic)
        route = route or await self.instance.update_route(topic)
        if route is None:
            raise LakeMQError(f"topic {topic} does not exist")
        return subscribe_queues(topic, route)

    async def max_offset(self, mq: MessageQueue) -> int:
        addr = await self.instance.broker_addr(mq.broker_name, mq.topic, master_only=False)
        return await self.instance.api.get_max_offset(addr, mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        addr = await self.instance.broker_addr(mq.broker_name, mq.topic, master_only=False)
        return await self.instance.api.get_min_offset(addr, mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        addr = await self.instance.broker_addr(mq.broker_name, mq.topic, master_only=False)
        return await self.instance.api.search_offset(addr, mq, timestamp_ms)
