"""SEND_REPLY_MESSAGE and SEND_REPLY_MESSAGE_V2 (RocketMQ ReplyMessageProcessor): the answer
to a producer's ``request()``.

A responder sends the reply (built by the client's ``MessageUtil.createReplyMessage``, to the
``{cluster}_REPLY_TOPIC``) here. The broker pushes it at once to the requesting client, named
by the reply's REPLY_TO_CLIENT property, as PUSH_REPLY_MESSAGE_TO_CLIENT over that client's
own connection (found by its heartbeat, ProducerManager.find_channel), and stores it as well
when ``storeReplyMessageEnable`` (RocketMQ's default). As in RocketMQ the answer is SUCCESS
only when the push was answered SUCCESS; a stored reply that could not be pushed answers
SYSTEM_ERROR with the reason, and carries its store result.
"""

from __future__ import annotations

import logging
import random
import time

from lakemq.broker.business_pool import BusinessPool
from lakemq.broker.config import BrokerConfig
from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.topic_config_manager import TopicConfigManager
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.constants import PermName
from lakemq.common.message import (
    MessageConst,
    MessageExtBrokerInner,
    properties_to_string,
    string_to_properties,
)
from lakemq.common.validation import is_valid_name
from lakemq.errors import RemotingError, for_code
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import (
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
    decode_send_header,
    encode_header,
)
from lakemq.remoting.protocol import RemotingConnection
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus

__all__ = ["REPLY_CODES", "ReplyMessageProcessor"]

log = logging.getLogger(__name__)

REPLY_CODES = (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)
PUSH_TIMEOUT_S = 3.0  # RocketMQ's Broker2Client.callClient waits 10 s; a requester waits less
_STORED = frozenset({PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                     PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE})


class ReplyMessageProcessor:
    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 producers: ProducerManager, pool: BusinessPool) -> None:
        self._config = config
        self._store = store
        self._topics = topics
        self._producers = producers
        self._pool = pool

    def reject_request(self) -> bool:
        return False

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_send_header(request)
        queue_id = self._check(ctx, header)
        body = request.body or b""
        properties = string_to_properties(header.properties or "")
        pushed, remark = await self._push(ctx, header, queue_id, body, properties)
        fields = {"msgId": "0", "queueId": str(queue_id), "queueOffset": "0",
                  MessageConst.MSG_REGION: "DefaultRegion", MessageConst.TRACE_SWITCH: "true"}
        if self._config.store_reply_message_enable:
            msg = MessageExtBrokerInner(
                topic=header.topic, body=body, flag=header.flag, properties=properties, queue_id=queue_id,
                sys_flag=header.sys_flag, born_timestamp=header.born_timestamp, born_host=ctx.remote_addr,
                store_host=self._store.store_host, reconsume_times=header.reconsume_times or 0,
            )
            result = await self._pool.run(lambda: self._store.put(MessagesPut.of(msg)))
            if result.status in _STORED and result.append_result is not None:
                fields["msgId"] = result.append_result.msg_id
                fields["queueOffset"] = str(result.append_result.logics_offset)
            else:
                log.warning("reply to %s from %s not stored: %s %s", header.topic, ctx.remote_addr,
                            result.status.name, result.remark or "")
        code = ResponseCode.SUCCESS if pushed else ResponseCode.SYSTEM_ERROR
        return request.reply(code, None if pushed else remark, ext_fields=fields)

    def _check(self, ctx: RequestContext, header: SendMessageRequestHeader) -> int:
        """The send checks that apply to a reply; the queue id it is stored in."""
        if not PermName.is_writeable(self._config.broker_permission):
            raise for_code(ResponseCode.NO_PERMISSION,
                           f"the broker[{self._config.broker_ip1}] sending message is forbidden")
        if not is_valid_name(header.topic):
            raise for_code(ResponseCode.SYSTEM_ERROR, f"the topic[{header.topic}] is invalid")
        topic_config = self._topics.select_topic_config(header.topic)
        if topic_config is None and header.default_topic:
            topic_config = self._topics.create_topic_in_send_message_method(
                header.topic, header.default_topic, header.default_topic_queue_nums)
        if topic_config is None:
            raise for_code(ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!")
        if header.queue_id >= 0:
            return header.queue_id
        return random.randrange(max(topic_config.write_queue_nums, 1))

    async def _push(self, ctx: RequestContext, header: SendMessageRequestHeader, queue_id: int, body: bytes,
                    properties: dict[str, str]) -> tuple[bool, str]:
        sender = properties.get(MessageConst.REPLY_TO_CLIENT)
        if not sender:
            return False, f"reply message properties[{MessageConst.REPLY_TO_CLIENT}] is null"
        channel = self._producers.find_channel(sender)
        if not isinstance(channel, RemotingConnection):
            log.warning("push reply message fail, channel of <%s> not found", sender)
            return False, f"push reply message fail, channel of <{sender}> not found."
        pushed_props = dict(properties)
        pushed_props[MessageConst.PUSH_REPLY_TIME] = str(int(time.time() * 1000))
        push_header = ReplyMessageRequestHeader(
            producer_group=header.producer_group, topic=header.topic, default_topic=header.default_topic,
            default_topic_queue_nums=header.default_topic_queue_nums, queue_id=queue_id,
            sys_flag=header.sys_flag, born_timestamp=header.born_timestamp, flag=header.flag,
            born_host=ctx.remote_addr, store_host=self._store.store_host,
            store_timestamp=int(time.time() * 1000), properties=properties_to_string(pushed_props),
            reconsume_times=header.reconsume_times, unit_mode=header.unit_mode,
        )
        push = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, encode_header(push_header), body)
        try:
            answer = await channel.invoke(push, PUSH_TIMEOUT_S)
        except (RemotingError, TimeoutError) as exc:
            log.warning("push reply message to <%s> failed: %s", sender, exc)
            return False, f"push reply message to {sender} fail."
        if answer.code != ResponseCode.SUCCESS:
            log.warning("push reply message to <%s> answered %s: %s", sender, answer.code, answer.remark)
            return False, f"push reply message to {sender} fail."
        return True, ""
