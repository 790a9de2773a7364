"""RECALL_MESSAGE (RocketMQ 5.3's RecallMessageProcessor): cancel a timer message before it is
due, by the recall handle its send answered (lakemq.common.recall_handle).

The checks are RocketMQ's (a writeable master, the topic exists, the handle names this topic and
this broker); the recall itself is the store's (MessageStore.recall_timer_message). Both
protocol faces share :func:`recall_message` (the recall) and :func:`recall_handle_of` (the
handle a send answers). Unlike RocketMQ, which answers SUCCESS for any handle still in the
future, the answer says what happened: recalled, already delivered, already recalled, unknown.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lakemq.broker.config import BrokerConfig
from lakemq.broker.topic_config_manager import RETRY_GROUP_TOPIC_PREFIX, TopicConfigManager
from lakemq.common.codes import ResponseCode
from lakemq.common.constants import PermName
from lakemq.common.message import MessageConst, MessageExtBrokerInner
from lakemq.common.recall_handle import RecallHandle
from lakemq.errors import for_code
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import (
    RecallMessageRequestHeader,
    RecallMessageResponseHeader,
    decode_header,
    encode_header,
)
from lakemq.store.message_store import MessageStore
from lakemq.store.results import PutMessageResult
from lakemq.store.timer import RecallOutcome
from lakemq.store.timer_message import TIMER_TOPIC

__all__ = ["RecallMessageProcessor", "RecallResult", "recall_handle_of", "recall_message"]

log = logging.getLogger(__name__)

_CODES = {
    RecallOutcome.RECALLED: ResponseCode.SUCCESS,
    RecallOutcome.ALREADY_DELIVERED: ResponseCode.ILLEGAL_OPERATION,
    RecallOutcome.ALREADY_RECALLED: ResponseCode.ILLEGAL_OPERATION,
    RecallOutcome.NOT_FOUND: ResponseCode.ILLEGAL_OPERATION,
    RecallOutcome.FAILED: ResponseCode.SYSTEM_ERROR,
}


@dataclass(frozen=True, slots=True)
class RecallResult:
    code: ResponseCode
    remark: str
    message_id: str  # the UNIQ_KEY the handle names ("" when the handle is unreadable)


def recall_handle_of(broker_name: str, msg: MessageExtBrokerInner, result: PutMessageResult) -> str | None:
    """The recall handle a send answers (both faces): for a message the store timed (moved
    to the timer topic; a retry topic's are not recallable, as in RocketMQ), else None."""
    real_topic = msg.properties.get(MessageConst.REAL_TOPIC, "")
    if (result.append_result is None or msg.topic != TIMER_TOPIC
            or real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX)):
        return None
    due = int(msg.properties[MessageConst.TIMER_OUT_MS])
    return RecallHandle.for_due(real_topic, broker_name, due, msg.unique_key or result.append_result.msg_id).encode()


def recall_message(config: BrokerConfig, store: MessageStore, topics: TopicConfigManager, topic: str,
                   handle_text: str) -> RecallResult:
    """The recall both protocol faces answer with: a response code and its remark."""
    if store.is_slave:
        return RecallResult(ResponseCode.SLAVE_NOT_AVAILABLE, "recall failed, the broker is a SLAVE", "")
    if not PermName.is_writeable(config.broker_permission):
        return RecallResult(ResponseCode.SERVICE_NOT_AVAILABLE, "recall failed, the broker is not writeable", "")
    if topics.select_topic_config(topic) is None:
        return RecallResult(ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist", "")
    try:
        handle = RecallHandle.decode(handle_text)
    except ValueError as exc:
        return RecallResult(ResponseCode.ILLEGAL_OPERATION, str(exc), "")
    if handle.topic != topic:
        return RecallResult(ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match", handle.message_id)
    if handle.broker_name != config.broker_name:
        return RecallResult(ResponseCode.ILLEGAL_OPERATION,
                            f"recall failed, the handle is broker {handle.broker_name}'s, not {config.broker_name}'s",
                            handle.message_id)
    outcome = store.recall_timer_message(topic, handle.message_id, handle.due_ms)
    remark = "recalled" if outcome is RecallOutcome.RECALLED else f"recall failed, {outcome.value}"
    return RecallResult(_CODES[outcome], remark, handle.message_id)


class RecallMessageProcessor:
    """Registered with its own pool: a recall stores a marker (a put that may wait for the disk)."""

    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager) -> None:
        self._config = config
        self._store = store
        self._topics = topics

    def reject_request(self) -> bool:
        return False

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(RecallMessageRequestHeader, request.ext_fields)
        result = recall_message(self._config, self._store, self._topics, header.topic, header.recall_handle)
        if result.code is not ResponseCode.SUCCESS:
            log.info("RECALL_MESSAGE of %s from %s: %s", header.topic, ctx.remote_addr, result.remark)
            raise for_code(result.code, result.remark)
        return request.reply(ResponseCode.SUCCESS, result.remark,
                             encode_header(RecallMessageResponseHeader(result.message_id)))
