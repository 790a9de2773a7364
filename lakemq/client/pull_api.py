"""Pulling one queue (RocketMQ's PullAPIWrapper): build the PULL_MESSAGE header, decode the
records the broker returns (the CommitLog bytes as stored), decompress bodies, re-check tags
on the client, and stamp each message with the queue's min/max offset.

Each queue is pulled from the broker id the last answer suggested (``suggestWhichBrokerId``:
the master, or a slave when the master's slaveReadEnable says so), falling back to any member
of the broker group when that one is gone, so consumers go on from a slave while the master is
down. A pull sent to a slave does not piggyback the consume offset (a slave keeps none)."""

from __future__ import annotations

from lakemq.client.client_api import RawPullResult
from lakemq.client.client_instance import ClientInstance
from lakemq.client.results import PullResult, PullStatus
from lakemq.client.subscription import tag_matches
from lakemq.common.constants import MASTER_ID, PullSysFlag
from lakemq.common.message import MessageConst, MessageExt
from lakemq.common.message_queue import MessageQueue
from lakemq.common.record import decode_pulled, iter_records
from lakemq.common.subscription import ExpressionType, SubscriptionData
from lakemq.errors import FrameError, LakeMQError, RecordError
from lakemq.remoting.headers import PullMessageRequestHeader, encode_header

__all__ = ["PullAPI", "decode_pull_result"]


def decode_pull_result(mq: MessageQueue, raw: RawPullResult, subscription: SubscriptionData) -> PullResult:
    msgs: list[MessageExt] = []
    if raw.status is PullStatus.FOUND:
        # Compiled (decode_pulled) unless a record needs the checks below to say what is wrong.
        tags = None if subscription.expression_type != ExpressionType.TAG or subscription.sub_all \
            else subscription.tags_set
        fast = decode_pulled(raw.body, tags, str(raw.min_offset), str(raw.max_offset), MessageConst.MIN_OFFSET,
                             MessageConst.MAX_OFFSET)
        if fast is not None:
            return PullResult(raw.status, raw.next_begin_offset, raw.min_offset, raw.max_offset, fast,
                              raw.suggest_which_broker_id)
        try:
            decoded = list(iter_records(raw.body, decompress=True))
        except (RecordError, ValueError) as exc:
            raise FrameError(f"undecodable pull response from {mq}: {exc}") from exc
        min_offset, max_offset = str(raw.min_offset), str(raw.max_offset)
        for msg in decoded:
            if not tag_matches(subscription, msg):
                continue
            properties = msg.properties
            properties[MessageConst.MIN_OFFSET] = min_offset
            properties[MessageConst.MAX_OFFSET] = max_offset
            # Users see the producer's id (UNIQ_KEY), as with the Java client's MessageClientExt.
            msg.msg_id = properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id
            msgs.append(msg)
    return PullResult(raw.status, raw.next_begin_offset, raw.min_offset, raw.max_offset, msgs,
                      raw.suggest_which_broker_id)


class PullAPI:
    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self._pull_from: dict[MessageQueue, int] = {}  # the broker id each queue's last answer suggested

    async def _addr(self, mq: MessageQueue) -> tuple[str, bool]:
        broker_id = self._pull_from.get(mq, MASTER_ID)
        found = self.instance.find_broker_addr_in_subscribe(mq.broker_name, broker_id)
        if found is None:
            await self.instance.update_route(mq.topic)
            found = self.instance.find_broker_addr_in_subscribe(mq.broker_name, broker_id)
        if found is None:
            raise LakeMQError(f"broker {mq.broker_name} of topic {mq.topic} is not in the route")
        return found

    async def pull(
        self, mq: MessageQueue, subscription: SubscriptionData, offset: int, max_nums: int, *,
        commit_offset: int = 0, suspend_ms: int = 0, timeout_ms: int = 3000, send_subscription: bool = True,
    ) -> PullResult:
        """One pull. ``suspend_ms`` > 0 asks the broker to hold the pull that long when there
        is nothing new (long polling); ``commit_offset`` > 0 piggybacks the consume offset."""
        addr, slave = await self._addr(mq)
        sys_flag = PullSysFlag.build(commit_offset=commit_offset > 0 and not slave, suspend=suspend_ms > 0,
                                     subscription=send_subscription)
        fields = encode_header(PullMessageRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
            max_msg_nums=max_nums, sys_flag=sys_flag, commit_offset=commit_offset, suspend_timeout_millis=suspend_ms,
            sub_version=subscription.sub_version,
            subscription=subscription.sub_string if send_subscription else None,
            expression_type=subscription.expression_type,
        ))
        raw = await self.instance.api.pull_message(addr, fields, timeout_ms)
        self._pull_from[mq] = raw.suggest_which_broker_id
        return decode_pull_result(mq, raw, subscription)
