"""POP consumption (RocketMQ 5): the service both protocol faces call, its journal and state."""

from lakemq.broker.pop.model import PoppedMessage, PopRequest, PopResult
from lakemq.broker.pop.receipt import ReceiptHandle
from lakemq.broker.pop.service import PopService

__all__ = ["PopRequest", "PopResult", "PopService", "PoppedMessage", "ReceiptHandle"]
