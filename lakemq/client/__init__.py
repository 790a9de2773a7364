"""The lakemq Python client: producers and consumers speaking RocketMQ 4.x remoting.

One asyncio core (:class:`Producer`, :class:`TransactionProducer`, :class:`PushConsumer`,
:class:`PullConsumer`) with blocking faces in :mod:`lakemq.client.sync` (and
:class:`SyncTransactionProducer`).
"""

from lakemq.client.allocate import allocate_averagely, allocate_averagely_by_circle
from lakemq.client.config import ClientConfig, ConsumeFromWhere, ConsumerConfig, MessageModel, ProducerConfig
from lakemq.client.producer import MessageQueueSelector, Producer, select_by_hash
from lakemq.client.pull_consumer import PullConsumer
from lakemq.client.push_consumer import PushConsumer
from lakemq.client.results import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)
from lakemq.client.subscription import MessageSelector
from lakemq.client.sync import SyncProducer, SyncPullConsumer, SyncPushConsumer, SyncTransactionProducer
from lakemq.client.transaction_producer import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
from lakemq.common.message import Message, MessageExt
from lakemq.common.message_queue import MessageQueue

__all__ = [
    "ClientConfig",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumerConfig",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageQueueSelector",
    "MessageSelector",
    "Producer",
    "ProducerConfig",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
    "SyncProducer",
    "SyncPullConsumer",
    "SyncPushConsumer",
    "SyncTransactionProducer",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "select_by_hash",
]
