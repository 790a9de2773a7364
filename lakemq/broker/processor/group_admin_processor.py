"""Admin requests about groups and their clients (RocketMQ AdminBrokerProcessor and
Broker2Client), as mqadmin sends them: create, update and delete a subscription group, list a
group's consumer or producer connections, which groups consume a topic, and reset a group's
offsets to a time.

Runs in the admin pool: a group change writes subscriptionGroup.json, a reset reads
ConsumeQueue files. The bodies are the JSON mqadmin's fastjson reads (lakemq.remoting.bodies
for the shared types; MessageQueue-keyed maps in fastjson's dialect).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from lakemq.broker.config import BrokerConfig
from lakemq.broker.consumer_manager import ClientChannelInfo, ConsumerManager
from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.processor.admin_processor import encode_fastjson
from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfigManager
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import InvalidNameError, RemotingError, for_code
from lakemq.remoting.bodies import decode_json, encode_json
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import (
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetProducerConnectionListRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    decode_header,
    encode_header,
)
from lakemq.remoting.protocol import RemotingConnection
from lakemq.store.message_store import MessageStore

__all__ = ["GROUP_ADMIN_CODES", "GroupAdminProcessor"]

log = logging.getLogger(__name__)

GROUP_ADMIN_CODES = (
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.GET_CONSUMER_CONNECTION_LIST,
    RequestCode.GET_PRODUCER_CONNECTION_LIST,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
)
_RESET_PUSH_TIMEOUT_S = 5.0


def _connection(info: ClientChannelInfo) -> dict[str, Any]:
    return {"clientAddr": info.remote_addr, "clientId": info.client_id, "language": info.language,
            "version": info.version}


class GroupAdminProcessor:
    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager, consumers: ConsumerManager,
                 producers: ProducerManager, loop: asyncio.AbstractEventLoop) -> None:
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._consumers = consumers
        self._producers = producers
        self._loop = loop
        self._handlers: dict[int, Callable[[RequestContext, RemotingCommand], RemotingCommand]] = {
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self._update_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self._delete_group,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self._consumer_connections,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self._producer_connections,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self._consumed_by_who,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self._reset_offset,
        }

    def reject_request(self) -> bool:
        return False

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return self._handlers[request.code](ctx, request)

    # -- subscription groups -------------------------------------------------------------------

    def _update_group(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        raw = decode_json(request.body, "subscription group config")
        if not isinstance(raw, dict):
            raise for_code(ResponseCode.SYSTEM_ERROR, "the body is not a subscription group config")
        try:
            config = SubscriptionGroupConfig.from_json(raw)
        except InvalidNameError as exc:
            raise for_code(ResponseCode.SYSTEM_ERROR, str(exc)) from exc
        self._groups.update_subscription_group_config(config)
        log.info("subscription group %s created or updated by %s: %s", config.group_name, ctx.remote_addr, config)
        return request.reply(ResponseCode.SUCCESS)

    def _delete_group(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(DeleteSubscriptionGroupRequestHeader, request.ext_fields)
        removed = self._groups.delete_subscription_group_config(header.group_name)
        if header.remove_offset:
            self._offsets.remove_group(header.group_name)
        log.info("subscription group %s deleted by %s (existed: %s, offsets removed: %s)", header.group_name,
                 ctx.remote_addr, removed, bool(header.remove_offset))
        return request.reply(ResponseCode.SUCCESS)

    # -- connections ---------------------------------------------------------------------------

    def _consumer_connections(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetConsumerConnectionListRequestHeader, request.ext_fields)
        info = self._consumers.get_consumer_group_info(header.consumer_group)
        if info is None or not info.channel_info_table:
            raise for_code(ResponseCode.CONSUMER_NOT_ONLINE,
                           f"the consumer group[{header.consumer_group}] not online")
        subscriptions = {topic: sub.to_json() for topic, sub in list(info.subscription_table.items())}
        body = {"connectionSet": [_connection(c) for c in list(info.channel_info_table.values())],
                "consumeFromWhere": info.consume_from_where, "consumeType": info.consume_type,
                "messageModel": info.message_model, "subscriptionTable": subscriptions}
        return request.reply(ResponseCode.SUCCESS, body=encode_json(body))

    def _producer_connections(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetProducerConnectionListRequestHeader, request.ext_fields)
        clients = self._producers.groups().get(header.producer_group)
        if not clients:
            raise for_code(ResponseCode.SYSTEM_ERROR, f"the producer group[{header.producer_group}] not exist")
        return request.reply(ResponseCode.SUCCESS,
                             body=encode_json({"connectionSet": [_connection(c) for c in clients]}))

    def _consumed_by_who(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """Groups subscribed to the topic now, and groups holding offsets of it."""
        topic = decode_header(QueryTopicConsumeByWhoRequestHeader, request.ext_fields).topic
        groups = {g for g, info in self._consumers.groups().items() if topic in info.subscription_table}
        groups |= self._offsets.which_group_by_topic(topic)
        return request.reply(ResponseCode.SUCCESS, body=encode_json({"groupList": sorted(groups)}))

    # -- offsets -------------------------------------------------------------------------------

    def _reset_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """RocketMQ's Broker2Client.resetOffset: each queue's offset at ``timestamp`` (-1: the
        max offset) replaces the committed one when earlier, or always with ``isForce``; the
        group's online consumers are told (RESET_CONSUMER_CLIENT_OFFSET) and move there. With no
        consumer online the answer is CONSUMER_NOT_ONLINE, and mqadmin then commits the offsets
        itself (UPDATE_CONSUMER_OFFSET)."""
        header = decode_header(ResetOffsetRequestHeader, request.ext_fields)
        tc = self._topics.select_topic_config(header.topic)
        if tc is None:
            raise for_code(ResponseCode.SYSTEM_ERROR,
                           f"[reset-offset] reset offset failed, no topic in this broker. topic={header.topic}")
        table: dict[MessageQueue, int] = {}
        for queue_id in range(tc.write_queue_nums):
            consumer_offset = self._offsets.query_offset(header.group, header.topic, queue_id)
            if consumer_offset == -1:
                raise for_code(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{header.group}> not exist")
            if header.timestamp == -1:
                offset = self._store.get_max_offset_in_queue(header.topic, queue_id)
            else:
                offset = self._store.get_offset_in_queue_by_time(header.topic, queue_id, header.timestamp)
            offset = max(offset, 0)
            use = offset if header.is_force or offset < consumer_offset else consumer_offset
            table[MessageQueue(header.topic, self._config.broker_name, queue_id)] = use
        info = self._consumers.get_consumer_group_info(header.group)
        channels = [c for c in (list(info.channel_info_table) if info else []) if isinstance(c, RemotingConnection)]
        if not channels:
            raise for_code(ResponseCode.CONSUMER_NOT_ONLINE,
                           f"Consumer not online, so can not reset offset, Group: {header.group} "
                           f"Topic: {header.topic} Timestamp: {header.timestamp}")
        body = encode_fastjson({"offsetTable": table})
        push = RemotingCommand.request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            encode_header(ResetOffsetRequestHeader(header.topic, header.group, header.timestamp)), body,
            oneway=True)
        for channel in channels:
            future = asyncio.run_coroutine_threadsafe(channel.invoke_oneway(push), self._loop)
            try:
                future.result(_RESET_PUSH_TIMEOUT_S)
            except (RemotingError, TimeoutError) as exc:  # one client gone away: the others are still told
                log.warning("[reset-offset] telling %s of group %s failed: %s", channel.remote_addr, header.group, exc)
        log.info("[reset-offset] group %s topic %s reset to %s by %s: %s", header.group, header.topic,
                 header.timestamp, ctx.remote_addr, {mq.queue_id: o for mq, o in table.items()})
        return request.reply(ResponseCode.SUCCESS, body=body)
