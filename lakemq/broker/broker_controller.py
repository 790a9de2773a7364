"""BrokerController: builds a broker from its configs and runs its life cycle.

Start: bind the remoting server (a ``listenPort`` of 0 picks a free port, whose number then
goes into message ids and the registration), load the persisted topic / offset / group
tables and the store (recovery), register every processor, start the background tasks
(consumer offsets persisted every ``flushConsumerOffsetInterval``, client housekeeping,
NameServer registration every ``registerNameServerPeriod``, transaction check-backs every
``transactionCheckInterval``) and register with all NameServers.
Until loading is done every request is answered SERVICE_NOT_AVAILABLE.

Replication (lakemq.broker.ha, docs/REPLICATION.md): every broker listens for slaves on
its HA port and registers that address; a SLAVE also follows its master (the configured
``haMasterAddress``, else the HA address the NameServer answers its registration with) and
syncs the master's topics, offsets and groups. A slave runs no transaction checks and
delivers no delayed messages: its master does.

Shutdown (SIGTERM in the CLI): unregister from the NameServers, stop accepting, answer held
pulls, stop replication, persist offsets and groups, then shut the store down (flush,
checkpoint, abort file removed) so the next start recovers normally.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from lakemq import __version__
from lakemq.broker.acl import AclGuardedRegistry, PlainAccessValidator, ProcessorRegistry
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
from lakemq.broker.ha import HaClient, HaConfig, HaServer, ReplicationProgress, SlaveSynchronize, check_role
from lakemq.broker.metrics import BrokerMetrics
from lakemq.broker.metrics_collector import BrokerState, BrokerStateCollector
from lakemq.broker.processor.admin_processor import ADMIN_CODES, AdminBrokerProcessor
from lakemq.broker.processor.broker_config_processor import BROKER_CONFIG_CODES, BrokerConfigProcessor
from lakemq.broker.processor.client_manage_processor import ClientManageProcessor
from lakemq.broker.processor.consumer_manage_processor import ConsumerManageProcessor
from lakemq.broker.processor.group_admin_processor import GROUP_ADMIN_CODES, GroupAdminProcessor
from lakemq.broker.processor.pull_processor import PullMessageProcessor
from lakemq.broker.processor.query_processor import QueryMessageProcessor
from lakemq.broker.processor.reply_processor import REPLY_CODES, ReplyMessageProcessor
from lakemq.broker.processor.send_back_processor import ConsumerSendMsgBackProcessor
from lakemq.broker.processor.send_processor import SendMessageProcessor
from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.pull_request_hold_service import PullRequestHoldService
from lakemq.broker.rebalance_lock_manager import RebalanceLockManager
from lakemq.broker.runtime_stats import RuntimeStats
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfig, TopicConfigManager
from lakemq.broker.transaction import (
    EndTransactionProcessor,
    LakeHalfResumer,
    TransactionalMessageCheckService,
    TransactionalMessageService,
)
from lakemq.broker.unconsumed import oldest_unconsumed
from lakemq.common.aio import wait_event
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.metrics_http import MetricsServer, metrics_port_for, start_metrics_server
from lakemq.common.record import STORE_TIMESTAMP_POS
from lakemq.errors import StoreError
from lakemq.remoting.client import RemotingClient, RemotingClientConfig
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.protocol import RemotingConnection
from lakemq.remoting.server import RemotingServer, ServerConfig
from lakemq.store.config import StoreConfig
from lakemq.store.message_store import MessageStore

if TYPE_CHECKING:  # the lake reader (Delta, pyarrow) is imported only by brokers with a lakeUri
    from lakemq.broker.cold_read import ColdPuller

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
        self._send_processor: SendMessageProcessor | None = None
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
        self._loop: asyncio.AbstractEventLoop | None = None
        self.boot_timestamp = int(time.time() * 1000)
        self.broker_addr = broker_config.broker_addr
        self.runtime_stats = RuntimeStats(self.metrics.sends.total_messages, self._got_total)

    # -- life cycle --------------------------------------------------------------------

    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        c = self.broker_config
        registry = self._processor_registry()
        registry.register_default_processor(self._default)
        await self.remoting_server.start()
        self.broker_addr = f"{c.broker_ip1}:{self.remoting_server.port}"
        metrics_port = metrics_port_for(c.metrics_port, self.remoting_server.port if c.listen_port else 0)
        if metrics_port is not None:
            self.metrics_server = start_metrics_server(self.metrics.registry, c.broker_ip1, metrics_port)
        self.store = MessageStore(self.store_config, store_host=self.broker_addr)
        self.store.set_flush_listener(self.metrics.record_flush)
        store = self.store
        self.store.set_unconsumed_probe(lambda: oldest_unconsumed(store, self.consumer_offset_manager))
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
        self._register_processors(registry)
        self.remoting_server.add_close_listener(self._on_connection_closed)
        self.send_pool.start()
        self.pull_pool.start()
        register_soon = self._register_soon = asyncio.Event()

        def topic_changed(_tc: TopicConfig) -> None:  # called from pool threads
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
        self.store.start()

    async def _start_replication(self) -> None:
        """The HA listener (every role), and a slave's link to its master and metadata sync."""
        assert self.store is not None
        c = self.broker_config
        self.ha_server = HaServer(self.store, self.ha_config, self.replication, c.ha_host,
                                  self.ha_config.listen_port(c.listen_port))
        await self.ha_server.start()
        self.ha_server_addr = self.ha_server.address
        self.store.message_arriving_listeners.append(self.ha_server.notify_threadsafe)
        replica_acks = self.store.commit_log.replica_acks
        if replica_acks is not None:  # SYNC_MASTER: what the slaves report acknowledges puts
            replica_acks.on_expect = self.ha_server.wake  # a waiting put is pushed at once
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

    def _executor(self, name: str, threads: int) -> ThreadPoolExecutor:
        executor = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._executors.append(executor)
        return executor

    def _processor_registry(self) -> ProcessorRegistry:
        """The server's processor table; with aclEnable every processor checks the ACL first."""
        c = self.broker_config
        if not c.acl_enable:
            return self.remoting_server
        validator = PlainAccessValidator.from_file(c.acl_file)
        log.info("ACL enabled: %d accounts from %s", len(validator.config.accounts), c.acl_file)
        return AclGuardedRegistry(self.remoting_server, validator)

    def _cold_puller(self, c: BrokerConfig) -> ColdPuller | None:
        """With a lakeUri, pulls below the hot min offset are served from the lake."""
        if not c.lake_uri:
            return None
        from lakemq.broker.cold_read import ColdPuller

        return ColdPuller(c.lake_uri, c.broker_name, self.metrics)

    def _register_processors(self, server: ProcessorRegistry) -> None:
        assert self.store is not None and self.consumer_manager is not None and self.hold_service is not None
        c = self.broker_config
        send = self._send_processor = SendMessageProcessor(
            c, self.store, self.topic_config_manager, self.subscription_group_manager, self.send_pool,
            self.metrics,
        )
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            server.register_processor(code, send)
        reply = ReplyMessageProcessor(c, self.store, self.topic_config_manager, self.producer_manager,
                                      self.send_pool)
        for code in REPLY_CODES:
            server.register_processor(code, reply)
        server.register_processor(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            ConsumerSendMsgBackProcessor(
                c, self.store, self.topic_config_manager, self.subscription_group_manager, self.send_pool
            ),
        )
        server.register_processor(
            RequestCode.PULL_MESSAGE,
            PullMessageProcessor(
                c,
                self.store,
                self.topic_config_manager,
                self.subscription_group_manager,
                self.consumer_manager,
                self.consumer_offset_manager,
                self.hold_service,
                self.pull_pool,
                self.metrics,
                self._cold_puller(c),
            ),
        )
        client_manage = ClientManageProcessor(
            c,
            self.topic_config_manager,
            self.subscription_group_manager,
            self.consumer_manager,
            self.producer_manager,
            self._register_broker_blocking,
            self._executor("ClientManageThread", c.client_manage_thread_pool_nums),
        )
        # It hops to its pool itself when a request writes files (see its module docstring).
        for code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT,
                     RequestCode.CHECK_CLIENT_CONFIG):
            server.register_processor(code, client_manage)
        consumer_manage = ConsumerManageProcessor(
            self.store, self.topic_config_manager, self.consumer_manager, self.consumer_offset_manager
        )
        consumer_pool = self._executor("ConsumerManageThread", c.consumer_manage_thread_pool_nums)
        for code in (
            RequestCode.GET_CONSUMER_LIST_BY_GROUP,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            RequestCode.QUERY_CONSUMER_OFFSET,
        ):
            server.register_processor(code, consumer_manage, consumer_pool)
        query = QueryMessageProcessor(self.store)
        query_pool = self._executor("QueryMessageThread", c.query_message_thread_pool_nums)
        for code in (RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID):
            server.register_processor(code, query, query_pool)
        transactions = TransactionalMessageService(self.store, self.consumer_offset_manager)
        server.register_processor(
            RequestCode.END_TRANSACTION,
            EndTransactionProcessor(c, transactions, self.metrics),
            self._executor("EndTransactionThread", c.end_transaction_thread_pool_nums),
        )
        self.transaction_check_service = TransactionalMessageCheckService(
            transactions,
            self.producer_manager,
            transaction_timeout_ms=c.transaction_time_out,
            check_max=c.transaction_check_max,
            check_interval_ms=c.transaction_check_interval,
        )
        admin = AdminBrokerProcessor(
            c,
            self.store,
            self.topic_config_manager,
            self.subscription_group_manager,
            self.consumer_offset_manager,
            self.rebalance_lock_manager,
            self.runtime_info,
            self._register_broker_blocking,
            LakeHalfResumer(c, self.transaction_check_service),
        )
        admin_pool = self._executor("AdminBrokerThread", c.admin_broker_thread_pool_nums)
        for code in ADMIN_CODES:
            server.register_processor(code, admin, admin_pool)
        assert self._loop is not None
        groups = GroupAdminProcessor(c, self.store, self.topic_config_manager, self.subscription_group_manager,
                                     self.consumer_offset_manager, self.consumer_manager, self.producer_manager,
                                     self._loop)
        for code in GROUP_ADMIN_CODES:
            server.register_processor(code, groups, admin_pool)
        configs = BrokerConfigProcessor(lambda: (self.broker_config, self.store_config), self._apply_broker_config)
        for code in BROKER_CONFIG_CODES:
            server.register_processor(code, configs, admin_pool)

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
        await self.remoting_server.shutdown()
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

    def _register_broker_blocking(self) -> None:
        """register_broker_all from a pool thread (admin requests run in the admin pool)."""
        assert self._loop is not None
        timeout = self.broker_config.register_broker_timeout_mills / 1000
        asyncio.run_coroutine_threadsafe(self.register_broker_all(), self._loop).result(timeout + 1)

    async def _register_periodically(self) -> None:
        assert self._register_soon is not None
        period = self.broker_config.register_name_server_period / 1000
        while True:
            # a topic change registers at once instead of waiting for the period
            await wait_event(self._register_soon, period)
            self._register_soon.clear()
            try:
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
        """GET_BROKER_RUNTIME_INFO's table (RocketMQ key names)."""
        assert self.store is not None
        now = int(time.time() * 1000)
        info = {
            "brokerVersionDesc": f"lakemq {__version__}",
            "bootTimestamp": self.boot_timestamp,
            "runtime": f"{(now - self.boot_timestamp) // 1000} s",
            "commitLogMinOffset": self.store.get_min_phy_offset(),
            "commitLogMaxOffset": self.store.get_max_phy_offset(),
            "dispatchBehindBytes": self.store.dispatch_behind_bytes(),
            "diskUsedRatio": f"{self.store.health.disk_used_ratio:.1f}",
            # Why sends are refused now (disk full, dispatch failing or behind); empty: taken.
            "putRefusal": refusal[1].remark if (refusal := self.store.health.refusal) else "",
            "dispatchFailures": self.store.health.dispatch_failures,
            "sendThreadPoolQueueSize": self.send_pool.queue_size,
            "sendThreadPoolQueueCapacity": self.broker_config.send_thread_pool_queue_capacity,
            "pullThreadPoolQueueSize": self.pull_pool.queue_size,
            "pullThreadPoolQueueCapacity": self.broker_config.pull_thread_pool_queue_capacity,
            "sendRejectedTimes": self.send_pool.rejected,
            "heldPullRequests": self.hold_service.held_count if self.hold_service else 0,
            "brokerAddr": self.broker_addr,
            "storePathRootDir": self.store_config.store_path_root_dir,
            "brokerRole": self.role.name,
            "brokerId": self.broker_config.broker_id,
            "haServerAddr": self.ha_server_addr,
            "earliestMessageTimeStamp": self.store.commit_log.pickup_store_timestamp(
                self.store.get_min_phy_offset(), STORE_TIMESTAMP_POS + 8),
            "commitLogDiskRatio": f"{_disk_used_ratio(self.store_config.store_path_root_dir):.4f}",
            "pageCacheLockTimeMills": self.store.commit_log.lock_time_ms(),
            "sendThreadPoolQueueHeadWaitTimeMills": self.send_pool.head_wait_ms(),
            "pullThreadPoolQueueHeadWaitTimeMills": self.pull_pool.head_wait_ms(),
            **self.runtime_stats.info(),
        }
        if self.role.is_master:
            links = self.replication.snapshot()
            info["haConnectedSlaves"] = len(links)
            # RocketMQ's slaveFallBehindMuch: the max offset less the furthest slave acknowledgement.
            info["slaveFallBehindBytes"] = max(0, self.store.get_max_phy_offset() - self.replication.acked_offset)
            for i, (link, lag_bytes, lag_seconds) in enumerate(links):
                info[f"haSlave{i}Addr"] = link.addr
                info[f"haSlave{i}AckOffset"] = link.ack_offset
                info[f"haSlave{i}LagBytes"] = lag_bytes
                info[f"haSlave{i}LagSeconds"] = f"{lag_seconds:.3f}"
        elif self.ha_client is not None:
            info["haMasterAddress"] = self.ha_client.master_address
            info["haConnected"] = str(self.ha_client.connected).lower()
            info["masterAddr"] = (self.slave_sync.master_addr if self.slave_sync else None) or ""
        return {k: str(v) for k, v in info.items()}


def _disk_used_ratio(path: str) -> float:
    """Used share of the store's disk, as RocketMQ's commitLogDiskRatio (0 when unknown)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return 0.0
    return (usage.total - usage.free) / usage.total if usage.total else 0.0
