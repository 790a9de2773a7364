"""Admin requests (RocketMQ AdminBrokerProcessor): topics (create, delete), queue offsets,
consume stats, runtime info, all topic configs, consumer offsets, delay offsets and groups
(what a slave syncs), the orderly consumers' queue locks, and the transaction sweep's
hand-back of half messages from the lake (lakemq's own code, see transaction/lake_resume).

Runs in the admin pool: creating a topic writes topics.json, and offset-by-time lookups read
ConsumeQueue files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from lakemq.broker.config import BrokerConfig
from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.rebalance_lock_manager import RebalanceLockManager
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfig, TopicConfigManager
from lakemq.broker.transaction.lake_resume import LakeHalfResumer
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message_queue import MessageQueue
from lakemq.common.validation import check_group, check_topic
from lakemq.errors import for_code
from lakemq.remoting.bodies import (
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    encode_json,
)
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import (
    ConsumerOffsetChangesHeader,
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetTopicStatsInfoRequestHeader,
    OffsetResponseHeader,
    SearchOffsetRequestHeader,
    TimestampResponseHeader,
    decode_header,
    encode_header,
)
from lakemq.store.message_store import MessageStore

__all__ = ["ADMIN_CODES", "AdminBrokerProcessor"]

log = logging.getLogger(__name__)

ADMIN_CODES = (
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.GET_ALL_TOPIC_CONFIG,
    RequestCode.GET_TOPIC_STATS_INFO,
    RequestCode.GET_MAX_OFFSET,
    RequestCode.GET_MIN_OFFSET,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
    RequestCode.GET_EARLIEST_MSG_STORETIME,
    RequestCode.GET_CONSUME_STATS,
    RequestCode.GET_BROKER_RUNTIME_INFO,
    RequestCode.GET_ALL_CONSUMER_OFFSET,
    RequestCode.GET_ALL_DELAY_OFFSET,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    RequestCode.LOCK_BATCH_MQ,
    RequestCode.UNLOCK_BATCH_MQ,
    RequestCode.LAKEMQ_RESUME_HALF_MESSAGES,
    RequestCode.LAKEMQ_GET_CONSUMER_OFFSET_CHANGES,
)

Reply = RemotingCommand | Awaitable[RemotingCommand]
Handler = Callable[[RequestContext, RemotingCommand], Reply]


def _fastjson(value: Any) -> str:
    """JSON with MessageQueue map keys written as bare objects, fastjson's dialect, which is
    what Java admin tools parse TopicStatsTable and ConsumeStats with (lakemq's client too)."""
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            key_text = _fastjson(key.to_json()) if isinstance(key, MessageQueue) else json.dumps(str(key))
            items.append(f"{key_text}:{_fastjson(item)}")
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_fastjson(v) for v in value) + "]"
    return json.dumps(value)


def encode_fastjson(value: Any) -> bytes:
    return _fastjson(value).encode("utf-8")


class AdminBrokerProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        locks: RebalanceLockManager,
        runtime_info: Callable[[], dict[str, str]],
        register_broker: Callable[[], None],
        lake_resumer: LakeHalfResumer,
    ) -> None:
        self._register_broker = register_broker
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._locks = locks
        self._runtime_info = runtime_info
        self._handlers: dict[int, Handler] = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self._update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self._delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: lambda ctx, r: r.reply(
                ResponseCode.SUCCESS, body=encode_json(self._topics.encode())
            ),
            RequestCode.GET_TOPIC_STATS_INFO: self._topic_stats,
            RequestCode.GET_MAX_OFFSET: lambda ctx, r: self._queue_offset(
                r, GetMaxOffsetRequestHeader, self._store.get_max_offset_in_queue
            ),
            RequestCode.GET_MIN_OFFSET: lambda ctx, r: self._queue_offset(
                r, GetMinOffsetRequestHeader, self._store.get_min_offset_in_queue
            ),
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self._earliest_time,
            RequestCode.GET_CONSUME_STATS: self._consume_stats,
            RequestCode.GET_BROKER_RUNTIME_INFO: lambda ctx, r: r.reply(
                ResponseCode.SUCCESS, body=KVTable(self._runtime_info()).encode()
            ),
            RequestCode.GET_ALL_CONSUMER_OFFSET: lambda ctx, r: r.reply(
                ResponseCode.SUCCESS, body=encode_json(self._offsets.encode())
            ),
            # delayOffset.json's text, as RocketMQ answers it (its slaves write it as is).
            RequestCode.GET_ALL_DELAY_OFFSET: lambda ctx, r: r.reply(
                ResponseCode.SUCCESS, body=self._store.schedule.offsets_text().encode()
            ),
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: lambda ctx, r: r.reply(
                ResponseCode.SUCCESS, body=encode_json(self._groups.encode())
            ),
            RequestCode.LOCK_BATCH_MQ: self._lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self._unlock_batch,
            RequestCode.LAKEMQ_RESUME_HALF_MESSAGES: lake_resumer.process_request,
            RequestCode.LAKEMQ_GET_CONSUMER_OFFSET_CHANGES: self._offset_changes,
        }

    def reject_request(self) -> bool:
        return False

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> Reply:
        return self._handlers[request.code](ctx, request)

    # -- topics ------------------------------------------------------------------------

    def _update_and_create_topic(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(CreateTopicRequestHeader, request.ext_fields)
        if header.topic == self._config.broker_cluster_name:
            raise for_code(
                ResponseCode.SYSTEM_ERROR,
                f"the topic[{header.topic}] is conflict with system reserved words.",
            )
        tc = TopicConfig(
            header.topic,
            header.read_queue_nums,
            header.write_queue_nums,
            header.perm,
            header.topic_filter_type,
            header.topic_sys_flag or 0,
            header.order,
        )
        self._topics.update_topic_config(tc)
        log.info("topic %s created or updated by %s: %s", tc.topic_name, ctx.remote_addr, tc)
        # As RocketMQ: answer once the NameServers know the route, so a client that sends
        # right after creating the topic finds it with its queue count.
        self._register_broker()
        return request.reply(ResponseCode.SUCCESS)

    def _delete_topic(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """As RocketMQ: the topic's config and ConsumeQueues go (its records age out of the
        CommitLog as usual), and its consumer offsets with them; the NameServers learn it at
        once. The broker's own topics cannot be deleted."""
        topic = decode_header(DeleteTopicRequestHeader, request.ext_fields).topic
        if self._topics.is_system_topic(topic):
            raise for_code(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        existed = self._topics.delete_topic_config(topic) is not None
        self._store.delete_topics({topic})
        self._offsets.remove_topic(topic)
        log.info("topic %s deleted by %s (existed: %s)", topic, ctx.remote_addr, existed)
        self._register_broker()
        return request.reply(ResponseCode.SUCCESS)

    def _existing_topic(self, topic: str) -> TopicConfig:
        tc = self._topics.select_topic_config(topic)
        if tc is None:
            raise for_code(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        return tc

    def _topic_stats(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetTopicStatsInfoRequestHeader, request.ext_fields)
        tc = self._existing_topic(header.topic)
        table: dict[MessageQueue, dict[str, int]] = {}
        for queue_id in range(tc.write_queue_nums):
            max_offset = self._store.get_max_offset_in_queue(tc.topic_name, queue_id)
            last = (
                self._store.get_message_store_timestamp(tc.topic_name, queue_id, max_offset - 1)
                if max_offset > 0
                else 0
            )
            table[MessageQueue(tc.topic_name, self._config.broker_name, queue_id)] = {
                "minOffset": self._store.get_min_offset_in_queue(tc.topic_name, queue_id),
                "maxOffset": max_offset,
                "lastUpdateTimestamp": max(last, 0),
            }
        return request.reply(ResponseCode.SUCCESS, body=encode_fastjson({"offsetTable": table}))

    # -- queue offsets -----------------------------------------------------------------

    def _queue_offset(
        self,
        request: RemotingCommand,
        header_type: type[GetMaxOffsetRequestHeader | GetMinOffsetRequestHeader],
        lookup: Callable[[str, int], int],
    ) -> RemotingCommand:
        header = decode_header(header_type, request.ext_fields)
        return request.reply(
            ResponseCode.SUCCESS,
            ext_fields=encode_header(OffsetResponseHeader(lookup(header.topic, header.queue_id))),
        )

    def _search_offset(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(SearchOffsetRequestHeader, request.ext_fields)
        offset = self._store.get_offset_in_queue_by_time(header.topic, header.queue_id, header.timestamp)
        return request.reply(ResponseCode.SUCCESS, ext_fields=encode_header(OffsetResponseHeader(offset)))

    def _earliest_time(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetEarliestMsgStoretimeRequestHeader, request.ext_fields)
        timestamp = self._store.get_earliest_message_time(header.topic, header.queue_id)
        return request.reply(
            ResponseCode.SUCCESS, ext_fields=encode_header(TimestampResponseHeader(timestamp))
        )

    # -- consumers ---------------------------------------------------------------------

    def _consume_stats(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """Per queue: the broker's max offset, the group's committed offset and the store time
        of the last consumed message; lag = brokerOffset - consumerOffset."""
        header = decode_header(GetConsumeStatsRequestHeader, request.ext_fields)
        check_group(header.consumer_group)
        topics = (
            {header.topic} if header.topic else self._offsets.which_topic_by_consumer(header.consumer_group)
        )
        table: dict[MessageQueue, dict[str, Any]] = {}
        for topic in sorted(topics):
            tc = self._topics.select_topic_config(topic)
            if tc is None:
                continue
            for queue_id in range(tc.write_queue_nums):
                broker_offset = self._store.get_max_offset_in_queue(topic, queue_id)
                consumer_offset = max(self._offsets.query_offset(header.consumer_group, topic, queue_id), 0)
                last = (
                    self._store.get_message_store_timestamp(topic, queue_id, consumer_offset - 1)
                    if consumer_offset > 0
                    else 0
                )
                table[MessageQueue(topic, self._config.broker_name, queue_id)] = {
                    "brokerOffset": broker_offset,
                    "consumerOffset": consumer_offset,
                    "lastTimestamp": max(last, 0),
                }
        if header.topic and not table:
            raise for_code(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist")
        return request.reply(
            ResponseCode.SUCCESS, body=encode_fastjson({"offsetTable": table, "consumeTps": 0.0})
        )

    def _offset_changes(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        """A slave's fast offset sync: the topic@groups committed since its last ask."""
        asked = decode_header(ConsumerOffsetChangesHeader, request)
        seq, wrapper = self._offsets.changes_since(asked.epoch, asked.seq)
        return request.reply(ResponseCode.SUCCESS, ext_fields=encode_header(
            ConsumerOffsetChangesHeader(self._offsets.epoch, seq)), body=encode_json(wrapper))

    def _lock_batch(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        body = _checked(LockBatchRequestBody.decode(request.body))
        locked = self._locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.reply(ResponseCode.SUCCESS, body=LockBatchResponseBody(tuple(sorted(locked))).encode())

    def _unlock_batch(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        body = _checked(LockBatchRequestBody.decode(request.body))
        self._locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.reply(ResponseCode.SUCCESS)


def _checked(body: LockBatchRequestBody) -> LockBatchRequestBody:
    """The body, once its group and topics follow the naming rules (the lock table keeps them)."""
    check_group(body.consumer_group)
    for mq in body.mq_set:
        check_topic(mq.topic)
    return body
