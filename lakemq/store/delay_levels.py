"""Delay levels and the put-time rewrite of a delayed message (RocketMQ's schedule topic).

A message with DELAY = n > 0 is stored under SCHEDULE_TOPIC_XXXX, queue n - 1 (n clamped to
the highest level), with its real topic and queue id kept in REAL_TOPIC / REAL_QID. Its
ConsumeQueue tagsCode is the delivery time: store time + the level's delay. The schedule
service re-puts it under the real topic when due.
"""

from __future__ import annotations

from typing import Final

from lakemq.common.message import MessageConst, MessageExtBrokerInner, MessageSysFlag
from lakemq.errors import ConfigError

__all__ = ["SCHEDULE_TOPIC", "DelayLevels", "is_delay_candidate", "rewrite_delayed_message"]

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"

_UNIT_MS: Final = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class DelayLevels:
    """The parsed ``messageDelayLevel`` table: level 1 is the first entry."""

    __slots__ = ("delays_ms",)

    def __init__(self, spec: str) -> None:
        delays: list[int] = []
        for item in spec.split():
            unit = _UNIT_MS.get(item[-1:])
            if unit is None or not item[:-1].isdigit():
                raise ConfigError(f"messageDelayLevel: bad level {item!r} (expected e.g. 5s, 2m, 1h, 1d)")
            delays.append(int(item[:-1]) * unit)
        if not delays:
            raise ConfigError("messageDelayLevel is empty")
        self.delays_ms: tuple[int, ...] = tuple(delays)

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    def clamp(self, level: int) -> int:
        return min(level, self.max_level)

    def delay_ms(self, level: int) -> int:
        return self.delays_ms[self.clamp(level) - 1]

    def deliver_timestamp(self, level: int, store_timestamp: int) -> int:
        """The ConsumeQueue tagsCode of a delayed message."""
        return store_timestamp + self.delay_ms(level)

    @staticmethod
    def queue_id_to_level(queue_id: int) -> int:
        return queue_id + 1


def is_delay_candidate(sys_flag: int) -> bool:
    """Only normal and commit-type messages are delayed (RocketMQ: half messages never are)."""
    tran = MessageSysFlag.transaction_value(sys_flag)
    return tran in (MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE)


def rewrite_delayed_message(msg: MessageExtBrokerInner, levels: DelayLevels) -> bool:
    """Move a delayed message to the schedule topic in place; True when it was rewritten."""
    level = msg.delay_time_level
    if level <= 0 or not is_delay_candidate(msg.sys_flag):
        return False
    level = levels.clamp(level)
    msg.properties[MessageConst.DELAY_TIME_LEVEL] = str(level)
    msg.properties[MessageConst.REAL_TOPIC] = msg.topic
    msg.set_property(MessageConst.REAL_QUEUE_ID, str(msg.queue_id))
    msg.topic = SCHEDULE_TOPIC
    msg.queue_id = level - 1
    return True
