"""The Telemetry stream: one per 5.x client and endpoint, kept open for the client's life.

The client opens it with its Settings (client type, topics or group, request timeout); the
broker answers with the Settings it is to use, as RocketMQ's proxy does: the retry policy
(a consumer group's: max attempts = retryMaxTimes + 1, the 4.x retry delays from level 3 on
as customized backoff, exponential for an orderly group), the largest body
(``maxMessageSize``), the receive batch size and long-polling timeout, and whether the group
is FIFO. A producer's stream is then its channel for transaction check-backs: the stream
registers in the ProducerManager under each topic it publishes (a 5.x producer's group is its
topic), and the check service's CHECK_TRANSACTION_STATE reaches it as a
RecoverOrphanedTransactionCommand. The thread-stack and verify-message results a client sends
only answer commands lakemq never issues: they are answered with a status saying so.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from lakemq.broker.consumer_manager import ClientChannelInfo
from lakemq.broker.grpc.convert import encode_transaction_id, v2_message
from lakemq.broker.grpc.status import OK, status
from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.subscription_group_manager import SubscriptionGroupConfig
from lakemq.common.record import decode_record
from lakemq.grpc._pb.definition_pb2 import (
    ClientType,
    Code,
    CustomizedBackoff,
    ExponentialBackoff,
    Publishing,
    RetryPolicy,
    Settings,
    Subscription,
)
from lakemq.grpc._pb.service_pb2 import RecoverOrphanedTransactionCommand, TelemetryCommand
from lakemq.remoting.codec import RemotingCommand

__all__ = ["SettingsPolicy", "TelemetrySession"]

log = logging.getLogger(__name__)

# The 4.x retry of a failed message starts at delay level 3 (10 s) and goes up one level a time.
_FIRST_RETRY_LEVEL: Final = 3
_RECEIVE_BATCH_SIZE: Final = 32
_PRODUCER_MAX_ATTEMPTS: Final = 3


class SettingsPolicy:
    """What the broker tells 5.x clients in the Settings exchange."""

    def __init__(self, max_body_size: int, delays_ms: tuple[int, ...], long_polling_ms: int) -> None:
        self.max_body_size = max_body_size
        self.retry_delays_ms = delays_ms[_FIRST_RETRY_LEVEL - 1:] or delays_ms[-1:]
        self.long_polling_ms = long_polling_ms

    def producer(self, asked: Settings) -> Settings:
        backoff = ExponentialBackoff(multiplier=2)
        backoff.initial.FromMilliseconds(10)
        backoff.max.FromMilliseconds(1000)
        return Settings(
            client_type=asked.client_type,
            access_point=asked.access_point,
            request_timeout=asked.request_timeout,
            backoff_policy=RetryPolicy(max_attempts=_PRODUCER_MAX_ATTEMPTS, exponential_backoff=backoff),
            publishing=Publishing(topics=asked.publishing.topics, max_body_size=self.max_body_size,
                                  validate_message_type=True),
            user_agent=asked.user_agent,
        )

    def consumer(self, asked: Settings, group: SubscriptionGroupConfig) -> Settings:
        fifo = group.consume_message_orderly
        if fifo:
            exponential = ExponentialBackoff(multiplier=2)
            exponential.initial.FromMilliseconds(1000)
            exponential.max.FromMilliseconds(60_000)
            policy = RetryPolicy(max_attempts=group.retry_max_times + 1, exponential_backoff=exponential)
        else:
            customized = CustomizedBackoff()
            for delay in self.retry_delays_ms:
                customized.next.add().FromMilliseconds(delay)
            policy = RetryPolicy(max_attempts=group.retry_max_times + 1, customized_backoff=customized)
        subscription = Subscription(group=asked.subscription.group,
                                    subscriptions=asked.subscription.subscriptions,
                                    fifo=fifo, receive_batch_size=_RECEIVE_BATCH_SIZE)
        subscription.long_polling_timeout.FromMilliseconds(self.long_polling_ms)
        return Settings(client_type=asked.client_type, access_point=asked.access_point,
                        request_timeout=asked.request_timeout, backoff_policy=policy,
                        subscription=subscription, user_agent=asked.user_agent)


class TelemetrySession:
    """One client's open Telemetry stream. As a ProducerManager channel it takes the check
    service's oneway CHECK_TRANSACTION_STATE (the same call a remoting connection takes)."""

    def __init__(self, client_id: str, remote_addr: str, producers: ProducerManager) -> None:
        self.client_id = client_id
        self.remote_addr = remote_addr
        self._producers = producers
        self._outbox: asyncio.Queue[TelemetryCommand | None] = asyncio.Queue()
        self.topics: tuple[str, ...] = ()
        self.client_type: ClientType = ClientType.CLIENT_TYPE_UNSPECIFIED
        self.language = "UNKNOWN"  # as its Settings' user agent says (producerConnection shows it)
        self.closed = False

    @property
    def is_open(self) -> bool:
        return not self.closed

    def send(self, command: TelemetryCommand) -> None:
        self._outbox.put_nowait(command)

    async def outgoing(self) -> TelemetryCommand | None:
        """The next command to write; None once the session closed."""
        return await self._outbox.get()

    def register_producer(self, topics: tuple[str, ...], language: str) -> None:
        self.client_type, self.topics, self.language = ClientType.PRODUCER, topics, language
        self.refresh()

    def refresh(self) -> None:
        """A heartbeat: the producer's registrations are kept alive."""
        for topic in self.topics:
            self._producers.register_producer(topic, ClientChannelInfo(self, self.client_id, self.language, 0,
                                                                       self.remote_addr))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._producers.do_channel_close_event(self)
        self._outbox.put_nowait(None)

    async def invoke_oneway(self, request: RemotingCommand) -> None:
        """A transaction check-back: the half message copy in the request (its body in record
        format, its offsets in the header) as a RecoverOrphanedTransactionCommand."""
        fields = request.ext_fields
        msg = decode_record(request.body or b"")
        transaction_id = encode_transaction_id(int(fields["commitLogOffset"]), int(fields["tranStateTableOffset"]))
        command = TelemetryCommand(status=OK, recover_orphaned_transaction_command=RecoverOrphanedTransactionCommand(
            message=v2_message(msg), transaction_id=transaction_id))
        log.info("transaction check-back of %s (%s) to 5.x producer %s", msg.unique_key, transaction_id,
                 self.client_id)
        self.send(command)

    def unexpected(self, what: str) -> None:
        """A client's answer to a command lakemq never sends (thread stacks, message verify)."""
        self.send(TelemetryCommand(status=status(
            Code.NOT_IMPLEMENTED, f"{what}: lakemq sends no such command and takes no such result")))
