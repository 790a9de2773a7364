"""BrokerController: builds a broker from its configs and runs its life cycle.

Start: bind the remoting server (a ``listenPort`` of 0 picks a free port, whose number then
goes into message ids and the registration), load the persisted topic / offset / group
tables and the store (recovery), register every processor (lakemq.broker.processor_wiring),
start RocketMQ 5's gRPC front door when ``grpcListenPort`` is set (lakemq.broker.grpc, over
the same processors), start the background tasks (consumer offsets persisted every
``flushConsumerOffsetInterval``, client housekeeping, NameServer registration every
``registerNameServerPeriod``, transaction check-backs every ``transactionCheckInterval``)
and register with all NameServers.
Until loading is done every request is answered SERVICE_NOT_AVAILABLE.

Replication (lakemq.broker.ha, docs/REPLICATION.md): every broker listens for slaves on
its HA port and registers that address; a SLAVE also follows its master (the configured
``haMasterAddress``, else the HA address the NameServer answers its registration with) and
syncs the master's topics, offsets and groups. A slave runs no transaction checks and
delivers no delayed messages: its master does.

Shutdown (SIGTERM in the CLI): unregister from the NameServers, stop the gRPC front door (its
calls get a second to finish), stop accepting, answer held
pulls, stop replication, persist offsets and groups, then shut the store down (flush,
checkpoint, abort file removed) so the next start recovers normally.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from lakemq.broker.broker_outer_api import (
    BrokerIdentity,
    BrokerOuterAPI,
    ConsumerIdsChangeNotifier,
    Registration,
)
from lakemq.broker.business_pool import BusinessPool
from lakemq.broker.config import BrokerConfig
from lakemq.broker.consumer_manager import ConsumerManager
from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.ha.catch_up import MasterCatchUp, slave_ends
from lakemq.broker.ha.config import HaConfig, check_role
from lakemq.broker.ha.master import HaServer
from lakemq.broker.ha.progress import ReplicationProgress
from lakemq.broker.ha.roster import SlaveRoster, listed_slaves
from lakemq.broker.ha.slave import HaClient
from lakemq.broker.ha.slave_sync import SlaveSynchronize
from lakemq.broker.loop_lag import LoopLagProbe
from lakemq.broker.metrics import BrokerMetrics
from lakemq.broker.metrics_collector import BrokerState, BrokerStateCollector
from lakemq.broker.pop import PopService
from lakemq.broker.processor.send_processor import SendMessageProcessor
from lakemq.broker.processor_wiring import grpc_front_door as start_grpc_front_door
from lakemq.broker.processor_wiring import processor_registry, register_processors
from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.pull_request_hold_service import PullRequestHoldService
from lakemq.broker.rebalance_lock_manager import RebalanceLockManager
from lakemq.broker.runtime_info import runtime_info
from lakemq.broker.runtime_stats import RuntimeStats
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfig, TopicConfigManager
from lakemq.broker.transaction import TransactionalMessageCheckService
from lakemq.broker.unconsumed import unconsumed_losses
from lakemq.common.aio import wait_event
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.metrics_http import MetricsServer, metrics_port_for, start_metrics_server
from lakemq.errors import StoreError
from lakemq.remoting.client import RemotingClient, RemotingClientConfig
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.protocol import RemotingConnection
from lakemq.remoting.server import RemotingServer, ServerConfig
from lakemq.store.config import BrokerRole, FlushDiskType, StoreConfig
from lakemq.store.message_store import MessageStore

if TYPE_CHECKING:  # grpcio is imported only by a broker with a grpcListenPort
    from lakemq.broker.grpc.server import GrpcServer

__all__ = ["BrokerController"]

log = logging.getLogger(__name__)


class _Unavailable:
    """The default processor: SERVICE_NOT_AVAILABLE while starting, then unknown codes."""

    def __init__(self) -> None:
        self.started = False

    def reject_request(self) -> bool:
        return False

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        if not self.started:
            return request.reply(ResponseCode.SERVICE_NOT_AVAILABLE, "broker is starting, try later")
        try:
            name = RequestCode(request.code).name
        except ValueError:
            name = "unknown"
        return request.reply(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f"request code {request.code} ({name}) not supported by lakemq's broker",
        )


class BrokerController:
    def __init__(self, broker_config: BrokerConfig, store_config: StoreConfig,
                 ha_config: HaConfig | None = None) -> None:
        broker_config = check_role(broker_config, store_config)
        self.broker_config = broker_config
        self.store_config = store_config
        self.ha_config = ha_config or HaConfig()
        self.role = store_config.broker_role
        self.replication = ReplicationProgress(lambda: self.store.get_max_phy_offset() if self.store else 0)
        self.ha_server: HaServer | None = None
        self.ha_client: HaClient | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self.ha_server_addr = ""
        config_dir = store_config.config_dir
        self.topic_config_manager = TopicConfigManager(broker_config, config_dir)
        self.consumer_offset_manager = ConsumerOffsetManager(config_dir)
        self.subscription_group_manager = SubscriptionGroupManager(broker_config, config_dir)
        self.producer_manager = ProducerManager(broker_config.channel_expired_timeout)
        self.rebalance_lock_manager = RebalanceLockManager(broker_config.rebalance_lock_max_live_time)
        self.remoting_server = RemotingServer(
            ServerConfig(listen_host=broker_config.broker_ip1, listen_port=broker_config.listen_port,
                         backlog=broker_config.server_socket_backlog,
                         extra_ports=(broker_config.fast_port,) if broker_config.fast_port is not None else ())
        )
        self.remoting_client = RemotingClient(RemotingClientConfig())
        self.outer_api = BrokerOuterAPI(
            self.remoting_client,
            broker_config.namesrv_addr,
            broker_config.register_broker_timeout_mills / 1000,
        )
        self.store: MessageStore | None = None
        self.consumer_manager: ConsumerManager | None = None
        self.hold_service: PullRequestHoldService | None = None
        self.transaction_check_service: TransactionalMessageCheckService | None = None
        self.pop_service: PopService | None = None  # a master's (a slave's journal is its master's)
        self._send_processor: SendMessageProcessor | None = None
        self.grpc_server: GrpcServer | None = None  # the RocketMQ 5 front door (grpcListenPort)
        self.send_pool = BusinessPool(
            "SendMessageThread",
            broker_config.send_message_thread_pool_nums,
            broker_config.send_thread_pool_queue_capacity,
            broker_config.wait_time_mills_in_send_queue if broker_config.broker_fast_failure_enable else None,
        )
        self.pull_pool = BusinessPool(
            "PullMessageThread",
            broker_config.pull_message_thread_pool_nums,
            broker_config.pull_thread_pool_queue_capacity,
            broker_config.wait_time_mills_in_pull_queue if broker_config.broker_fast_failure_enable else None,
        )
        self.metrics = BrokerMetrics(broker_config.broker_name)
        tiering_lag = None
        if broker_config.lake_uri:
            # Imported only with a lake: the tiering code pulls in Delta and pyarrow.
            from lakemq.broker.tiering_lag import TieringLagProbe

            tiering_lag = TieringLagProbe(broker_config.lake_uri, broker_config.broker_name, lambda: self.store).lag
        self.metrics.registry.register(BrokerStateCollector(BrokerState(
            broker_config.broker_name,
            lambda: self.store,
            self.consumer_offset_manager,
            lambda: self.hold_service.held_count if self.hold_service is not None else 0,
            (self.send_pool, self.pull_pool),
            lambda: self.transaction_check_service.checks_sent if self.transaction_check_service else 0,
            tiering_lag,
            self.replication,
            lambda: self.ha_client,
        )))
        self.metrics_server: MetricsServer | None = None
        self._executors: list[ThreadPoolExecutor] = []
        self._default = _Unavailable()
        self._tasks: list[asyncio.Task[None]] = []
        self._register_soon: asyncio.Event | None = None
        # Topics created or changed since they were last registered (from pool threads).
        self._changed_topics: set[str] = set()
        self._changed_lock = threading.Lock()
        self._increments = itertools.count(1)  # numbers the incremental registrations
        self._loop: asyncio.AbstractEventLoop | None = None
        self.boot_timestamp = int(time.time() * 1000)
        self.broker_addr = broker_config.broker_addr
        self.runtime_stats = RuntimeStats(self.metrics.sends.total_messages, self._got_total)
        self.loop_lag = LoopLagProbe(broker_config.broker_name)
        self.metrics.registry.register(self.loop_lag)

    # -- life cycle --------------------------------------------------------------------

    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        c = self.broker_config
        registry = processor_registry(c, self.remoting_server)
        registry.register_default_processor(self._default)
        await self.remoting_server.start()
        self.broker_addr = f"{c.broker_ip1}:{self.remoting_server.port}"
        metrics_port = metrics_port_for(c.metrics_port, self.remoting_server.port if c.listen_port else 0)
        if metrics_port is not None:
            self.metrics_server = start_metrics_server(self.metrics.registry, c.broker_ip1, metrics_port)
        self.store = MessageStore(self.store_config, store_host=self.broker_addr)
        self.store.set_flush_listener(self.metrics.record_flush)
        offsets = self.consumer_offset_manager
        self.store.set_unconsumed_judge(lambda ranges, unread: unconsumed_losses(offsets, ranges, unread))
        if c.lake_uri:
            from lakemq.tiering.lake_fs import LakeLocation
            from lakemq.tiering.retention import retention_guard

            # Expiry deletes only CommitLog files the lake verifiably holds.
            self.store.set_retention_guard(retention_guard(LakeLocation.of(c.lake_uri), c.broker_name))
        await loop.run_in_executor(None, self._load)
        await self._start_replication()
        self.consumer_manager = ConsumerManager(
            ConsumerIdsChangeNotifier(loop, c.notify_consumer_ids_changed_enable), c.channel_expired_timeout
        )
        self.hold_service = PullRequestHoldService(
            self.store.get_max_offset_in_queue, c.pull_hold_check_interval_mills / 1000
        )
        self.hold_service.start()
        self.store.message_arriving_listeners.append(self.hold_service.notify_messages_arriving)
        # The loop dispatches its own puts, one pass per turn of the loop that put something:
        # the reput thread then neither wakes nor takes the GIL per send, and held pulls are
        # woken right here without a hand-off between threads.
        store = self.store

        def dispatch_soon() -> None:
            loop.call_soon(store.dispatch)

        self.store.dispatch_inline(dispatch_soon)
        if self.role.is_master:
            self.pop_service = PopService(
                self.store, self.topic_config_manager, self.subscription_group_manager, self.consumer_offset_manager,
                cluster=c.broker_cluster_name, broker_name=c.broker_name,
                snapshot_path=self.store_config.config_dir / "popState.json")
            await self.pop_service.start()
        wired = register_processors(
            registry, self, executor=self._executor, register_broker=self._register_broker_blocking,
            apply_broker_config=self._apply_broker_config, loop=loop)
        self._send_processor, self.transaction_check_service = wired.send, wired.transaction_checks
        if c.grpc_listen_port:
            self.grpc_server = start_grpc_front_door(self, wired)
            await self.grpc_server.start()
        self.remoting_server.add_close_listener(self._on_connection_closed)
        register_soon = self._register_soon = asyncio.Event()

        def topic_changed(tc: TopicConfig) -> None:  # called from pool threads
            with self._changed_lock:
                self._changed_topics.add(tc.topic_name)
            loop.call_soon_threadsafe(register_soon.set)

        self.topic_config_manager.on_change.append(topic_changed)
        self._default.started = True
        accepted = (await self.register_broker_all()).accepted  # routes exist once start() returns
        self._tasks = [
            loop.create_task(
                self._every(c.flush_consumer_offset_interval, self._persist_offsets), name="persist-offsets"
            ),
            loop.create_task(
                self._every(c.client_housekeeping_interval, self._scan_clients), name="client-housekeeping"
            ),
            loop.create_task(self._register_periodically(), name="register-broker"),
            loop.create_task(self.runtime_stats.run(), name="runtime-stats"),
            loop.create_task(self.loop_lag.run(), name="loop-lag"),
        ]
        if self.transaction_check_service is not None and self.role.is_master:
            self._tasks.append(loop.create_task(self.transaction_check_service.run(), name="transaction-check"))
        if self.slave_sync is not None:
            self._tasks.append(loop.create_task(self.slave_sync.run(), name="slave-sync"))
        log.info(
            "broker %s (%s, %s id %d, cluster %s) started; registered with %d of name servers %s",
            c.broker_name,
            self.broker_addr,
            self.role.name,
            c.broker_id,
            c.broker_cluster_name,
            accepted,
            ";".join(c.namesrv_addr),
        )

    def _load(self) -> None:
        assert self.store is not None
        self.topic_config_manager.load()
        self.consumer_offset_manager.load()
        self.subscription_group_manager.load()
        if not self.store.load():
            raise StoreError(f"the store under {self.store_config.store_path_root_dir} could not be loaded")
        # An ASYNC_FLUSH SYNC_MASTER back from a crash may lack acknowledged messages its slave
        # holds: no put until a slave reported (lakemq.broker.ha.catch_up).
        self.store.start(hold_puts="waiting for a slave's offset after an abnormal exit" if self._holds_puts() else None)

    def _holds_puts(self) -> bool:
        assert self.store is not None
        return (self.store_config.broker_role is BrokerRole.SYNC_MASTER and not self.store.last_exit_ok
                and self.store_config.flush_disk_type is FlushDiskType.ASYNC_FLUSH)

    async def _start_replication(self) -> None:
        """The HA listener (every role), and a slave's link to its master and metadata sync."""
        assert self.store is not None
        c = self.broker_config
        # A SYNC_FLUSH master ships only what it synced (docs/REPLICATION.md, "a slave ahead of
        # its master"); a slave's listener serves what replication appended, flushed or not.
        flushed_only = self.role.is_master and self.store_config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        catch_up = roster = None
        client, names, timeout = self.remoting_client, c.namesrv_addr, c.register_broker_timeout_mills / 1000
        if self.store_config.broker_role is BrokerRole.SYNC_MASTER and \
                self.store_config.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            # The slaves a crash must not make it forget (lakemq.broker.ha.roster).
            roster = SlaveRoster(self.store_config.config_dir / "haSlaves.json",
                                 lambda: listed_slaves(client, names, c.broker_name, timeout))
        if self.store.puts_held:
            assert roster is not None
            recorded = roster
            catch_up = MasterCatchUp(self.store, self.ha_config, lambda: slave_ends(
                client, names, c.broker_name, timeout, recorded.ids))
        self.ha_server = HaServer(self.store, self.ha_config, self.replication, c.ha_host,
                                  self.ha_config.listen_port(c.listen_port), flushed_only=flushed_only,
                                  catch_up=catch_up, roster=roster)
        await self.ha_server.start()
        self.ha_server_addr = self.ha_server.address
        self.store.message_arriving_listeners.append(self.ha_server.notify_threadsafe)
        if flushed_only:  # what a flush made durable may be shipped at once
            record_flush, ha_server = self.metrics.record_flush, self.ha_server

            def flushed(seconds: float, nbytes: int) -> None:
                record_flush(seconds, nbytes)
                ha_server.notify_flushed()

            self.store.set_flush_listener(flushed)
        replica_acks = self.store.commit_log.replica_acks
        if replica_acks is not None:  # SYNC_MASTER: what the slaves report acknowledges puts
            replica_acks.on_expect = self.ha_server.notify_threadsafe  # a waiting put is pushed at once
            self.replication.ack_listeners.append(replica_acks.acknowledged)
            self.replication.connection_listeners.append(replica_acks.slaves_changed)
        if self.role.is_master:
            return
        self.ha_client = HaClient(self.store, self.ha_config, self.ha_config.ha_master_address)
        self.ha_client.start()
        self.slave_sync = SlaveSynchronize(
            self.remoting_client, c.register_broker_timeout_mills / 1000, self.topic_config_manager,
            self.consumer_offset_manager, self.subscription_group_manager, self.store.schedule.replace_offsets,
            lambda: self.broker_addr)
        self.slave_sync.learn_from(self.store.consume_queues)  # a slave serves all it holds at once

    def _executor(self, name: str, threads: int) -> ThreadPoolExecutor:
        executor = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._executors.append(executor)
        return executor

    def _apply_broker_config(self, updated: BrokerConfig) -> None:
        """Put a BrokerConfig changed at run time (mqadmin updateBrokerConfig) in force; only
        its RUNTIME_KEYS differ, and these are the transaction check service's."""
        self.broker_config = updated
        checks = self.transaction_check_service
        if checks is not None:
            checks.transaction_timeout_ms = updated.transaction_time_out
            checks.check_interval_ms = updated.transaction_check_interval
            checks.check_max = updated.transaction_check_max

    def _got_total(self) -> int:
        """Messages returned to pulls since the broker started."""
        return self.metrics.gets.total_messages()

    async def shutdown(self) -> None:
        """Stop in the order that loses nothing; safe to call once after a failed start."""
        log.info("broker %s shutting down", self.broker_config.broker_name)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._default.started:
            await self.outer_api.unregister_broker_all(self.identity)
        if self.hold_service is not None:
            await self.hold_service.shutdown()
        if self.ha_client is not None:
            await self.ha_client.shutdown()
        if self.ha_server is not None:
            await self.ha_server.shutdown()
        if self.grpc_server is not None:
            await self.grpc_server.shutdown()
        await self.remoting_server.shutdown()
        if self.pop_service is not None:
            await self.pop_service.shutdown()
        await self.send_pool.shutdown()
        if self._send_processor is not None:
            self._send_processor.close()  # before the store: the loop stops watching its flushes
        await self.pull_pool.shutdown()
        for executor in self._executors:
            executor.shutdown(wait=True)
        await self.remoting_client.shutdown()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._persist_all)
        log.info("broker %s stopped", self.broker_config.broker_name)

    def _persist_all(self) -> None:
        if self._default.started:
            self.consumer_offset_manager.persist(force=True)
            self.subscription_group_manager.persist()
        if self.store is not None:
            self.store.shutdown()

    # -- background tasks --------------------------------------------------------------

    @property
    def identity(self) -> BrokerIdentity:
        c = self.broker_config
        return BrokerIdentity(c.broker_cluster_name, c.broker_name, self.broker_addr, c.broker_id,
                              self.ha_server_addr)

    async def register_broker_all(self) -> Registration:
        """Register with every NameServer now. A slave learns its master from the answer."""
        wrapper = self.topic_config_manager.encode()
        registration = await self.outer_api.register_broker_all(
            self.identity, wrapper["topicConfigTable"], self.topic_config_manager.data_version
        )
        if self.ha_client is not None and not self.ha_config.ha_master_address and registration.master_ha_addr:
            self.ha_client.update_master_address(registration.master_ha_addr)
        if self.slave_sync is not None and registration.accepted:
            self.slave_sync.master_addr = registration.master_addr
        return registration

    async def register_changed_topics(self, names: Collection[str] = ()) -> None:
        """Register only ``names`` (or, without them, the topics changed since their last
        registration), as RocketMQ's registerIncrementBrokerData does: the NameServer merges a
        master's topics into its routes, so a new retry topic costs one small body instead of
        the whole table (at 10,000 topics and 1,000 new groups, 1,000 registrations of 1.7 MB
        each timed out). A slave registers everything."""
        with self._changed_lock:
            if not names:
                names = self._changed_topics
                self._changed_topics = set()
            else:
                self._changed_topics -= set(names)
        if not self.role.is_master:
            await self.register_broker_all()
            return
        table = self.topic_config_manager.topic_configs()
        changed = {name: table[name].to_json() for name in names if name in table}  # a deleted one: not re-added
        if not changed:
            return
        # Each increment carries a version of its own (the NameServer skips a table whose
        # version it has: two increments read under one version would lose the second), and
        # one no whole table has (timestamp 0): the next periodic registration's whole table is
        # taken too, which also repairs a NameServer that restarted and saw an increment first.
        version = replace(self.topic_config_manager.data_version, timestamp=0, counter=next(self._increments))
        try:
            await self.outer_api.register_broker_all(self.identity, changed, version)
        except BaseException:
            with self._changed_lock:  # the next attempt (or the periodic whole one) carries them
                self._changed_topics |= set(names)
            raise

    def _register_broker_blocking(self, topics: Sequence[str] = ()) -> None:
        """From a pool thread (admin requests run in the admin pool): register ``topics`` alone
        (register_changed_topics), or without them the whole table."""
        assert self._loop is not None
        timeout = self.broker_config.register_broker_timeout_mills / 1000
        work = self.register_changed_topics(topics) if topics else self.register_broker_all()
        asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout + 1)

    async def _register_periodically(self) -> None:
        assert self._register_soon is not None
        period = self.broker_config.register_name_server_period / 1000
        while True:
            # a topic change registers that topic at once instead of waiting for the period
            changed = await wait_event(self._register_soon, period)
            self._register_soon.clear()
            try:
                if changed:
                    await self.register_changed_topics()
                    continue
                accepted = (await self.register_broker_all()).accepted
                log.debug(
                    "registered with %d of %d name servers", accepted, len(self.broker_config.namesrv_addr)
                )
            except Exception:
                log.exception("registering with the name servers failed")

    @staticmethod
    async def _every(interval_ms: int, work: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await work()
            except Exception:
                log.exception("periodic task failed")

    async def _persist_offsets(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.consumer_offset_manager.persist)

    async def _scan_clients(self) -> None:
        assert self.consumer_manager is not None
        for client in (
            self.consumer_manager.scan_not_active_channel() + self.producer_manager.scan_not_active_channel()
        ):
            if isinstance(client.channel, RemotingConnection):
                client.channel.close()

    def _on_connection_closed(self, connection: RemotingConnection) -> None:
        assert self.consumer_manager is not None
        if self.hold_service is not None:
            self.hold_service.release_connection(connection)
        self.consumer_manager.do_channel_close_event(connection)
        self.producer_manager.do_channel_close_event(connection)

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table (RocketMQ key names; lakemq.broker.runtime_info)."""
        return runtime_info(self)
