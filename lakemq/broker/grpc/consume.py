"""The consumer RPCs of ``apache.rocketmq.v2.MessagingService`` over the broker's POP core
(lakemq.broker.pop.service.PopService, the one the remoting POP codes use):

- ReceiveMessage: one pop of the group's next messages of the topic (every readable queue,
  the group's pop retry topic first), filtered by the request's TAG or SQL92 expression, at
  most ``batch_size`` (32), FIFO when the group consumes orderly. It long-polls up to the
  request's ``long_polling_timeout``, cut short so the answer beats the call's deadline. The
  answer streams as RocketMQ's proxy streams it: the status, then each message (its receipt
  handle, delivery attempt and invisible duration), then the delivery timestamp; nothing
  found is one MESSAGE_NOT_FOUND status. ``auto_renew`` (push consumers) pops for the renew
  slice (``grpcRenewSliceMillis``) and renews (lakemq.broker.grpc.renew); otherwise ``invisible_duration`` is required.
- AckMessage: every entry acked (together: the POP thread journals them in one record), one
  result each; the response's status is OK, the common failure, or MULTIPLE_RESULTS.
- ChangeInvisibleDuration: the delivery hidden for the new duration; its new receipt handle.
- ForwardMessageToDeadLetterQueue: the delivery moved to the group's DLQ now.

A handle that does not parse or whose delivery is over answers INVALID_RECEIPT_HANDLE; the
core's other refusals map as the proxy maps them (lakemq.broker.grpc.status). A slave broker
has no POP core (its master's journal is the one): it answers FORBIDDEN saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Final

from google.protobuf.duration_pb2 import Duration

from lakemq.broker.config import BrokerConfig
from lakemq.broker.filter import check_expression_type, message_filter_for
from lakemq.broker.grpc.convert import millis, v2_message
from lakemq.broker.grpc.renew import ReceiptRenewer
from lakemq.broker.grpc.status import OK, status, status_of_response
from lakemq.broker.pop.model import PopRequest
from lakemq.broker.pop.receipt import ReceiptHandle
from lakemq.broker.pop.service import MAX_POP_MESSAGES, PopService
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.common.constants import PermName
from lakemq.common.subscription import ExpressionType
from lakemq.errors import BrokerError, FilterExpressionError, ReceiptHandleError
from lakemq.filter import parse_subscription
from lakemq.grpc._pb import definition_pb2 as v2
from lakemq.grpc._pb import service_pb2 as rpc
from lakemq.store.filter import MessageFilter

__all__ = ["Consumption", "invisible_duration_ms", "requested_times"]

log = logging.getLogger(__name__)

_MAX_INVISIBLE_MS: Final = 12 * 3600_000  # RocketMQ proxy's maxInvisibleTimeMills
# What a long poll leaves of the call's deadline for the answer to travel back.
_DEADLINE_MARGIN_S: Final = 1.0
_EXPRESSION_TYPES: Final = {v2.FilterType.TAG: ExpressionType.TAG, v2.FilterType.SQL: ExpressionType.SQL92,
                            v2.FilterType.FILTER_TYPE_UNSPECIFIED: ExpressionType.TAG}


class Consumption:
    def __init__(self, config: BrokerConfig, groups: SubscriptionGroupManager, pop: PopService | None,
                 long_polling_ms: int) -> None:
        self._config = config
        self._groups = groups
        self._pop = pop
        self._long_polling_ms = long_polling_ms
        self.renewer = None if pop is None else ReceiptRenewer(
            pop, slice_ms=config.grpc_renew_slice_millis, ahead_ms=config.grpc_renew_ahead_millis,
            max_ms=config.grpc_renew_max_millis)

    def _unserved(self) -> v2.Status | None:
        if self._pop is None:
            return status(v2.Code.FORBIDDEN, f"broker {self._config.broker_name} is a slave: POP consumption "
                                             "(ReceiveMessage, acks) is served by its master")
        if not PermName.is_readable(self._config.broker_permission):
            return status(v2.Code.FORBIDDEN, f"the broker[{self._config.broker_ip1}] pop message is forbidden")
        return None

    async def _handle(self, group: str, text: str) -> ReceiptHandle:
        """The delivery's current handle (a renewed one's, else the text's; ReceiptHandleError)."""
        if self.renewer is not None:
            renewed = await self.renewer.take(group, text)
            if renewed is not None:
                return renewed
        return ReceiptHandle.parse(text)

    # -- ReceiveMessage -------------------------------------------------------------------

    async def receive(self, req: rpc.ReceiveMessageRequest, client_id: str,
                      time_remaining: float | None) -> AsyncIterator[rpc.ReceiveMessageResponse]:
        refused = self._unserved()
        if refused is not None:
            yield rpc.ReceiveMessageResponse(status=refused)
            return
        assert self._pop is not None
        group, topic = req.group.name, req.message_queue.topic.name
        asked = requested_times(req, None if self.renewer is None else self.renewer.slice_ms, self._long_polling_ms)
        if isinstance(asked, v2.Status):
            yield rpc.ReceiveMessageResponse(status=asked)
            return
        invisible_ms, poll_ms = asked
        try:
            message_filter = self._filter(topic, req)
        except (FilterExpressionError, BrokerError) as exc:
            yield rpc.ReceiveMessageResponse(status=status(v2.Code.ILLEGAL_FILTER_EXPRESSION, str(exc)))
            return
        config = await asyncio.to_thread(self._groups.find_subscription_group_config, group)
        if time_remaining is not None:
            poll_ms = min(poll_ms, int((time_remaining - _DEADLINE_MARGIN_S) * 1000))
        try:
            result = await self._pop.pop(PopRequest(
                group=group, topic=topic, max_messages=min(req.batch_size, MAX_POP_MESSAGES),
                invisible_ms=invisible_ms, message_filter=message_filter, poll_ms=max(poll_ms, 0),
                fifo=config is not None and config.consume_message_orderly, init_from_min=True))
        except BrokerError as exc:
            yield rpc.ReceiveMessageResponse(status=status_of_response(exc.code, exc.remark))
            return
        if not result.messages:
            yield rpc.ReceiveMessageResponse(status=status(v2.Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield rpc.ReceiveMessageResponse(status=OK)
        for popped in result.messages:
            message = v2_message(popped.message)
            message.topic.name = popped.topic  # a pop retry copy is read as its topic's
            sp = message.system_properties
            sp.receipt_handle = popped.handle.encode()
            sp.delivery_attempt = popped.attempt
            sp.invisible_duration.FromMilliseconds(invisible_ms)
            if req.auto_renew and self.renewer is not None:
                self.renewer.track(client_id, group, topic, popped.handle)
            yield rpc.ReceiveMessageResponse(message=message)
        delivered = rpc.ReceiveMessageResponse()
        delivered.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        yield delivered

    def _filter(self, topic: str, req: rpc.ReceiveMessageRequest) -> MessageFilter | None:
        if not req.HasField("filter_expression"):
            return None
        expression = req.filter_expression
        subscription = parse_subscription(topic, expression.expression or "*",
                                          _EXPRESSION_TYPES.get(expression.type, ExpressionType.TAG))
        check_expression_type(subscription, self._config.enable_property_filter)
        return message_filter_for(subscription)

    # -- acks and the rest ----------------------------------------------------------------

    async def ack(self, req: rpc.AckMessageRequest) -> rpc.AckMessageResponse:
        refused = self._unserved()
        if refused is not None:
            return rpc.AckMessageResponse(status=refused)
        if not req.entries:
            return rpc.AckMessageResponse(status=status(v2.Code.BAD_REQUEST, "no entry to ack"))
        group, topic = req.group.name, req.topic.name
        results = await asyncio.gather(*(self._ack_one(group, topic, entry) for entry in req.entries))
        codes = {r.status.code for r in results}
        if codes == {v2.Code.OK}:
            overall = OK
        elif len(codes) == 1:
            overall = results[0].status
        else:
            overall = status(v2.Code.MULTIPLE_RESULTS, "some entries were not acked: see each entry's status")
        return rpc.AckMessageResponse(status=overall, entries=results)

    async def _ack_one(self, group: str, topic: str, entry: rpc.AckMessageEntry) -> rpc.AckMessageResultEntry:
        assert self._pop is not None
        result = rpc.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle)
        try:
            await self._pop.ack(group, topic, await self._handle(group, entry.receipt_handle))
        except BrokerError as exc:
            result.status.CopyFrom(_refusal(exc))
        else:
            result.status.CopyFrom(OK)
        return result

    async def change_invisible(self, req: rpc.ChangeInvisibleDurationRequest) -> rpc.ChangeInvisibleDurationResponse:
        refused = self._unserved()
        if refused is not None:
            return rpc.ChangeInvisibleDurationResponse(status=refused)
        assert self._pop is not None
        invisible_ms = invisible_duration_ms(req.invisible_duration)
        if isinstance(invisible_ms, v2.Status):
            return rpc.ChangeInvisibleDurationResponse(status=invisible_ms)
        group = req.group.name
        try:
            new = await self._pop.change_invisible(group, req.topic.name,
                                                   await self._handle(group, req.receipt_handle), invisible_ms)
        except BrokerError as exc:
            return rpc.ChangeInvisibleDurationResponse(status=_refusal(exc))
        return rpc.ChangeInvisibleDurationResponse(status=OK, receipt_handle=new.encode())

    async def forward_to_dlq(self, req: rpc.ForwardMessageToDeadLetterQueueRequest,
                             ) -> rpc.ForwardMessageToDeadLetterQueueResponse:
        refused = self._unserved()
        if refused is not None:
            return rpc.ForwardMessageToDeadLetterQueueResponse(status=refused)
        assert self._pop is not None
        group = req.group.name
        try:
            await self._pop.forward_to_dlq(group, req.topic.name, await self._handle(group, req.receipt_handle))
        except BrokerError as exc:
            return rpc.ForwardMessageToDeadLetterQueueResponse(status=_refusal(exc))
        log.info("5.x consumer of %s forwarded message %s to the DLQ after %d attempts", group, req.message_id,
                 req.delivery_attempt)
        return rpc.ForwardMessageToDeadLetterQueueResponse(status=OK)

    def drop_client(self, client_id: str) -> None:
        if self.renewer is not None:
            self.renewer.drop_client(client_id)

    async def close(self) -> None:
        if self.renewer is not None:
            await self.renewer.close()


def invisible_duration_ms(duration: Duration | None) -> int | v2.Status:
    """A requested invisible duration (none: 0) in ms, or ILLEGAL_INVISIBLE_TIME when it is not
    a valid duration within (0, 12 h]."""
    invisible_ms = 0 if duration is None else millis(duration)
    if invisible_ms is None or not 0 < invisible_ms <= _MAX_INVISIBLE_MS:
        why = "is not a valid duration" if invisible_ms is None else f"{invisible_ms} ms is not in (0, {_MAX_INVISIBLE_MS}] ms"
        return status(v2.Code.ILLEGAL_INVISIBLE_TIME, f"invisible_duration {why}")
    return invisible_ms


def requested_times(req: rpc.ReceiveMessageRequest, renew_slice_ms: int | None,
                    default_poll_ms: int) -> tuple[int, int] | v2.Status:
    """(invisible ms, long-polling ms) a receive asks for, or the status refusing it.
    ``auto_renew`` (push consumers) pops for the renew slice (``renew_slice_ms``; None on a
    slave, which serves no POP); otherwise ``invisible_duration`` is required."""
    if req.batch_size <= 0:
        return status(v2.Code.BAD_REQUEST, "batch_size must be positive")
    if req.auto_renew and renew_slice_ms is not None:
        invisible_ms: int | v2.Status = renew_slice_ms
    else:
        invisible_ms = invisible_duration_ms(req.invisible_duration if req.HasField("invisible_duration") else None)
        if isinstance(invisible_ms, v2.Status):
            return invisible_ms
    poll_ms = millis(req.long_polling_timeout) if req.HasField("long_polling_timeout") else default_poll_ms
    if poll_ms is None:
        return status(v2.Code.ILLEGAL_POLLING_TIME, "long_polling_timeout is not a valid duration")
    return invisible_ms, poll_ms


def _refusal(exc: BrokerError) -> v2.Status:
    if isinstance(exc, ReceiptHandleError):
        return status(v2.Code.INVALID_RECEIPT_HANDLE, exc.remark)
    return status_of_response(exc.code, exc.remark)
