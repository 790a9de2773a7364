"""POP on the 4.x remoting face, with RocketMQ 5's request codes and headers: POP_MESSAGE
(200050), ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053), answered as a
RocketMQ 5 broker answers a 5.x remoting client (DefaultMQPushConsumer in pop mode,
DefaultMQPullConsumer's pop). Each hands the request to :class:`PopService` and writes its
answer; no POP logic lives here.

A pop that finds nothing answers POLLING_TIMEOUT after its ``pollTime`` (capped by
``maxSuspendTimeoutMillis``); found messages are the body, as stored, and the response header
carries what the client builds each receipt handle from.
"""

from __future__ import annotations

from lakemq.broker.config import BrokerConfig
from lakemq.broker.filter import check_expression_type, message_filter_for
from lakemq.broker.pop.model import PopRequest, PopResult
from lakemq.broker.pop.receipt import ORDER_REVIVE_QID, ReceiptHandle
from lakemq.broker.pop.service import PopService
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.constants import PermName
from lakemq.errors import for_code
from lakemq.filter import parse_subscription
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import decode_header, encode_header
from lakemq.remoting.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)

__all__ = ["POP_CODES", "PopProcessor"]

POP_CODES = (RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.CHANGE_MESSAGE_INVISIBLETIME)
_CONSUME_INIT_MIN = 0  # RocketMQ's ConsumeInitMode.MIN (MAX is 1)


class PopProcessor:
    def __init__(self, config: BrokerConfig, service: PopService) -> None:
        self._config = config
        self._service = service

    def reject_request(self) -> bool:
        return False

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        if not PermName.is_readable(self._config.broker_permission):
            raise for_code(ResponseCode.NO_PERMISSION,
                           f"the broker[{self._config.broker_ip1}] pop message is forbidden")
        if request.code == RequestCode.POP_MESSAGE:
            return await self._pop(request)
        if request.code == RequestCode.ACK_MESSAGE:
            ack = decode_header(AckMessageRequestHeader, request.ext_fields)
            handle = ReceiptHandle.parse(ack.extra_info, ack.offset)
            await self._service.ack(ack.consumer_group, ack.topic, handle)
            return request.reply(ResponseCode.SUCCESS)
        change = decode_header(ChangeInvisibleTimeRequestHeader, request.ext_fields)
        handle = ReceiptHandle.parse(change.extra_info, change.offset)
        new = await self._service.change_invisible(change.consumer_group, change.topic, handle,
                                                   change.invisible_time)
        fields = encode_header(ChangeInvisibleTimeResponseHeader(new.pop_time, new.invisible_ms, new.revive_qid))
        return request.reply(ResponseCode.SUCCESS, ext_fields=fields)

    async def _pop(self, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(PopMessageRequestHeader, request.ext_fields)
        message_filter = None
        if header.exp is not None:
            subscription = parse_subscription(header.topic, header.exp, header.exp_type)
            check_expression_type(subscription, self._config.enable_property_filter)
            message_filter = message_filter_for(subscription)
        result = await self._service.pop(PopRequest(
            group=header.consumer_group,
            topic=header.topic,
            max_messages=header.max_msg_nums,
            invisible_ms=header.invisible_time,
            queue_id=None if header.queue_id < 0 else header.queue_id,
            message_filter=message_filter,
            poll_ms=max(min(header.poll_time, self._config.max_suspend_timeout_millis), 0),
            fifo=header.order,
            init_from_min=header.init_mode == _CONSUME_INIT_MIN,
        ))
        fields = encode_header(_response_header(result, header.order))
        if not result.messages:
            return request.reply(ResponseCode.POLLING_TIMEOUT, "no new message", ext_fields=fields)
        return request.reply(ResponseCode.SUCCESS, ext_fields=fields,
                             body=b"".join(m.record for m in result.messages))


def _response_header(result: PopResult, fifo: bool) -> PopMessageResponseHeader:
    starts: dict[tuple[int, int], int] = {}
    offsets: dict[tuple[int, int], list[int]] = {}
    counts: list[str] = []
    for popped in result.messages:
        handle = popped.handle
        key = (1 if handle.retry else 0, handle.queue_id)
        starts.setdefault(key, handle.ck_offset)
        offsets.setdefault(key, []).append(handle.offset)
        if fifo:
            counts.append(f"{key[0]} qo{handle.queue_id}%{handle.offset} {popped.attempt - 1}")
    return PopMessageResponseHeader(
        pop_time=result.pop_time,
        invisible_time=result.invisible_ms,
        revive_qid=ORDER_REVIVE_QID if fifo else 0,
        rest_num=result.rest,
        start_offset_info=";".join(f"{t} {q} {o}" for (t, q), o in starts.items()) or None,
        msg_offset_info=";".join(f"{t} {q} {','.join(map(str, o))}" for (t, q), o in offsets.items()) or None,
        order_count_info=";".join(counts) or None,
    )
