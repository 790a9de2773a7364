"""The producer's sending machinery: route lookup (with topic auto-creation through the
TBW102 route), queue selection, the send retry loop, and latency fault bookkeeping.

Retry policy (SEEDS_DIGEST section 7, RocketMQ's sendDefaultImpl): a failed attempt is
retried at once on another broker, except flow-control refusals (SYSTEM_BUSY,
TOO_MANY_REQUESTS), which wait with exponential backoff first. Errors that are the
message's fault are raised at once. The time budget covers the attempts, not the waits the
broker asked for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from enum import Enum

from lakemq.client.backoff import Backoff
from lakemq.client.client_instance import ClientInstance
from lakemq.client.config import ProducerConfig
from lakemq.client.fault import LatencyFaultTolerance
from lakemq.client.results import SendResult, SendStatus
from lakemq.client.route import TopicPublishInfo
from lakemq.common.codes import ResponseCode
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import BrokerError, LakeMQError, RemotingError, RemotingTimeoutError
from lakemq.remoting.bodies import QueueData, TopicRouteData
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.headers import send_header_v2_fields

__all__ = ["DirectSend", "PreparedMessage", "RetryAction", "Sender", "classify_failure"]

log = logging.getLogger(__name__)

# Response codes after which another broker may well take the message.
RETRY_RESPONSE_CODES = frozenset({
    ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
    ResponseCode.NO_PERMISSION, ResponseCode.NO_BUYER_ID, ResponseCode.NOT_IN_CURRENT_UNIT,
})
FLOW_CONTROL_CODES = frozenset({ResponseCode.SYSTEM_BUSY, ResponseCode.TOO_MANY_REQUESTS})


class RetryAction(Enum):
    RETRY = "RETRY"  # at once, on another broker if there is one
    BACKOFF = "BACKOFF"  # after an exponential backoff delay
    RAISE = "RAISE"  # the message's own fault: retrying cannot help


def classify_failure(exc: BaseException) -> RetryAction:
    if isinstance(exc, RemotingError):
        return RetryAction.RETRY if exc.retriable else RetryAction.RAISE
    if isinstance(exc, BrokerError):
        if exc.code in FLOW_CONTROL_CODES:
            return RetryAction.BACKOFF
        return RetryAction.RETRY if exc.code in RETRY_RESPONSE_CODES else RetryAction.RAISE
    return RetryAction.RAISE


class DirectSend:
    """A send's first attempt, made ready for its caller to write (Sender.first_attempt): the
    request to write to ``addr`` for queue ``mq``."""

    __slots__ = ("addr", "attempts", "mq", "msg", "request", "timeout_ms")

    def __init__(self, msg: PreparedMessage, mq: MessageQueue, addr: str, request: RemotingCommand, attempts: int,
                 timeout_ms: int) -> None:
        self.msg, self.mq, self.addr, self.request = msg, mq, addr, request
        self.attempts, self.timeout_ms = attempts, timeout_ms


@dataclass(slots=True)
class PreparedMessage:
    """A message as it goes on the wire: body possibly compressed or batch-encoded. Not
    frozen: a frozen dataclass's ``__init__`` costs 2 us more, once per send."""

    topic: str
    body: bytes
    flag: int
    sys_flag: int
    properties: str
    uniq_id: str
    batch: bool = False
    reconsume_times: int = 0
    max_reconsume_times: int | None = None


def _derived_route(default: TopicRouteData, queue_nums: int) -> TopicRouteData:
    """A new topic's route borrowed from TBW102: the brokers that allow auto-creation, with
    at most ``queue_nums`` queues each; the broker creates the topic on the first send."""
    queues = tuple(
        QueueData(q.broker_name, min(queue_nums, q.read_queue_nums), min(queue_nums, q.write_queue_nums),
                  q.perm, q.topic_sys_flag)
        for q in default.queue_datas
    )
    return TopicRouteData(queues, default.broker_datas)


class Sender:
    def __init__(self, instance: ClientInstance, group: str, config: ProducerConfig) -> None:
        self.instance = instance
        self.group = group
        self.config = config
        self.fault = LatencyFaultTolerance()
        self.backoff = Backoff()
        self.publish_info: dict[str, TopicPublishInfo] = {}

    def on_route(self, topic: str, route: TopicRouteData) -> None:
        if topic in self.publish_info:
            self.publish_info[topic] = TopicPublishInfo(topic, route)

    async def find_publish_info(self, topic: str) -> TopicPublishInfo:
        info = self.publish_info.get(topic)
        if info is not None and info.ok():
            return info
        self.publish_info.setdefault(topic, TopicPublishInfo(topic, TopicRouteData((), ())))
        route = await self.instance.update_route(topic)
        if route is None:
            default = await self.instance.update_route(self.config.create_topic_key)
            if default is not None:
                route = _derived_route(default, self.config.default_topic_queue_nums)
        info = TopicPublishInfo(topic, route or TopicRouteData((), ()))
        self.publish_info[topic] = info
        if not info.ok():
            raise LakeMQError(f"no route for topic {topic}: create it first or enable autoCreateTopicEnable")
        return info

    def select_queue(self, info: TopicPublishInfo, last_broker: str | None) -> MessageQueue:
        if self.config.send_latency_fault_enable:
            return info.select_one(last_broker, available=self.fault.is_available)
        return info.select_one(last_broker)

    def _fields(self, msg: PreparedMessage, mq: MessageQueue) -> dict[str, str]:
        # SendMessageRequestHeader's fields in order, written without building the header.
        config = self.config
        return send_header_v2_fields(
            self.group, msg.topic, config.create_topic_key, config.default_topic_queue_nums, mq.queue_id,
            msg.sys_flag, int(time.time() * 1000), msg.flag, msg.properties, msg.reconsume_times, False,
            msg.max_reconsume_times, msg.batch)

    async def send_to_queue(self, msg: PreparedMessage, mq: MessageQueue, timeout_ms: int) -> SendResult:
        # A known broker is looked up without a coroutine; broker_addr refreshes the route.
        addr = (self.instance.find_broker_addr(mq.broker_name)
                or await self.instance.broker_addr(mq.broker_name, msg.topic))
        return await self.instance.api.send_message(
            addr, mq, self._fields(msg, mq), msg.body, batch=msg.batch, timeout_ms=timeout_ms, uniq_id=msg.uniq_id)

    async def send_oneway_to_queue(self, msg: PreparedMessage, mq: MessageQueue) -> None:
        addr = await self.instance.broker_addr(mq.broker_name, msg.topic)
        await self.instance.api.send_message_oneway(addr, self._fields(msg, mq), msg.body, batch=msg.batch)

    def first_attempt(self, msg: PreparedMessage, *, attempts: int, timeout_ms: int) -> DirectSend | None:
        """The first attempt of send_with_retries as a request made ready for the caller to
        write (Producer's own send, or a blocking face on its own transport), when it needs no
        I/O to make (the topic's route and the broker's address are known); the caller reports
        back with :meth:`first_attempt_answered` or send_with_retries' ``first``."""
        info = self.publish_info.get(msg.topic)
        if info is None or not info.ok():
            return None
        mq = self.select_queue(info, None)
        addr = self.instance.find_broker_addr(mq.broker_name)
        if addr is None:
            return None
        request = self.instance.api.send_request(self._fields(msg, mq), msg.body, batch=msg.batch)
        return DirectSend(msg, mq, addr, request, attempts, timeout_ms)

    def first_attempt_answered(self, direct: DirectSend, response: RemotingCommand, elapsed: float) -> SendResult | None:
        """The answer to a DirectSend's request, as send_with_retries takes an answer: its
        result, or None when the retries must go on (a status other than SEND_OK with
        retryAnotherBrokerWhenNotStoreOK); BrokerError for a refusal (for send_with_retries'
        ``first``)."""
        result = self.instance.api.send_result(direct.mq, response, direct.msg.uniq_id)
        self._note_latency(direct.mq.broker_name, elapsed)
        if result.send_status is not SendStatus.SEND_OK and self.config.retry_another_broker_when_not_store_ok \
                and direct.attempts > 1:
            return None
        return result

    async def send_with_retries(self, msg: PreparedMessage, *, attempts: int, timeout_ms: int,
                                first: tuple[MessageQueue, float, BaseException | None] | None = None) -> SendResult:
        """Send to round-robin queues, avoiding the broker that failed last. ``first``: the first
        attempt was made already (a DirectSend): its queue, how long it took and how it failed
        (None: it returned a status to retry past)."""
        info = await self.find_publish_info(msg.topic)
        budget = timeout_ms / 1000
        last_broker: str | None = None
        backoffs = 0
        last_exc: BaseException | None = None
        attempt = 0
        if first is not None:
            mq, elapsed, failure = first
            budget -= elapsed
            if failure is None:
                last_broker = mq.broker_name
            else:
                last_exc, last_broker = failure, mq.broker_name
                backoffs, info = await self._failed(msg, mq, failure, elapsed, attempt, attempts, backoffs, info)
            attempt = 1
        while attempt < attempts:
            if budget <= 0:
                break
            mq = self.select_queue(info, last_broker)
            started = time.monotonic()
            try:
                result = await self.send_to_queue(msg, mq, int(budget * 1000))
            except (RemotingError, BrokerError) as exc:
                elapsed = time.monotonic() - started
                budget -= elapsed
                last_exc, last_broker = exc, mq.broker_name
                backoffs, info = await self._failed(msg, mq, exc, elapsed, attempt, attempts, backoffs, info)
                attempt += 1
                continue
            elapsed = time.monotonic() - started
            budget -= elapsed
            self._note_latency(mq.broker_name, elapsed)
            if result.send_status is not SendStatus.SEND_OK and self.config.retry_another_broker_when_not_store_ok \
                    and attempt + 1 < attempts:
                last_broker = mq.broker_name
                attempt += 1
                continue
            return result
        if last_exc is None:
            raise RemotingTimeoutError(f"send to {msg.topic} ran out of its {timeout_ms} ms budget")
        raise last_exc

    def _note_latency(self, broker_name: str, elapsed: float, *, isolation: bool = False) -> None:
        """RocketMQ's updateFaultItem: kept only with sendLatencyFaultEnable, the one reader of it."""
        if self.config.send_latency_fault_enable:
            self.fault.update(broker_name, elapsed * 1000, isolation=isolation)

    async def _failed(self, msg: PreparedMessage, mq: MessageQueue, exc: BaseException, elapsed: float,
                      attempt: int, attempts: int, backoffs: int,
                      info: TopicPublishInfo) -> tuple[int, TopicPublishInfo]:
        """After a failed attempt: raise what retrying cannot help, else wait if the broker asked
        for it and refresh a stale route; returns the backoff count and the route to go on with."""
        self._note_latency(mq.broker_name, elapsed, isolation=True)  # a failure counts as 30 s
        action = classify_failure(exc)
        log.warning("send to %s failed (attempt %d/%d, %s): %s", mq, attempt + 1, attempts, action.value, exc)
        if action is RetryAction.RAISE:
            raise exc
        if action is RetryAction.BACKOFF and attempt + 1 < attempts:
            await asyncio.sleep(self.backoff.delay(backoffs))
            backoffs += 1
        if isinstance(exc, BrokerError) and exc.code == ResponseCode.TOPIC_NOT_EXIST:
            self.publish_info.pop(msg.topic, None)  # the route is stale: fetch it again
            info = await self.find_publish_info(msg.topic)
        return backoffs, info
