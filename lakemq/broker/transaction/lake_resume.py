"""LAKEMQ_RESUME_HALF_MESSAGES: the transaction sweep hands pending half messages that only the
lake still holds back to the broker, which applies its own check rules to each.

The request body is CommitLog records, one per transaction: the newest half message copy the
lake holds (its TRANSACTION_CHECK_TIMES as the check service left it). For each, in order:

- ``resolved``: an Op message of this broker's hot op queue (or its resolved table) says the
  transaction is done; ``outcome`` is ``commit`` or ``rollback`` where the broker itself
  resolved it since it started, else empty;
- ``in_half_queue``: a copy of the transaction lies in the hot half queue at or after the
  check service's offset, so the check service will still visit it: nothing is put;
- ``rolled_back``: the copy was checked ``transactionCheckMax`` times already, so the
  transaction is rolled back (an Op message), as the check service does;
- ``checking``: the copy is put back at the end of the half queue with its check count + 1 and
  a CHECK_TRANSACTION_STATE goes to a live producer of its group (none online: the check
  service asks again later, as for any copy in the half queue);
- ``refused``: not a half message of this broker, or the put failed (``remark`` says why).

Only the broker that stored a half message can take it back: transactions are named by the
half queue offset of their first copy (see half_message), which only that store gives meaning
to. The request is served by the admin pool and is admin-only under ACL.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from lakemq.broker.config import BrokerConfig
from lakemq.broker.topic_config_manager import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from lakemq.broker.transaction.check_service import (
    CheckRequest,
    TransactionalMessageCheckService,
    encode_check_request,
)
from lakemq.broker.transaction.half_message import (
    check_times,
    origin_offset,
    parse_op_body,
    renew_half_message,
)
from lakemq.common.codes import ResponseCode
from lakemq.common.constants import PermName
from lakemq.common.message import MessageConst, MessageExt
from lakemq.common.record import iter_records
from lakemq.errors import BrokerError, RecordError, for_code
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext

__all__ = ["HalfMessageVerdict", "LakeHalfResumer"]

log = logging.getLogger(__name__)

MAX_HALVES_PER_REQUEST = 1024


@dataclass(frozen=True, slots=True)
class HalfMessageVerdict:
    origin: int  # half queue offset of the transaction's first copy
    verdict: str  # resolved | in_half_queue | rolled_back | checking | refused
    checks: int  # TRANSACTION_CHECK_TIMES after this request
    outcome: str = ""  # commit | rollback, for resolved and rolled_back
    remark: str = ""


class LakeHalfResumer:
    def __init__(self, config: BrokerConfig, checker: TransactionalMessageCheckService) -> None:
        self._config = config
        self._checker = checker
        self._service = checker.service

    def process_request(
        self, _ctx: RequestContext, request: RemotingCommand
    ) -> Awaitable[RemotingCommand]:
        if not PermName.is_writeable(self._config.broker_permission):
            raise for_code(ResponseCode.NO_PERMISSION, f"the broker[{self._config.broker_ip1}] is not writeable")
        try:
            halves = list(iter_records(request.body or b"", check_crc=True))
        except RecordError as exc:
            raise for_code(ResponseCode.INVALID_PARAMETER, f"half message records unreadable: {exc}") from exc
        if len(halves) > MAX_HALVES_PER_REQUEST:
            raise for_code(
                ResponseCode.INVALID_PARAMETER,
                f"{len(halves)} half messages in one request, at most {MAX_HALVES_PER_REQUEST}",
            )
        verdicts, checks = self.resume(halves)
        body = json.dumps({"verdicts": [asdict(v) for v in verdicts]}).encode("utf-8")
        return self._send_then_reply(checks, request.reply(ResponseCode.SUCCESS, body=body))

    def _send_then_reply(self, checks: list[CheckRequest], reply: RemotingCommand) -> Awaitable[RemotingCommand]:
        # Check-backs go out on the broker's loop (where producer channels live), after the puts.
        async def send() -> RemotingCommand:
            await self._checker.send_checks(checks)
            return reply

        return send()

    # -- blocking part (admin pool) ---------------------------------------------------------

    def resume(self, halves: list[MessageExt]) -> tuple[list[HalfMessageVerdict], list[CheckRequest]]:
        resolved_here = self._op_origins()
        queued = self._queued_origins()
        checks: list[CheckRequest] = []
        verdicts = [self._resume_one(h, resolved_here, queued, checks) for h in halves]
        return verdicts, checks

    def _resume_one(
        self, half: MessageExt, resolved_here: set[int], queued: set[int], checks: list[CheckRequest]
    ) -> HalfMessageVerdict:
        svc = self._service
        origin, times = origin_offset(half), check_times(half)
        refusal = self._refusal(half)
        if refusal:
            return HalfMessageVerdict(origin, "refused", times, remark=refusal)
        if origin in resolved_here or svc.resolved.is_resolved(origin) or svc.resolved.is_in_progress(origin):
            committed = svc.resolved.outcome(origin)
            outcome = "" if committed is None else ("commit" if committed else "rollback")
            return HalfMessageVerdict(origin, "resolved", times, outcome)
        if origin in queued:
            return HalfMessageVerdict(origin, "in_half_queue", times)
        group = half.properties.get(MessageConst.PRODUCER_GROUP, "")
        if times >= self._checker.check_max:
            try:
                done = svc.resolve(half, commit=False, reason=f"no answer after {times} checks (from the lake)")
            except BrokerError as exc:
                return HalfMessageVerdict(origin, "refused", times, remark=exc.remark or str(exc))
            if not done:
                return HalfMessageVerdict(origin, "resolved", times)
            return HalfMessageVerdict(origin, "rolled_back", times, "rollback")
        copy = svc.put_back(renew_half_message(half, svc.store.store_host))
        if copy is None:
            return HalfMessageVerdict(origin, "refused", times, remark="putting the half message back failed")
        queued.add(origin)  # the same transaction twice in one request is put back once
        checks.append(CheckRequest(group, encode_check_request(copy)))
        log.info(
            "transaction %s of group %s handed back from the lake (check %d)", half.unique_key, group, times + 1
        )
        return HalfMessageVerdict(origin, "checking", times + 1)

    def _refusal(self, half: MessageExt) -> str:
        if half.topic != TRANS_HALF_TOPIC:
            return f"topic {half.topic} is not {TRANS_HALF_TOPIC}"
        if half.store_host != self._service.store.store_host:
            return f"stored by {half.store_host}, not by this broker ({self._service.store.store_host})"
        if not half.properties.get(MessageConst.PRODUCER_GROUP):
            return "no producer group (PGROUP)"
        if not half.properties.get(MessageConst.REAL_TOPIC):
            return "no real topic (REAL_TOPIC)"
        return ""

    def _op_origins(self) -> set[int]:
        """Origins of every transaction an Op message in the hot op queue resolves."""
        origins: set[int] = set()

        def visit(op: MessageExt) -> None:
            parsed = parse_op_body(op)
            if parsed is not None:
                origins.add(parsed[1])

        self._scan(TRANS_OP_HALF_TOPIC, self._service.store.get_min_offset_in_queue(TRANS_OP_HALF_TOPIC, 0), visit)
        return origins

    def _queued_origins(self) -> set[int]:
        """Origins of the copies the check service has yet to visit."""
        origins: set[int] = set()
        self._scan(TRANS_HALF_TOPIC, self._service.consume_offset(TRANS_HALF_TOPIC),
                   lambda half: origins.add(origin_offset(half)))
        return origins

    def _scan(self, topic: str, offset: int, visit: Callable[[MessageExt], object]) -> None:
        end = self._service.max_offset(topic)
        while offset < end:
            read = self._service.read(topic, offset, 256)
            for msg in read.messages:
                visit(msg)
            if read.next_offset <= offset:
                return
            offset = read.next_offset
