"""Timer messages: the put-time rewrite to the timer topic and the keys that name them.

A message asking for a delivery time (RocketMQ 5's TIMER_DELIVER_MS, an epoch ms, or
TIMER_DELAY_SEC / TIMER_DELAY_MS, a delay from now) that lies in the future is stored under
``rmq_sys_wheel_timer`` queue 0 with its real topic and queue id in REAL_TOPIC / REAL_QID and
its due time in TIMER_OUT_MS, as RocketMQ's HookUtils does; the timer service
(lakemq.store.timer) puts it back under its real topic when due. TIMER_OUT_MS stays on the
delivered copy, which is what tells the put path not to time it again. A due time at or
before now is stored as a plain message. A delay beyond ``timerMaxDelaySec`` is refused.

Unlike RocketMQ the due time is not rounded down to the timer's precision: a message is never
delivered before the time it asked for.
"""

from __future__ import annotations

import time
from typing import Final

from lakemq.common.message import MessageConst, MessageExtBrokerInner, properties_to_string, tags_hash_code
from lakemq.store.delay_levels import is_delay_candidate
from lakemq.store.results import PutMessageResult, PutMessageStatus

__all__ = ["RECALL_TAG", "TIMER_TOPIC", "delete_key", "is_timer_request", "recall_marker", "rewrite_timer_message"]

TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
RECALL_TAG: Final = "_RECALL_TAG_"  # RocketMQ's tag of a recall's marker

_ASKS: Final = (MessageConst.TIMER_DELIVER_MS, MessageConst.TIMER_DELAY_SEC, MessageConst.TIMER_DELAY_MS)


def delete_key(topic: str, uniq_key: str) -> str:
    """What names a timer message to a recall (RocketMQ's TimerMessageStore.buildDeleteKey)."""
    return f"{topic}+{uniq_key}"


def is_timer_request(msg: MessageExtBrokerInner) -> bool:
    """Whether the put must look at ``msg``'s delivery time: it asks for one, was not timed
    already (TIMER_OUT_MS, or already in the timer topic), and is not a transaction's half
    (stored with TRAN_MSG=true and no transaction type: its commit is timed instead)."""
    props = msg.properties
    return (
        any(k in props for k in _ASKS)
        and MessageConst.TIMER_OUT_MS not in props
        and msg.topic != TIMER_TOPIC
        and is_delay_candidate(msg.sys_flag)
        and props.get(MessageConst.TRANSACTION_PREPARED, "").lower() != "true"
    )


def _due_ms(props: dict[str, str], now_ms: int) -> int:
    """The delivery time asked for; ValueError when the property is not a whole number."""
    if MessageConst.TIMER_DELAY_SEC in props:
        return now_ms + int(props[MessageConst.TIMER_DELAY_SEC]) * 1000
    if MessageConst.TIMER_DELAY_MS in props:
        return now_ms + int(props[MessageConst.TIMER_DELAY_MS])
    return int(props[MessageConst.TIMER_DELIVER_MS])


def rewrite_timer_message(
    msg: MessageExtBrokerInner, *, enabled: bool, max_delay_sec: int, now_ms: int | None = None
) -> PutMessageResult | None:
    """Move a timer message (is_timer_request) to the timer topic in place; a refusal when it
    cannot be timed (nothing changed then), None otherwise. A DELAY level wins over the timer
    properties, which are dropped, as RocketMQ does."""
    props = msg.properties
    if msg.delay_time_level > 0:
        for key in _ASKS:
            props.pop(key, None)
        msg.properties_string = ""
        return None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    try:
        due = _due_ms(props, now)
    except ValueError:
        asked = {k: props[k] for k in _ASKS if k in props}
        return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"timer message: bad delivery time {asked}")
    if due <= now:
        return None  # due already: stored and delivered as a plain message
    if not enabled:
        return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                remark="timer messages are disabled on this broker (timerWheelEnable=false)")
    if due - now > max_delay_sec * 1000:
        return PutMessageResult(
            PutMessageStatus.MESSAGE_ILLEGAL,
            remark=f"timer message: delivery in {(due - now) // 1000} s exceeds the broker's maximum "
            f"delay of {max_delay_sec} s (timerMaxDelaySec)")
    props[MessageConst.TIMER_OUT_MS] = str(due)
    props[MessageConst.REAL_TOPIC] = msg.topic
    props[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
    msg.properties_string = ""
    msg.topic = TIMER_TOPIC
    msg.queue_id = 0
    return None


def recall_marker(key: str, uniq_key: str, due_ms: int, store_host: str) -> MessageExtBrokerInner:
    """The record that recalls the timer message ``key`` (delete_key): stored in the timer
    queue with the message's due time (already timed: TIMER_OUT_MS), never delivered."""
    props = {
        MessageConst.TAGS: RECALL_TAG,
        MessageConst.TIMER_DEL_UNIQKEY: key,
        MessageConst.TIMER_OUT_MS: str(due_ms),
        MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq_key,
    }
    marker = MessageExtBrokerInner(
        topic=TIMER_TOPIC, body=b"0", queue_id=0, properties=props, born_timestamp=int(time.time() * 1000),
        born_host=store_host, store_host=store_host,
    )
    marker.properties_string = properties_to_string(props)
    marker.tags_code = tags_hash_code(RECALL_TAG)
    return marker
