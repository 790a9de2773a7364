"""TransactionalMessageCheckService: asks producers about transactions left pending.

Every ``transactionCheckInterval`` ms one pass walks the half queue from CID_RMQ_SYS_TRANS's
offset (in a worker thread; the store reads and puts may block):

- Op messages read first say which half messages are resolved; those are skipped.
- A half message checked ``transactionCheckMax`` times is rolled back (an Op message, logged)
  and never delivered.
- A half message younger than ``transactionTimeOut`` (or its CHECK_IMMUNITY_TIME_IN_SECONDS)
  is not due: the walk stops there, as everything after it is younger still. One with its own
  immunity time is put back at the end of the queue instead, so it does not hold up the rest.
- A due one is put back at the end of the half queue with TRANSACTION_CHECK_TIMES + 1 and a
  CHECK_TRANSACTION_STATE for that copy goes, oneway, to a live producer of its group (from
  the heartbeats); with none online the check is skipped but still counted.
- The walk stops at messages stored after the pass began (the copies it just put).

Then the half and op offsets move on and the offset table is written at once, so a broker
killed right after a pass does not walk (and check) the same messages again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.topic_config_manager import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from lakemq.broker.transaction.half_message import (
    check_times,
    origin_offset,
    parse_op_body,
    renew_half_message,
    restore_real_topic,
)
from lakemq.broker.transaction.service import TransactionalMessageService
from lakemq.common.codes import RequestCode
from lakemq.common.message import MessageConst, MessageExt, properties_to_string
from lakemq.common.record import encode_host, encode_record
from lakemq.errors import LakeMQError
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.headers import CheckTransactionStateRequestHeader, encode_header

__all__ = ["CheckBackChannel", "CheckRequest", "TransactionalMessageCheckService", "encode_check_request"]

log = logging.getLogger(__name__)

# One pass stops after this long and goes on from there next time (RocketMQ's MAX_PROCESS_TIME_LIMIT).
MAX_PASS_SECONDS: Final = 60.0
# After a restart, Op messages this far before the persisted op offset are read again to learn
# which transactions are resolved (see resolved.py).
WARM_UP_OPS: Final = 10_000


@runtime_checkable
class CheckBackChannel(Protocol):
    """Where a check-back goes: a producer's remoting connection, or a 5.x producer's
    Telemetry stream (lakemq.broker.grpc.telemetry), which turns it into its own command."""

    @property
    def is_open(self) -> bool: ...

    async def invoke_oneway(self, request: RemotingCommand) -> None: ...


@dataclass(frozen=True, slots=True)
class CheckRequest:
    producer_group: str
    request: RemotingCommand


def encode_check_request(copy: MessageExt) -> RemotingCommand:
    """CHECK_TRANSACTION_STATE for a stored half message copy: the header names the copy, the
    body is the message as its producer sent it (real topic and queue), in record format."""
    msg = restore_real_topic(copy)
    uniq = msg.unique_key
    header = CheckTransactionStateRequestHeader(
        tran_state_table_offset=copy.queue_offset,
        commit_log_offset=copy.commit_log_offset,
        msg_id=uniq,
        transaction_id=uniq,
        offset_msg_id=copy.msg_id,
        topic=msg.topic,
    )
    body = encode_record(
        topic=msg.topic.encode("utf-8"),
        queue_id=msg.queue_id,
        body=msg.body,
        flag=msg.flag,
        properties=properties_to_string(msg.properties).encode("utf-8"),
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=encode_host(msg.born_host),
        store_host=encode_host(msg.store_host),
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
        queue_offset=copy.queue_offset,
        physical_offset=copy.commit_log_offset,
        store_timestamp=copy.store_timestamp,
    )
    return RemotingCommand.request(
        RequestCode.CHECK_TRANSACTION_STATE, encode_header(header), bytes(body), oneway=True
    )


class TransactionalMessageCheckService:
    def __init__(
        self,
        service: TransactionalMessageService,
        producers: ProducerManager,
        *,
        transaction_timeout_ms: int,
        check_max: int,
        check_interval_ms: int,
    ) -> None:
        self.service = service
        self.producers = producers
        self.transaction_timeout_ms = transaction_timeout_ms
        self.check_max = check_max
        self.check_interval_ms = check_interval_ms
        self._op_cursor: int | None = None
        self._op_by_copy: dict[int, int] = {}  # half queue offset -> op queue offset
        self.checks_sent = 0

    async def run(self) -> None:
        """Check every interval until cancelled; a pass in progress finishes first."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000)
            future = loop.run_in_executor(None, self.check_once)
            try:
                checks = await asyncio.shield(future)
            except asyncio.CancelledError:
                await asyncio.wait([future])
                raise
            except Exception:
                log.exception("transaction check pass failed")
                continue
            await self.send_checks(checks)

    async def send_checks(self, checks: list[CheckRequest]) -> None:
        for check in checks:
            info = self.producers.get_available_channel(check.producer_group)
            channel = info.channel if info is not None else None
            if not isinstance(channel, CheckBackChannel) or not channel.is_open:
                log.warning(
                    "no live producer of group %s to check transaction %s",
                    check.producer_group,
                    check.request.ext_fields.get("transactionId"),
                )
                continue
            try:
                await channel.invoke_oneway(check.request)
                self.checks_sent += 1
            except (LakeMQError, OSError) as exc:
                log.warning("check-back to %s failed: %s", info.remote_addr if info else "?", exc)

    # -- one pass (blocking) --------------------------------------------------------------

    def check_once(self) -> list[CheckRequest]:
        svc = self.service
        started = int(time.time() * 1000)
        half_offset = svc.consume_offset(TRANS_HALF_TOPIC)
        op_offset = svc.consume_offset(TRANS_OP_HALF_TOPIC)
        if self._op_cursor is None:
            self._op_cursor = max(
                op_offset - WARM_UP_OPS, svc.store.get_min_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
            )
        self._read_ops(half_offset)
        checks: list[CheckRequest] = []
        new_half_offset = half_offset
        for offset, half in self._half_messages(half_offset):
            if time.time() * 1000 - started > MAX_PASS_SECONDS * 1000:
                break
            if half is None or self._op_by_copy.pop(offset, None) is not None:
                new_half_offset = offset + 1
                continue
            if not self._visit(half, started, checks):
                break
            new_half_offset = offset + 1
        self._advance(half_offset, new_half_offset, op_offset)
        svc.resolved.forget_before(self.resolved_horizon_s())
        return checks

    def resolved_horizon_s(self) -> float:
        """How long a resolved transaction may still be ended again: by the producer's late
        answer or by answers to check-backs sent before it was resolved."""
        return (self.transaction_timeout_ms + self.check_max * self.check_interval_ms) / 1000

    def _visit(self, half: MessageExt, started: int, checks: list[CheckRequest]) -> bool:
        """Handle one pending half message; False stops the walk before it."""
        svc = self.service
        origin = origin_offset(half)
        if svc.resolved.is_resolved(origin):
            return True
        if svc.resolved.is_in_progress(origin):
            return False  # its END may still fail: look again next pass
        times = check_times(half)
        if times >= self.check_max:
            svc.resolve(half, commit=False, reason=f"no answer after {times} checks")
            return True
        if half.store_timestamp >= started:
            return False
        age = int(time.time() * 1000) - half.born_timestamp
        immunity = self._immunity_ms(half)
        if 0 <= age < immunity:
            if MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS not in half.properties:
                return False
            return svc.put_back(renew_half_message(half, svc.store.store_host, count_check=False)) is not None
        copy = svc.put_back(renew_half_message(half, svc.store.store_host))
        if copy is None:
            return False
        group = half.properties.get(MessageConst.PRODUCER_GROUP, "")
        checks.append(CheckRequest(group, encode_check_request(copy)))
        log.info("checking transaction %s with group %s (check %d)", half.unique_key, group, times + 1)
        return True

    def _immunity_ms(self, half: MessageExt) -> int:
        raw = half.properties.get(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS, "")
        return int(raw) * 1000 if raw.isdigit() else self.transaction_timeout_ms

    def _half_messages(self, offset: int) -> Iterator[tuple[int, MessageExt | None]]:
        """(queue offset, message) from ``offset`` on; None for offsets whose record is gone."""
        while True:
            read = self.service.read(TRANS_HALF_TOPIC, offset)
            if not read.messages:
                if read.next_offset <= offset:
                    return
                for gone in range(offset, read.next_offset):
                    yield gone, None
                offset = read.next_offset
                continue
            for msg in read.messages:
                yield msg.queue_offset, msg
            offset = read.next_offset

    def _read_ops(self, half_offset: int) -> None:
        assert self._op_cursor is not None
        while True:
            read = self.service.read(TRANS_OP_HALF_TOPIC, self._op_cursor)
            for op in read.messages:
                parsed = parse_op_body(op)
                if parsed is None:
                    log.warning("op message at %d is not a remove mark: %r", op.queue_offset, op.body[:40])
                    continue
                copy, origin = parsed
                self.service.resolved.add(origin)
                if copy >= half_offset:
                    self._op_by_copy[copy] = op.queue_offset
            if read.next_offset <= self._op_cursor:
                return
            self._op_cursor = read.next_offset

    def _advance(self, half_offset: int, new_half_offset: int, op_offset: int) -> None:
        assert self._op_cursor is not None
        svc = self.service
        self._op_by_copy = {c: o for c, o in self._op_by_copy.items() if c >= new_half_offset}
        # Op messages before the first one still needed (its half message not yet walked past).
        new_op_offset = min(self._op_by_copy.values(), default=self._op_cursor)
        changed = False
        if new_half_offset != half_offset:
            svc.update_offset(TRANS_HALF_TOPIC, new_half_offset)
            changed = True
        if new_op_offset != op_offset:
            svc.update_offset(TRANS_OP_HALF_TOPIC, new_op_offset)
            changed = True
        if changed:
            svc.offsets.persist()
