"""Which processor answers which request code: builds a broker's request processors from the
BrokerController's parts and registers each, with the thread pool it runs in, on the remoting
server (behind the ACL check when ``aclEnable`` is set).

Send and pull run in their BusinessPools (flow control); client management hops to its pool
itself; consumer management, queries, end transaction and admin requests run in executors
of their own, sized by the broker config.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple

from lakemq.broker.acl import AclGuardedRegistry, PlainAccessValidator, ProcessorRegistry
from lakemq.broker.config import BrokerConfig
from lakemq.broker.metrics import BrokerMetrics
from lakemq.broker.pop.processor import POP_CODES, PopProcessor
from lakemq.broker.processor.admin_processor import ADMIN_CODES, AdminBrokerProcessor
from lakemq.broker.processor.broker_config_processor import BROKER_CONFIG_CODES, BrokerConfigProcessor
from lakemq.broker.processor.client_manage_processor import ClientManageProcessor
from lakemq.broker.processor.consumer_manage_processor import ConsumerManageProcessor
from lakemq.broker.processor.group_admin_processor import GROUP_ADMIN_CODES, GroupAdminProcessor
from lakemq.broker.processor.pull_processor import PullMessageProcessor
from lakemq.broker.processor.query_processor import QueryMessageProcessor
from lakemq.broker.processor.recall_processor import RecallMessageProcessor, recall_message
from lakemq.broker.processor.reply_processor import REPLY_CODES, ReplyMessageProcessor
from lakemq.broker.processor.send_back_processor import ConsumerSendMsgBackProcessor
from lakemq.broker.processor.send_processor import SendMessageProcessor
from lakemq.broker.transaction import (
    EndTransactionProcessor,
    LakeHalfResumer,
    TransactionalMessageCheckService,
    TransactionalMessageService,
)
from lakemq.common.codes import RequestCode
from lakemq.errors import ConfigError
from lakemq.remoting.server import RemotingServer

if TYPE_CHECKING:  # the lake reader (Delta, pyarrow) is imported only by brokers with a lakeUri
    from lakemq.broker.broker_controller import BrokerController
    from lakemq.broker.cold_read import ColdPuller
    from lakemq.broker.grpc.server import GrpcServer

__all__ = ["WiredProcessors", "grpc_front_door", "processor_registry", "register_processors"]

log = logging.getLogger(__name__)


class WiredProcessors(NamedTuple):
    """What the controller keeps of the wiring: the send processor (closed at shutdown), the
    transaction check service (a background task, retuned by updateBrokerConfig), and what
    the gRPC front door shares with remoting (lakemq.broker.grpc): the send and end-transaction
    processors and the end-transaction pool."""

    send: SendMessageProcessor
    transaction_checks: TransactionalMessageCheckService
    end_transaction: EndTransactionProcessor
    end_transaction_pool: ThreadPoolExecutor


def processor_registry(config: BrokerConfig, server: RemotingServer) -> ProcessorRegistry:
    """The server's processor table; with aclEnable every processor checks the ACL first."""
    if not config.acl_enable:
        return server
    validator = PlainAccessValidator.from_file(config.acl_file)
    log.info("ACL enabled: %d accounts from %s", len(validator.config.accounts), config.acl_file)
    return AclGuardedRegistry(server, validator)


def _cold_puller(config: BrokerConfig, metrics: BrokerMetrics) -> ColdPuller | None:
    """With a lakeUri, pulls below the hot min offset are served from the lake."""
    if not config.lake_uri:
        return None
    from lakemq.broker.cold_read import ColdPuller

    return ColdPuller(config.lake_uri, config.broker_name, metrics)


def register_processors(
    server: ProcessorRegistry,
    broker: BrokerController,
    *,
    executor: Callable[[str, int], ThreadPoolExecutor],
    register_broker: Callable[[Sequence[str]], None],
    apply_broker_config: Callable[[BrokerConfig], None],
    loop: asyncio.AbstractEventLoop,
) -> WiredProcessors:
    """Every processor of a started ``broker`` (store loaded, consumer manager and hold
    service made). ``executor(name, threads)`` makes a pool the broker shuts down;
    ``register_broker(topics)`` registers those topics (every topic when empty) with the
    NameServers from a pool thread;
    ``apply_broker_config`` puts a config changed at run time in force."""
    store, consumers, holds = broker.store, broker.consumer_manager, broker.hold_service
    assert store is not None and consumers is not None and holds is not None
    c = broker.broker_config
    topics, groups = broker.topic_config_manager, broker.subscription_group_manager
    offsets, producers, metrics = broker.consumer_offset_manager, broker.producer_manager, broker.metrics
    send = SendMessageProcessor(c, store, topics, groups, broker.send_pool, metrics)
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        server.register_processor(code, send)
    reply = ReplyMessageProcessor(c, store, topics, producers, broker.send_pool)
    for code in REPLY_CODES:
        server.register_processor(code, reply)
    server.register_processor(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        ConsumerSendMsgBackProcessor(c, store, topics, groups, broker.send_pool),
    )
    if broker.pop_service is not None:
        pop = PopProcessor(c, broker.pop_service)
        for code in POP_CODES:
            server.register_processor(code, pop)
    server.register_processor(
        RequestCode.PULL_MESSAGE,
        PullMessageProcessor(c, store, topics, groups, consumers, offsets, holds, broker.pull_pool, metrics,
                             _cold_puller(c, metrics)),
    )
    client_manage = ClientManageProcessor(c, topics, groups, consumers, producers, register_broker,
                                          executor("ClientManageThread", c.client_manage_thread_pool_nums))
    # It hops to its pool itself when a request writes files (see its module docstring).
    for code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT, RequestCode.CHECK_CLIENT_CONFIG):
        server.register_processor(code, client_manage)
    consumer_manage = ConsumerManageProcessor(store, topics, consumers, offsets)
    consumer_pool = executor("ConsumerManageThread", c.consumer_manage_thread_pool_nums)
    for code in (
        RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.QUERY_CONSUMER_OFFSET,
    ):
        server.register_processor(code, consumer_manage, consumer_pool)
    query = QueryMessageProcessor(store)
    query_pool = executor("QueryMessageThread", c.query_message_thread_pool_nums)
    for code in (RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID):
        server.register_processor(code, query, query_pool)
    server.register_processor(RequestCode.RECALL_MESSAGE, RecallMessageProcessor(c, store, topics),
                              executor("RecallMessageThread", 1))
    transactions = TransactionalMessageService(store, offsets)
    end_transaction = EndTransactionProcessor(c, transactions, metrics)
    end_transaction_pool = executor("EndTransactionThread", c.end_transaction_thread_pool_nums)
    server.register_processor(RequestCode.END_TRANSACTION, end_transaction, end_transaction_pool)
    checks = TransactionalMessageCheckService(
        transactions,
        producers,
        transaction_timeout_ms=c.transaction_time_out,
        check_max=c.transaction_check_max,
        check_interval_ms=c.transaction_check_interval,
    )
    admin = AdminBrokerProcessor(c, store, topics, groups, offsets, broker.rebalance_lock_manager,
                                 broker.runtime_info, lambda: register_broker(()), LakeHalfResumer(c, checks))
    admin_pool = executor("AdminBrokerThread", c.admin_broker_thread_pool_nums)
    for code in ADMIN_CODES:
        server.register_processor(code, admin, admin_pool)
    group_admin = GroupAdminProcessor(c, store, topics, groups, offsets, consumers, producers, loop)
    for code in GROUP_ADMIN_CODES:
        server.register_processor(code, group_admin, admin_pool)
    # The configs are read when asked: updateBrokerConfig replaces the broker's BrokerConfig.
    configs = BrokerConfigProcessor(lambda: (broker.broker_config, broker.store_config), apply_broker_config)
    for code in BROKER_CONFIG_CODES:
        server.register_processor(code, configs, admin_pool)
    return WiredProcessors(send, checks, end_transaction, end_transaction_pool)


def grpc_front_door(broker: BrokerController, wired: WiredProcessors) -> GrpcServer:
    """The RocketMQ 5 front door (``grpcListenPort``) over the processors remoting uses: one
    broker core, two protocol faces. Imported only when enabled (grpcio and the generated
    apache.rocketmq.v2 code are not loaded otherwise)."""
    try:
        from lakemq.broker.grpc.auth import GrpcAcl
        from lakemq.broker.grpc.server import GrpcServer, TlsMode
        from lakemq.broker.grpc.service import MessagingService
        from lakemq.broker.grpc.telemetry import SettingsPolicy
        from lakemq.broker.grpc.tls import tls_material
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("lakemq.grpc._pb"):
            raise
        raise ConfigError("grpcListenPort is set but RocketMQ 5's gRPC code is not generated: run "
                          "scripts/bootstrap.sh (it runs scripts/gen_grpc.py)") from exc

    store = broker.store
    assert store is not None
    c = broker.broker_config
    acl = GrpcAcl(PlainAccessValidator.from_file(c.acl_file)) if c.acl_enable else None
    settings = SettingsPolicy(store.config.max_message_size, store.commit_log.delay_levels.delays_ms,
                              c.max_suspend_timeout_millis)
    service = MessagingService(c, broker.topic_config_manager, broker.subscription_group_manager,
                               broker.producer_manager, wired.send, wired.end_transaction,
                               wired.end_transaction_pool, settings, acl, broker.pop_service,
                               functools.partial(recall_message, c, store, broker.topic_config_manager))
    tls_mode = TlsMode(c.grpc_tls_mode)
    tls = None if tls_mode is TlsMode.DISABLED else tls_material(c.grpc_tls_cert_path, c.grpc_tls_key_path,
                                                                  c.broker_ip1)
    return GrpcServer(service, c.broker_ip1, c.grpc_listen_port, store.config.max_message_size, tls_mode, tls)
