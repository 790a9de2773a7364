"""The message rewrites of transactional messages (RocketMQ's TransactionalMessageBridge and
EndTransactionProcessor), as pure functions over the message model.

- prepare: a send with TRAN_MSG=true is stored as a normal message of RMQ_SYS_TRANS_HALF_TOPIC
  queue 0; its topic and queue id are kept in REAL_TOPIC / REAL_QID. Consumers never
  subscribe to the half topic, so it stays invisible, while the check service can walk the
  half topic's own ConsumeQueue.
- renew: before a check-back the check service puts the pending half message again at the
  end of the half queue with TRANSACTION_CHECK_TIMES incremented, so the queue's consume
  offset can move on. Every copy remembers the queue offset of the first one in
  TRAN_PREPARED_QUEUE_OFFSET (RocketMQ sets it on its immunity copies only): all copies of one
  transaction share that origin, which is how a resolution through any copy covers the others.
- commit: the real message is rebuilt from the half message (topic and queue restored, sys
  flag COMMIT, TRAN_MSG, REAL_TOPIC and REAL_QID removed) and put as a normal message.
- op: an Op message on RMQ_SYS_TRANS_OP_HALF_TOPIC (same queue id, tag ``d``, body = the half
  message's queue offset as text) records that a half message is resolved.
"""

from __future__ import annotations

import time
from typing import Final

from lakemq.broker.topic_config_manager import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from lakemq.common.message import (
    MessageConst,
    MessageExt,
    MessageExtBrokerInner,
    MessageSysFlag,
    properties_to_string,
    tags_hash_code,
)

__all__ = [
    "REMOVE_TAG",
    "TRANS_SYS_GROUP",
    "check_times",
    "is_transactional",
    "op_message",
    "origin_offset",
    "parse_op_body",
    "real_message",
    "renew_half_message",
    "restore_real_topic",
    "to_half_message",
]

REMOVE_TAG: Final = "d"  # RocketMQ's TransactionalMessageUtil.REMOVETAG
# The system consumer group whose offsets on the half and op queues the check service keeps.
TRANS_SYS_GROUP: Final = "CID_RMQ_SYS_TRANS"


def is_transactional(msg: MessageExt) -> bool:
    """TRAN_MSG=true, read like Java's Boolean.parseBoolean."""
    return msg.properties.get(MessageConst.TRANSACTION_PREPARED, "").lower() == "true"


def to_half_message(msg: MessageExtBrokerInner) -> None:
    """Rewrite a prepared send in place into the half message that is stored."""
    msg.properties[MessageConst.REAL_TOPIC] = msg.topic
    msg.properties[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
    # Transactional messages are never delayed (RocketMQ's producer drops the level; a client
    # that does not would have the store move the half message to the schedule topic, losing
    # its real topic).
    msg.properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
    msg.properties_string = properties_to_string(msg.properties)
    # Stored as a normal message of the half topic, so that topic's ConsumeQueue indexes it.
    msg.sys_flag = MessageSysFlag.reset_transaction_value(msg.sys_flag, MessageSysFlag.TRANSACTION_NOT_TYPE)
    msg.topic = TRANS_HALF_TOPIC
    msg.queue_id = 0


def origin_offset(half: MessageExt) -> int:
    """The half-queue offset of the transaction's first half message."""
    raw = half.properties.get(MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET)
    return int(raw) if raw and raw.lstrip("-").isdigit() else half.queue_offset


def check_times(half: MessageExt) -> int:
    raw = half.properties.get(MessageConst.TRANSACTION_CHECK_TIMES, "0")
    return int(raw) if raw.isdigit() else 0


def _inner(msg: MessageExt, properties: dict[str, str], store_host: str) -> MessageExtBrokerInner:
    inner = MessageExtBrokerInner(
        topic=msg.topic,
        body=msg.body,
        flag=msg.flag,
        properties=properties,
        queue_id=msg.queue_id,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_host=store_host,
        reconsume_times=msg.reconsume_times,
    )
    inner.properties_string = properties_to_string(properties)
    inner.tags_code = tags_hash_code(inner.tags)
    return inner


def renew_half_message(
    half: MessageExt, store_host: str, *, count_check: bool = True
) -> MessageExtBrokerInner:
    """The copy put back at the end of the half queue (before a check-back, counted); the
    born time is the original one, so the transaction timeout counts from the first send."""
    properties = dict(half.properties)
    properties[MessageConst.TRANSACTION_CHECK_TIMES] = str(check_times(half) + (1 if count_check else 0))
    properties[MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET] = str(origin_offset(half))
    properties[MessageConst.WAIT_STORE_MSG_OK] = "false"
    return _inner(half, properties, store_host)


def restore_real_topic(half: MessageExt) -> MessageExt:
    """The half message as its producer sent it: real topic and queue id (check-back body)."""
    props = half.properties
    return half.replace(
        topic=props.get(MessageConst.REAL_TOPIC, half.topic),
        queue_id=int(props.get(MessageConst.REAL_QUEUE_ID, half.queue_id)),
    )


def real_message(half: MessageExt, store_host: str) -> MessageExtBrokerInner:
    """The committed message: the producer's topic, queue, body and properties, sys flag
    COMMIT, pointing back at the half message through its prepared transaction offset."""
    restored = restore_real_topic(half)
    properties = dict(half.properties)
    for key in (
        MessageConst.REAL_TOPIC,
        MessageConst.REAL_QUEUE_ID,
        MessageConst.TRANSACTION_PREPARED,
        MessageConst.TRANSACTION_CHECK_TIMES,
        MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET,
    ):
        properties.pop(key, None)
    properties[MessageConst.WAIT_STORE_MSG_OK] = "false"
    inner = _inner(restored, properties, store_host)
    inner.sys_flag = MessageSysFlag.reset_transaction_value(
        half.sys_flag, MessageSysFlag.TRANSACTION_COMMIT_TYPE
    )
    inner.prepared_transaction_offset = half.commit_log_offset
    return inner


def op_message(half: MessageExt, store_host: str) -> MessageExtBrokerInner:
    """The Op message marking ``half`` resolved; it also names the transaction's origin."""
    inner = MessageExtBrokerInner(
        topic=TRANS_OP_HALF_TOPIC,
        body=str(half.queue_offset).encode("utf-8"),
        queue_id=half.queue_id,
        properties={
            MessageConst.TAGS: REMOVE_TAG,
            MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET: str(origin_offset(half)),
        },
        born_timestamp=int(time.time() * 1000),
        born_host=store_host,
        store_host=store_host,
    )
    inner.properties_string = properties_to_string(inner.properties)
    inner.tags_code = tags_hash_code(REMOVE_TAG)
    return inner


def parse_op_body(op: MessageExt) -> tuple[int, int] | None:
    """(half queue offset, origin offset) of an Op message; None when it is not one of ours."""
    if op.tags != REMOVE_TAG:
        return None
    try:
        offset = int(op.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    raw = op.properties.get(MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET, "")
    return offset, int(raw) if raw.isdigit() else offset
