"""CONSUMER_SEND_MSG_BACK (RocketMQ's consumerSendMsgBack): a consumer that failed a message
hands it back, and the broker re-delivers it later through the group's retry topic.

The message is read back from the CommitLog by its offset and written again to
``%RETRY%group`` with a delay level (the consumer's, or 3 + its reconsume times when it asks for
0), so the store's schedule service delivers it after that delay. A message that has been
reconsumed ``maxReconsumeTimes`` times, or is handed back with a negative delay level, goes to
``%DLQ%group`` instead. The original topic and message id travel in the RETRY_TOPIC and
ORIGIN_MESSAGE_ID properties.
"""

from __future__ import annotations

import logging
import random

from lakemq.broker.business_pool import BusinessPool
from lakemq.broker.config import BrokerConfig
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfigManager, dlq_topic, retry_topic
from lakemq.common.codes import ResponseCode
from lakemq.common.constants import PermName
from lakemq.common.message import MessageConst, MessageExtBrokerInner, properties_to_string, tags_hash_code
from lakemq.common.validation import check_group
from lakemq.errors import for_code
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import ConsumerSendMsgBackRequestHeader, decode_header
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus

__all__ = ["ConsumerSendMsgBackProcessor"]

log = logging.getLogger(__name__)

_RETRY_BASE_LEVEL = 3  # a retry with delay level 0 waits level 3 + reconsume times (10 s, 30 s, 1 min ...)


class ConsumerSendMsgBackProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        pool: BusinessPool,
    ) -> None:
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._pool = pool

    def reject_request(self) -> bool:
        return self._store.commit_log.is_os_page_cache_busy()

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return await self._pool.run(lambda: self._send_back(ctx, request))

    def _send_back(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(ConsumerSendMsgBackRequestHeader, request.ext_fields)
        if self._store.is_slave:  # before a retry topic is created: a slave's topics are its master's
            raise for_code(ResponseCode.SERVICE_NOT_AVAILABLE,
                           f"the broker[{self._config.broker_name}, id {self._config.broker_id}] is a SLAVE")
        group_config = self._groups.find_subscription_group_config(header.group)
        if group_config is None:
            check_group(header.group)  # a name that breaks the rules is refused as such
            raise for_code(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {header.group}"
            )
        if not PermName.is_writeable(self._config.broker_permission):
            raise for_code(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self._config.broker_ip1}] sending message is forbidden",
            )
        if group_config.retry_queue_nums <= 0:
            return request.reply(ResponseCode.SUCCESS)  # the group wants no retries
        msg = self._store.look_message_by_offset(header.offset)
        if msg is None:
            raise for_code(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}")

        max_times = (
            header.max_reconsume_times
            if header.max_reconsume_times is not None
            else group_config.retry_max_times
        )
        properties = dict(msg.properties)
        properties.setdefault(MessageConst.RETRY_TOPIC, msg.topic)
        properties.setdefault(MessageConst.ORIGIN_MESSAGE_ID, header.origin_msg_id or msg.msg_id)
        properties[MessageConst.WAIT_STORE_MSG_OK] = "false"
        if msg.reconsume_times >= max_times or header.delay_level < 0:
            target = self._topics.create_topic_in_send_message_back_method(
                dlq_topic(header.group), 1, PermName.PERM_WRITE | PermName.PERM_READ
            )
            properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
            log.info(
                "message %s of group %s to %s after %d reconsumes",
                msg.msg_id,
                header.group,
                target.topic_name,
                msg.reconsume_times,
            )
        else:
            target = self._topics.create_topic_in_send_message_back_method(
                retry_topic(header.group),
                group_config.retry_queue_nums,
                PermName.PERM_WRITE | PermName.PERM_READ,
            )
            level = header.delay_level or _RETRY_BASE_LEVEL + msg.reconsume_times
            properties[MessageConst.DELAY_TIME_LEVEL] = str(level)
        if not PermName.is_writeable(target.perm):
            raise for_code(
                ResponseCode.NO_PERMISSION, f"the topic[{target.topic_name}] sending message is forbidden"
            )

        inner = MessageExtBrokerInner(
            topic=target.topic_name,
            body=msg.body,
            flag=msg.flag,
            properties=properties,
            queue_id=random.randrange(max(target.write_queue_nums, 1)),
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            store_host=self._store.store_host,
            reconsume_times=msg.reconsume_times + 1,
        )
        inner.properties_string = properties_to_string(properties)
        inner.tags_code = tags_hash_code(inner.tags)
        result = self._store.put(MessagesPut.of(inner))
        if result.status is PutMessageStatus.PUT_OK:
            return request.reply(ResponseCode.SUCCESS)
        return request.reply(ResponseCode.SYSTEM_ERROR, f"{result.status.name} {result.remark}".strip())
