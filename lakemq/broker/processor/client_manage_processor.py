"""HEART_BEAT, UNREGISTER_CLIENT and CHECK_CLIENT_CONFIG (RocketMQ ClientManageProcessor).

A heartbeat registers the client's producer groups and consumer groups (with their
subscriptions); for each consumer group the group config and its retry topic
(``%RETRY%group``) are created if missing, so the group's failed messages have a home. As in
RocketMQ, a new retry topic is registered with the NameServers before the heartbeat is
answered: the consumer's first rebalance then finds the retry topic's route and pulls it.

A heartbeat that creates a group or a retry topic (config files written, a registration)
runs in the client-manage pool, as UNREGISTER_CLIENT does, and is answered once the group and
its retry topic are durable: what an answered heartbeat made survives a power cut. The config
files are written by group commit, so 1,000 groups heartbeating for the first time share
writes of topics.json instead of rewriting it 1,000 times. So does a heartbeat that finds a
table with a change another one made not yet durable. Any other heartbeat only updates
tables in memory and is handled on the loop, in order with the pulls of its connection: a
Java consumer bumps its subscription version and sends a heartbeat right as it dispatches its
first pulls, and a pull that overtook that heartbeat would be refused SUBSCRIPTION_NOT_LATEST
and retried a second later.

Every group and subscribed topic name is checked before anything is registered: a heartbeat
naming one that breaks RocketMQ's rules is refused whole (InvalidNameError, answered
SYSTEM_ERROR with the reason).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor

from lakemq.broker.config import BrokerConfig
from lakemq.broker.consumer_manager import ClientChannelInfo, ConsumerManager
from lakemq.broker.filter import from_heartbeat
from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfigManager, retry_topic
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.constants import PermName
from lakemq.common.subscription import ExpressionType, SubscriptionData
from lakemq.common.validation import check_group, check_topic
from lakemq.errors import FilterExpressionError
from lakemq.filter import parse_subscription
from lakemq.remoting.bodies import HeartbeatData, decode_json
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import UnregisterClientRequestHeader, decode_header

__all__ = ["ClientManageProcessor"]

log = logging.getLogger(__name__)


class ClientManageProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        consumers: ConsumerManager,
        producers: ProducerManager,
        register_broker: Callable[[Sequence[str]], None] = lambda _topics: None,
        pool: Executor | None = None,
    ) -> None:
        self._register_broker = register_broker
        self._pool = pool
        self._config = config
        self._topics = topics
        self._groups = groups
        self._consumers = consumers
        self._producers = producers

    def reject_request(self) -> bool:
        return False

    def process_request(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        if request.code == RequestCode.CHECK_CLIENT_CONFIG:
            return self._check_client_config(request)
        if request.code == RequestCode.UNREGISTER_CLIENT:
            return self._pooled(self._unregister, ctx, request)
        data = HeartbeatData.decode(request.body)
        if data.consumer_data_set and (self._groups.pending or self._topics.pending or any(
                self._groups.get(c.group_name) is None
                or self._topics.select_topic_config(retry_topic(c.group_name)) is None
                for c in data.consumer_data_set)):
            return self._pooled(self._heartbeat, ctx, request, data, True)
        return self._heartbeat(ctx, request, data)

    def _pooled(self, fn: Callable[..., RemotingCommand], *args: object) -> RemotingCommand | Awaitable[RemotingCommand]:
        if self._pool is None:
            return fn(*args)
        return asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _check_client_config(self, request: RemotingCommand) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG: Java consumers ask before using a SQL92 subscription."""
        body = decode_json(request.body, "check client config")
        raw = body.get("subscriptionData") if isinstance(body, dict) else None
        if not isinstance(raw, dict):
            return request.reply(ResponseCode.SUCCESS)
        sub = SubscriptionData.from_json(raw)
        if (sub.expression_type or ExpressionType.TAG) == ExpressionType.TAG:
            return request.reply(ResponseCode.SUCCESS)
        if not self._config.enable_property_filter:
            return request.reply(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {sub.expression_type}")
        try:
            parse_subscription(sub.topic, sub.sub_string, sub.expression_type)
        except FilterExpressionError as exc:
            log.warning("client %s@%s sent a subscription that does not compile: %s",
                        body.get("clientId"), body.get("group"), exc)
            return request.reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return request.reply(ResponseCode.SUCCESS)

    def _info(self, ctx: RequestContext, request: RemotingCommand, client_id: str) -> ClientChannelInfo:
        return ClientChannelInfo(
            ctx.connection, client_id, request.language.name, request.version, ctx.remote_addr
        )

    def _heartbeat(self, ctx: RequestContext, request: RemotingCommand, data: HeartbeatData,
                   pooled: bool = False) -> RemotingCommand:
        """In the pool, the groups and retry topics are created in memory first and made
        durable together (one wait for both files, shared with other heartbeats) before the
        heartbeat registers the new retry topics and is answered; on the loop nothing is
        expected to be created, and a creation (a race with a delete) waits for its write."""
        for group in data.producer_groups:
            check_group(group)
        for consumer in data.consumer_data_set:
            check_group(consumer.group_name)
            for sub in consumer.subscription_data_set:
                check_topic(sub.topic)
        # Every subscription is parsed before anything is registered: a bad SQL92 expression
        # refuses the whole heartbeat (SUBSCRIPTION_PARSE_FAILED) and changes nothing.
        subscriptions = [[from_heartbeat(s) for s in consumer.subscription_data_set]
                         for consumer in data.consumer_data_set]
        group_configs = [self._groups.find_subscription_group_config(c.group_name, wait=not pooled)
                         for c in data.consumer_data_set]
        new_retries = []
        for consumer, group_config in zip(data.consumer_data_set, group_configs):
            retry = retry_topic(consumer.group_name)
            if group_config is not None and self._topics.select_topic_config(retry) is None:
                self._topics.create_topic_in_send_message_back_method(
                    retry, group_config.retry_queue_nums, PermName.PERM_WRITE | PermName.PERM_READ, wait=not pooled)
                new_retries.append(retry)
        if pooled:
            self._groups.sync()
            self._topics.sync()
        if new_retries:
            try:
                self._register_broker(new_retries)  # those topics alone, not the whole table
            except Exception:  # a NameServer down: the periodic registration retries
                log.warning("registering retry topics %s with the name servers failed", new_retries, exc_info=True)
        for consumer, consumer_subscriptions, group_config in zip(data.consumer_data_set, subscriptions,
                                                                  group_configs):
            notify = self._config.notify_consumer_ids_changed_enable
            if group_config is not None:
                notify = notify and group_config.notify_consumer_ids_changed_enable
            changed = self._consumers.register_consumer(
                consumer.group_name,
                self._info(ctx, request, data.client_id),
                consumer.consume_type,
                consumer.message_model,
                consumer.consume_from_where,
                consumer_subscriptions,
                notify,
            )
            if changed:
                log.info(
                    "consumer group %s changed by heartbeat of %s (%s)",
                    consumer.group_name,
                    data.client_id,
                    ctx.remote_addr,
                )
        for group in data.producer_groups:
            self._producers.register_producer(group, self._info(ctx, request, data.client_id))
        return request.reply(ResponseCode.SUCCESS)

    def _unregister(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(UnregisterClientRequestHeader, request.ext_fields)
        if header.producer_group:
            self._producers.unregister_producer(check_group(header.producer_group), ctx.connection)
        if header.consumer_group:
            check_group(header.consumer_group)
            group_config = self._groups.find_subscription_group_config(header.consumer_group)
            notify = self._config.notify_consumer_ids_changed_enable and (
                group_config is None or group_config.notify_consumer_ids_changed_enable
            )
            self._consumers.unregister_consumer(header.consumer_group, ctx.connection, notify)
        return request.reply(ResponseCode.SUCCESS)
