"""ClientInstance: what the producers and consumers of one client id share (RocketMQ's
MQClientInstance): the connections, the route table, and the background duties.

Duties, each its own task: refresh the routes of every topic in use from the name server
(every 30 s, and at once on a miss), heartbeat to every broker (every 30 s), rebalance
every consumer (every 20 s, and at once when a broker sends NOTIFY_CONSUMER_IDS_CHANGED),
persist consumer offsets (every 5 s). Instances are shared per (client id, event loop) and
closed when the last member leaves.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Protocol

from lakemq.client.acl import rpc_hook_for
from lakemq.client.client_api import MQClientAPI
from lakemq.client.config import ClientConfig
from lakemq.common.aio import wait_event
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.constants import MASTER_ID
from lakemq.errors import BrokerError, LakeMQError, RemotingError
from lakemq.remoting import RemotingClient, RemotingCommand, RequestContext
from lakemq.remoting.bodies import BrokerData, ConsumerData, HeartbeatData, TopicRouteData

__all__ = ["ClientInstance", "ConsumerMember", "ProducerMember"]

log = logging.getLogger(__name__)


class ProducerMember(Protocol):
    group: str

    def publish_topics(self) -> list[str]: ...

    def on_route(self, topic: str, route: TopicRouteData) -> None: ...


class ConsumerMember(Protocol):
    group: str

    def subscribed_topics(self) -> list[str]: ...

    def on_route(self, topic: str, route: TopicRouteData) -> None: ...

    def consumer_data(self) -> ConsumerData: ...

    async def do_rebalance(self) -> None: ...

    async def persist_offsets(self) -> None: ...


# Per event loop (an instance's connections and tasks belong to one loop), then per client id.
_INSTANCES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, ClientInstance]] = \
    weakref.WeakKeyDictionary()


class ClientInstance:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.client_id = config.client_id
        self.remoting = RemotingClient(namesrv_addrs=config.namesrv_addrs)
        self.api = MQClientAPI(self.remoting, config.mq_client_api_timeout, rpc_hook_for(config))
        self.routes: dict[str, TopicRouteData] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.producers: dict[str, ProducerMember] = {}
        self.consumers: dict[str, ConsumerMember] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_wakeup = asyncio.Event()
        self._route_lock = asyncio.Lock()
        self._started = False
        self._leaving = 0  # members whose unregister calls are still in flight

    # -- sharing ----------------------------------------------------------------------
    @classmethod
    def acquire(cls, config: ClientConfig) -> ClientInstance:
        instances = _INSTANCES.setdefault(asyncio.get_running_loop(), {})
        instance = instances.get(config.client_id)
        if instance is None or instance.config != config:
            instance = instances[config.client_id] = cls(config)
        return instance

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.remoting.register_processor(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, _NotifyIdsChanged(self))
        for period, duty in (
            (self.config.poll_name_server_interval, self.refresh_all_routes),
            (self.config.heartbeat_broker_interval, self.send_heartbeat_to_all),
            (self.config.persist_consumer_offset_interval, self.persist_all_offsets),
        ):
            self._tasks.append(asyncio.create_task(self._every(period, duty), name=f"lakemq-{duty.__name__}"))
        self._tasks.append(asyncio.create_task(self._rebalance_loop(), name="lakemq-rebalance"))

    async def release(self) -> None:
        """Called by a member on shutdown; the last one out closes the instance. A member still
        telling the brokers it leaves counts as in: it releases after its calls end."""
        if self.producers or self.consumers or self._leaving:
            return
        for task in self._tasks:
            task.cancel()
        # The duties' own ends (cancelled, or a failure) are returned, not raised; a
        # cancellation of release() itself still propagates.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.remoting.shutdown()
        self._started = False
        for instances in _INSTANCES.values():
            if instances.get(self.client_id) is self:
                del instances[self.client_id]

    # -- membership ---------------------------------------------------------------------
    def register_producer(self, producer: ProducerMember) -> None:
        if producer.group in self.producers:
            raise LakeMQError(f"producer group {producer.group} is already started in client {self.client_id}")
        self.producers[producer.group] = producer

    def register_consumer(self, consumer: ConsumerMember) -> None:
        if consumer.group in self.consumers:
            raise LakeMQError(f"consumer group {consumer.group} is already started in client {self.client_id}")
        self.consumers[consumer.group] = consumer

    async def unregister(self, *, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        """Leave the group on every broker so the others rebalance at once."""
        if producer_group:
            self.producers.pop(producer_group, None)
        if consumer_group:
            self.consumers.pop(consumer_group, None)
        self._leaving += 1
        try:
            for broker in list(self.brokers.values()):
                for addr in broker.broker_addrs.values():
                    try:
                        await self.api.unregister_client(addr, self.client_id, producer_group=producer_group,
                                                         consumer_group=consumer_group)
                    except (RemotingError, BrokerError) as exc:
                        log.warning("unregister %s from %s failed: %s", self.client_id, addr, exc)
        finally:
            self._leaving -= 1

    # -- routes -----------------------------------------------------------------------
    async def update_route(self, topic: str) -> TopicRouteData | None:
        """Fetch ``topic``'s route, remember it and tell the members; None if unknown.

        A route that names a broker this client has not met (a topic created after its
        consumer started) is followed at once by a heartbeat, so that broker knows the
        consumer groups before a rebalance asks it for their members, and by a rebalance."""
        async with self._route_lock:
            route = await self.api.get_topic_route(topic)
            if route is None:
                return None
            self.routes[topic] = route
            met = [b.broker_name for b in route.broker_datas if b.broker_name not in self.brokers]
            for broker in route.broker_datas:
                self.brokers[broker.broker_name] = broker
        members: list[ProducerMember | ConsumerMember] = [*self.producers.values(), *self.consumers.values()]
        for member in members:
            member.on_route(topic, route)
        if met and self.consumers:
            await self.send_heartbeat_to_all()
            self.wake_rebalance()
        return route

    async def refresh_all_routes(self) -> None:
        topics = {t for p in self.producers.values() for t in p.publish_topics()}
        topics |= {t for c in self.consumers.values() for t in c.subscribed_topics()}
        for topic in sorted(topics):
            try:
                await self.update_route(topic)
            except (RemotingError, BrokerError) as exc:
                log.warning("route refresh of %s failed: %s", topic, exc)

    def find_broker_addr(self, broker_name: str, *, master_only: bool = True) -> str | None:
        broker = self.brokers.get(broker_name)
        if broker is None:
            return None
        return broker.master_addr if master_only else broker.select_addr()

    def find_broker_addr_in_subscribe(self, broker_name: str, broker_id: int) -> tuple[str, bool] | None:
        """Where to pull from (RocketMQ's findBrokerAddressInSubscribe): broker ``broker_id``
        of the group, a slave's next id when that slave is gone, else any member (the master
        may be down: a slave serves reads). Returns (address, is a slave)."""
        broker = self.brokers.get(broker_name)
        if broker is None or not broker.broker_addrs:
            return None
        addrs = broker.broker_addrs
        for candidate in (broker_id, broker_id + 1) if broker_id != MASTER_ID else (broker_id,):
            if candidate in addrs:
                return addrs[candidate], candidate != MASTER_ID
        any_id = min(addrs)
        return addrs[any_id], any_id != MASTER_ID

    async def broker_addr(self, broker_name: str, topic: str, *, master_only: bool = True) -> str:
        """The address of ``broker_name``, refreshing ``topic``'s route once on a miss."""
        addr = self.find_broker_addr(broker_name, master_only=master_only)
        if addr is None:
            await self.update_route(topic)
            addr = self.find_broker_addr(broker_name, master_only=master_only)
        if addr is None:
            raise LakeMQError(f"broker {broker_name} of topic {topic} is not in the route")
        return addr

    async def any_broker_addr(self, topic: str) -> str:
        route = self.routes.get(topic) or await self.update_route(topic)
        for broker in (route.broker_datas if route else ()):
            addr = broker.select_addr()
            if addr:
                return addr
        raise LakeMQError(f"topic {topic} has no broker")

    # -- heartbeats -------------------------------------------------------------------
    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(self.client_id, tuple(sorted(self.producers)),
                             tuple(c.consumer_data() for _, c in sorted(self.consumers.items())))

    async def send_heartbeat_to_all(self) -> None:
        if not self.producers and not self.consumers:
            return
        data = self.heartbeat_data()
        for broker in list(self.brokers.values()):
            for broker_id, addr in sorted(broker.broker_addrs.items()):
                if broker_id != 0 and not self.consumers:
                    continue  # producers only talk to masters
                try:
                    await self.api.heartbeat(addr, data)
                except (RemotingError, BrokerError) as exc:
                    log.warning("heartbeat to %s (%s) failed: %s", broker.broker_name, addr, exc)

    # -- rebalance and offsets --------------------------------------------------------
    def wake_rebalance(self) -> None:
        self._rebalance_wakeup.set()

    async def rebalance_all(self) -> None:
        for consumer in list(self.consumers.values()):
            try:
                await consumer.do_rebalance()
            except (LakeMQError, OSError) as exc:
                log.warning("rebalance of %s failed: %s", consumer.group, exc)

    async def persist_all_offsets(self) -> None:
        for consumer in list(self.consumers.values()):
            await consumer.persist_offsets()

    async def _every(self, period_ms: int, duty: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(period_ms / 1000)
            await self._survive(duty)

    async def _rebalance_loop(self) -> None:
        while True:
            await wait_event(self._rebalance_wakeup, self.config.rebalance_interval / 1000)
            self._rebalance_wakeup.clear()
            await self._survive(self.rebalance_all)

    @staticmethod
    async def _survive(duty: Callable[[], Awaitable[None]]) -> None:
        """A background duty logs its failure and runs again next period, whatever broke."""
        try:
            await duty()
        except (LakeMQError, OSError) as exc:
            log.warning("%s failed: %s", duty.__name__, exc)
        except Exception:
            log.exception("%s failed unexpectedly", duty.__name__)


class _NotifyIdsChanged:
    """A broker saw a consumer of one of our groups join or leave: rebalance now."""

    def __init__(self, instance: ClientInstance) -> None:
        self._instance = instance

    def reject_request(self) -> bool:
        return False

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand | None:
        log.info("broker %s says consumer ids of %s changed", ctx.remote_addr, request.ext_fields.get("consumerGroup"))
        self._instance.wake_rebalance()
        return None if request.is_oneway else request.reply(ResponseCode.SUCCESS)
