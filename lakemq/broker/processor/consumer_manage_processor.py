"""GET_CONSUMER_LIST_BY_GROUP, UPDATE_CONSUMER_OFFSET and QUERY_CONSUMER_OFFSET
(RocketMQ ConsumerManageProcessor), in the consumer-manage pool (store lookups may read a
ConsumeQueue file).

Group and topic names are checked as they enter (InvalidNameError, answered SYSTEM_ERROR with
the reason); an offset is stored only for a queue of a topic this broker has, since
consumerOffset.json keeps whatever is committed.
"""

from __future__ import annotations

import os

from lakemq.broker.consumer_manager import ConsumerManager
from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.topic_config_manager import TopicConfigManager
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.validation import check_group, check_topic
from lakemq.errors import for_code
from lakemq.remoting.bodies import GetConsumerListByGroupResponseBody
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    decode_header,
    encode_header,
)
from lakemq.store.message_store import MessageStore

__all__ = ["ConsumerManageProcessor"]


def _memory_budget(ratio_percent: int) -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    return total * ratio_percent // 100


class ConsumerManageProcessor:
    def __init__(
        self, store: MessageStore, topics: TopicConfigManager, consumers: ConsumerManager,
        offsets: ConsumerOffsetManager,
    ) -> None:
        self._store = store
        self._topics = topics
        self._consumers = consumers
        self._offsets = offsets
        self._memory_budget = _memory_budget(store.config.access_message_in_memory_max_ratio)

    def reject_request(self) -> bool:
        return False

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        if request.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            header = decode_header(GetConsumerListByGroupRequestHeader, request.ext_fields)
            info = self._consumers.get_consumer_group_info(check_group(header.consumer_group))
            ids = info.all_client_ids() if info else []
            if not ids:
                return request.reply(
                    ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}"
                )
            return request.reply(
                ResponseCode.SUCCESS, body=GetConsumerListByGroupResponseBody(tuple(ids)).encode()
            )
        if request.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            update = decode_header(UpdateConsumerOffsetRequestHeader, request.ext_fields)
            check_group(update.consumer_group)
            topic = self._topics.select_topic_config(check_topic(update.topic))
            if topic is None:
                raise for_code(ResponseCode.TOPIC_NOT_EXIST, f"topic[{update.topic}] not exist, apply first please!")
            if not 0 <= update.queue_id < max(topic.read_queue_nums, topic.write_queue_nums):
                raise for_code(ResponseCode.SYSTEM_ERROR,
                               f"queueId[{update.queue_id}] is illegal, topic:[{update.topic}] has "
                               f"{max(topic.read_queue_nums, topic.write_queue_nums)} queues")
            self._offsets.commit_offset(
                ctx.remote_addr, update.consumer_group, update.topic, update.queue_id, update.commit_offset
            )
            return request.reply(ResponseCode.SUCCESS)
        return self._query_offset(request)

    def _query_offset(self, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(QueryConsumerOffsetRequestHeader, request.ext_fields)
        check_group(header.consumer_group)
        check_topic(header.topic)
        offset = self._offsets.query_offset(header.consumer_group, header.topic, header.queue_id)
        if offset >= 0:
            return request.reply(
                ResponseCode.SUCCESS, ext_fields=encode_header(QueryConsumerOffsetResponseHeader(offset))
            )
        # A group that never committed: RocketMQ lets it start at 0 when the queue still begins
        # at 0 and that message is still in memory (a young queue), unless the client asked
        # not to (setZeroIfNotFound=false); otherwise the client picks its consumeFromWhere.
        if (
            header.set_zero_if_not_found is not False
            and self._store.get_min_offset_in_queue(header.topic, header.queue_id) <= 0
            and not self._in_disk(header.topic, header.queue_id, 0)
        ):
            return request.reply(
                ResponseCode.SUCCESS, ext_fields=encode_header(QueryConsumerOffsetResponseHeader(0))
            )
        return request.reply(ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first")

    def _in_disk(self, topic: str, queue_id: int, consume_offset: int) -> bool:
        if self._store.get_max_offset_in_queue(topic, queue_id) <= consume_offset:
            return False
        phy = self._store.get_commit_log_offset_in_queue(topic, queue_id, consume_offset)
        return self._store.get_max_phy_offset() - phy > self._memory_budget
