"""TransactionalMessageService: ends transactions and reads the half and op queues.

END_TRANSACTION names a half message by CommitLog offset; after the same checks RocketMQ makes
(it is a half message, of that producer group, at that queue offset) a commit puts the real
message and then the Op message, a rollback the Op message only. The order matters: a crash
between the two puts leaves the half message pending, so it is checked again rather than lost.
Whichever copy of a transaction is ended first wins (:mod:`.resolved`); later ends of the same
transaction are answered SUCCESS and change nothing.

The check service's progress is kept as consume offsets of the system group
CID_RMQ_SYS_TRANS on the half queue and the op queue, in the broker's consumerOffset.json.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.topic_config_manager import TRANS_HALF_TOPIC
from lakemq.broker.transaction.half_message import (
    TRANS_SYS_GROUP,
    op_message,
    origin_offset,
    real_message,
)
from lakemq.broker.transaction.resolved import ResolvedTransactions
from lakemq.common.codes import ResponseCode
from lakemq.common.message import MessageConst, MessageExt, MessageExtBrokerInner, MessageSysFlag
from lakemq.common.record import decode_record
from lakemq.errors import RecordError, for_code
from lakemq.remoting.headers import EndTransactionRequestHeader
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus

__all__ = ["HALF_QUEUE_ID", "QueueRead", "TransactionalMessageService"]

log = logging.getLogger(__name__)

HALF_QUEUE_ID = 0  # the half topic has one queue; its op queue has the same id

_STORED = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


@dataclass(frozen=True, slots=True)
class QueueRead:
    """Messages read from a system queue and where the next read starts."""

    messages: list[MessageExt]
    next_offset: int


class TransactionalMessageService:
    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        resolved: ResolvedTransactions | None = None,
    ) -> None:
        self.store = store
        self.offsets = offsets
        self.resolved = resolved or ResolvedTransactions()

    # -- END_TRANSACTION ---------------------------------------------------------------

    def end_transaction(self, header: EndTransactionRequestHeader, producer_addr: str) -> str | None:
        """Apply a producer's decision; returns a remark for the reply, raises on refusal."""
        state = header.commit_or_rollback
        if state == MessageSysFlag.TRANSACTION_NOT_TYPE:
            log.info(
                "producer %s (group %s) reports transaction %s %s: still unknown",
                producer_addr,
                header.producer_group,
                header.transaction_id,
                "on a check" if header.from_transaction_check else "after sending",
            )
            return None
        if state not in (MessageSysFlag.TRANSACTION_COMMIT_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE):
            raise for_code(ResponseCode.SYSTEM_ERROR, f"commitOrRollback {state} is not 0, 8 or 12")
        half = self._prepared_message(header)
        commit = state == MessageSysFlag.TRANSACTION_COMMIT_TYPE
        if self.resolve(half, commit=commit):
            return None
        return "transaction already resolved"

    def _prepared_message(self, header: EndTransactionRequestHeader) -> MessageExt:
        half = self.store.look_message_by_offset(header.commit_log_offset)
        if half is None or half.topic != TRANS_HALF_TOPIC:
            raise for_code(
                ResponseCode.SYSTEM_ERROR,
                f"Find prepared transaction message failed: no half message at commitLogOffset "
                f"{header.commit_log_offset}",
            )
        if half.properties.get(MessageConst.PRODUCER_GROUP) != header.producer_group:
            raise for_code(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if half.queue_offset != header.tran_state_table_offset:
            raise for_code(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        return half

    def resolve(self, half: MessageExt, *, commit: bool, reason: str = "") -> bool:
        """Commit or roll back ``half``'s transaction; False when it was already resolved.
        Raises a BrokerError when a put fails (the transaction stays pending)."""
        origin = origin_offset(half)
        if not self.resolved.claim(origin):
            log.info("transaction %s (half offset %d) already resolved", half.unique_key, origin)
            return False
        done = False
        try:
            if commit:
                self._put(real_message(half, self.store.store_host), "commit")
            self._put(op_message(half, self.store.store_host), "op")
            done = True
        finally:
            self.resolved.settle(origin, resolved=done, commit=commit)
        log.info(
            "transaction %s of %s %s%s",
            half.unique_key,
            half.properties.get(MessageConst.REAL_TOPIC),
            "committed" if commit else "rolled back",
            f" ({reason})" if reason else "",
        )
        return True

    def _put(self, msg: MessageExtBrokerInner, what: str) -> int:
        result = self.store.put(MessagesPut.of(msg))
        if result.status not in _STORED or result.append_result is None:
            raise for_code(
                ResponseCode.SYSTEM_ERROR,
                f"transaction {what} put failed: {result.status.name} {result.remark}",
            )
        return result.append_result.logics_offset

    def put_back(self, msg: MessageExtBrokerInner) -> MessageExt | None:
        """Put a renewed half message; the stored copy (new offsets), or None on failure."""
        result = self.store.put(MessagesPut.of(msg))
        append = result.append_result
        if result.status not in _STORED or append is None:
            log.error(
                "putting back half message %s failed: %s %s",
                msg.unique_key,
                result.status.name,
                result.remark,
            )
            return None
        return msg.replace(
            queue_offset=append.logics_offset,
            commit_log_offset=append.wrote_offset,
            msg_id=append.msg_id,
            store_timestamp=append.store_timestamp,
            store_size=append.wrote_bytes,
        )

    # -- system queues -------------------------------------------------------------------

    def consume_offset(self, topic: str) -> int:
        """CID_RMQ_SYS_TRANS's offset on ``topic`` queue 0; the queue's min offset at first."""
        offset = self.offsets.query_offset(TRANS_SYS_GROUP, topic, HALF_QUEUE_ID)
        if offset < 0:
            offset = self.store.get_min_offset_in_queue(topic, HALF_QUEUE_ID)
            self.update_offset(topic, offset)
        return offset

    def update_offset(self, topic: str, offset: int) -> None:
        self.offsets.commit_offset("broker", TRANS_SYS_GROUP, topic, HALF_QUEUE_ID, offset)

    def read(self, topic: str, offset: int, max_nums: int = 32) -> QueueRead:
        """Up to ``max_nums`` messages of ``topic`` queue 0 from ``offset``. Offsets whose
        records are gone (expired files) are skipped to the next readable one."""
        result = self.store.get_message(TRANS_SYS_GROUP, topic, HALF_QUEUE_ID, offset, max_nums)
        if result.status is GetMessageStatus.FOUND:
            messages = []
            for record in result.buffers:
                try:
                    messages.append(decode_record(record))
                except RecordError as exc:
                    log.error("unreadable record in %s at queue offset %d: %s", topic, offset, exc)
            return QueueRead(messages, result.next_begin_offset)
        if (
            result.status
            in (
                GetMessageStatus.OFFSET_TOO_SMALL,
                GetMessageStatus.OFFSET_FOUND_NULL,
                GetMessageStatus.MESSAGE_WAS_REMOVING,
            )
            and result.next_begin_offset > offset
        ):
            log.warning("%s: queue offsets %d..%d are gone", topic, offset, result.next_begin_offset - 1)
            return QueueRead([], result.next_begin_offset)
        return QueueRead([], offset)

    def max_offset(self, topic: str) -> int:
        return self.store.get_max_offset_in_queue(topic, HALF_QUEUE_ID)
