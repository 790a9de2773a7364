"""END_TRANSACTION (RocketMQ EndTransactionProcessor): a producer's commit, rollback or
"still unknown" for a half message, after its local transaction or on a check-back.

Producers send it oneway, so the reply is mostly for tools; refusals (no such half message,
wrong producer group or offset, a failed put) are logged, since a oneway sender never sees
them, and the half message stays pending for the check service.
"""

from __future__ import annotations

import logging

from lakemq.broker.config import BrokerConfig
from lakemq.broker.metrics import BrokerMetrics
from lakemq.broker.transaction.service import TransactionalMessageService
from lakemq.common.codes import ResponseCode
from lakemq.common.constants import PermName
from lakemq.common.message import MessageSysFlag
from lakemq.errors import BrokerError, for_code
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import EndTransactionRequestHeader, decode_header

__all__ = ["EndTransactionProcessor"]

log = logging.getLogger(__name__)

_RESULTS = {MessageSysFlag.TRANSACTION_COMMIT_TYPE: "commit", MessageSysFlag.TRANSACTION_ROLLBACK_TYPE: "rollback"}


class EndTransactionProcessor:
    """Runs in its own pool (registered with an executor): commits put messages."""

    def __init__(self, config: BrokerConfig, service: TransactionalMessageService, metrics: BrokerMetrics) -> None:
        self._config = config
        self._service = service
        self._metrics = metrics

    def reject_request(self) -> bool:
        return False

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(EndTransactionRequestHeader, request.ext_fields)
        return request.reply(ResponseCode.SUCCESS, self.end_transaction(header, ctx.remote_addr))

    def end_transaction(self, header: EndTransactionRequestHeader, producer_addr: str) -> str | None:
        """A producer's decision, from either protocol face (a remoting END_TRANSACTION or a
        5.x EndTransaction, lakemq.broker.grpc): the reply's remark; refusals raise BrokerError."""
        if not PermName.is_writeable(self._config.broker_permission):
            raise for_code(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self._config.broker_ip1}] sending message is forbidden",
            )
        try:
            remark = self._service.end_transaction(header, producer_addr)
        except BrokerError as exc:
            log.warning(
                "END_TRANSACTION from %s (group %s, commitLogOffset %d, state %d) refused: %s",
                producer_addr,
                header.producer_group,
                header.commit_log_offset,
                header.commit_or_rollback,
                exc.remark,
            )
            raise
        result = _RESULTS.get(header.commit_or_rollback, "unknown")
        self._metrics.transaction_ends.labels(self._config.broker_name, result).inc()
        return remark
