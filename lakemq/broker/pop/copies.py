"""Copies of a popped message made when its delivery ends without an ack: to the group's pop
retry topic (delivered again, one attempt more) or to its DLQ (``%DLQ%group``).

A copy keeps the body, flag, properties (the UNIQ_KEY too, so a 5.x client sees the same
message id on every attempt) and born time; RETRY_TOPIC names the topic the consumer reads
(the 4.x/5.x clients show the message under it) and ORIGIN_MESSAGE_ID the first stored copy.
Delay and timer properties are dropped: the original was already due. A revived copy goes to
queue 0 and names the delivery it ends in REVIVED_PROPERTY, so that a revive cut short by a
crash can tell which copies it already made (lakemq.broker.pop.service).
"""

from __future__ import annotations

import random
from typing import Final

from lakemq.broker.topic_config_manager import TopicConfigManager
from lakemq.common.codes import ResponseCode
from lakemq.common.constants import PermName
from lakemq.common.message import (
    MessageConst,
    MessageExt,
    MessageExtBrokerInner,
    MessageSysFlag,
    tags_hash_code,
)
from lakemq.errors import for_code
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut

__all__ = ["REVIVED_PROPERTY", "put_copy"]

REVIVED_PROPERTY: Final = "POP_REVIVED"  # "{revive id} {group} {topic} {queueId} {offset}"

_DUE_PROPERTIES: Final = (MessageConst.DELAY_TIME_LEVEL, "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


def put_copy(store: MessageStore, topics: TopicConfigManager, msg: MessageExt, *, target: str,
             queue_nums: int, origin_topic: str, reconsume_times: int, revived: str | None = None) -> None:
    """Store a copy of ``msg`` in ``target`` (a pop retry topic or a DLQ, created with
    ``queue_nums`` queues if missing); raises BrokerError when the store refuses it."""
    config = topics.create_topic_in_send_message_back_method(target, queue_nums,
                                                               PermName.PERM_READ | PermName.PERM_WRITE)
    properties = dict(msg.properties)
    for key in _DUE_PROPERTIES:
        properties.pop(key, None)
    properties.setdefault(MessageConst.RETRY_TOPIC, origin_topic)
    properties.setdefault(MessageConst.ORIGIN_MESSAGE_ID, msg.msg_id)
    properties.pop(REVIVED_PROPERTY, None)
    if revived is not None:
        properties[REVIVED_PROPERTY] = revived
    inner = MessageExtBrokerInner(
        topic=target,
        body=msg.body,
        flag=msg.flag,
        properties=properties,
        queue_id=0 if revived is not None else random.randrange(max(config.write_queue_nums, 1)),
        sys_flag=MessageSysFlag.reset_transaction_value(msg.sys_flag, MessageSysFlag.TRANSACTION_NOT_TYPE),
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_host=store.store_host,
        reconsume_times=reconsume_times,
    )
    inner.tags_code = tags_hash_code(inner.tags)
    result = store.put(MessagesPut.of(inner))
    if result.append_result is None:  # not stored (a flush that timed out still stored it)
        raise for_code(ResponseCode.SYSTEM_ERROR, f"copy to {target} failed: {result.status.name} {result.remark}")
