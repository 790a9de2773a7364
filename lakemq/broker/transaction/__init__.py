"""Transactional messages: half messages, END_TRANSACTION and check-backs (SEEDS_DIGEST 5)."""

from lakemq.broker.transaction.check_service import TransactionalMessageCheckService
from lakemq.broker.transaction.end_transaction_processor import EndTransactionProcessor
from lakemq.broker.transaction.half_message import is_transactional, to_half_message
from lakemq.broker.transaction.lake_resume import LakeHalfResumer
from lakemq.broker.transaction.service import TransactionalMessageService

__all__ = [
    "EndTransactionProcessor",
    "LakeHalfResumer",
    "TransactionalMessageCheckService",
    "TransactionalMessageService",
    "is_transactional",
    "to_half_message",
]
