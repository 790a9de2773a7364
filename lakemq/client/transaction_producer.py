"""TransactionProducer: transactional messages (RocketMQ's TransactionMQProducer).

    class Orders:
        def execute_local_transaction(self, msg, arg):  # after the half message is stored
            return LocalTransactionState.COMMIT_MESSAGE
        def check_local_transaction(self, msg):  # the broker asks again later
            return LocalTransactionState.COMMIT_MESSAGE

    async with TransactionProducer("tx_group", Orders(), namesrv_addr=addr) as producer:
        result = await producer.send_message_in_transaction(Message("T", b"order"), arg)

send_message_in_transaction sends a half message (TRAN_MSG=true, PGROUP, sys flag PREPARED;
consumers do not see it), runs the listener's execute_local_transaction, then tells the broker
COMMIT / ROLLBACK / UNKNOW with a oneway END_TRANSACTION. A transaction left unknown (or whose
END_TRANSACTION was lost) is checked back by the broker: CHECK_TRANSACTION_STATE arrives on
the producer's connection, check_local_transaction answers, and the answer goes back as
END_TRANSACTION with fromTransactionCheck=true. Listener methods may be plain functions (run
in a worker thread, so the event loop never waits for them) or coroutine functions.

Half messages are never delayed (a DELAY property is dropped) nor batched, and a failed send
is retried at once like any sync send.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from lakemq.client.config import ClientConfig, ProducerConfig
from lakemq.client.producer import Producer
from lakemq.client.results import SendResult, SendStatus
from lakemq.client.sender import PreparedMessage
from lakemq.common.codes import RequestCode
from lakemq.common.message import Message, MessageConst, MessageExt, MessageSysFlag
from lakemq.common.record import decode_message_id, decode_record
from lakemq.errors import BrokerError, LakeMQError, RecordError, RemotingCommandError, RemotingError
from lakemq.remoting import RemotingCommand, RequestContext
from lakemq.remoting.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    decode_header,
)

if TYPE_CHECKING:
    from lakemq.client.client_instance import ClientInstance

__all__ = [
    "LocalTransactionState",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
]

log = logging.getLogger(__name__)


class LocalTransactionState(Enum):
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # RocketMQ's spelling

    @property
    def commit_or_rollback(self) -> int:
        """The END_TRANSACTION header value (a MessageSysFlag transaction type)."""
        return _END_FLAG[self]


_END_FLAG = {
    LocalTransactionState.COMMIT_MESSAGE: MessageSysFlag.TRANSACTION_COMMIT_TYPE,
    LocalTransactionState.ROLLBACK_MESSAGE: MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
    LocalTransactionState.UNKNOW: MessageSysFlag.TRANSACTION_NOT_TYPE,
}


class TransactionListener(Protocol):
    def execute_local_transaction(
        self, msg: Message, arg: Any
    ) -> LocalTransactionState | Awaitable[LocalTransactionState]: ...

    def check_local_transaction(
        self, msg: MessageExt
    ) -> LocalTransactionState | Awaitable[LocalTransactionState]: ...


@dataclass(frozen=True, slots=True)
class TransactionSendResult(SendResult):
    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


async def _call(fn: Callable[..., Any], *args: Any) -> LocalTransactionState:
    """A listener method's answer; None (no answer) counts as UNKNOW."""
    if inspect.iscoroutinefunction(fn):
        state = await fn(*args)
    else:
        state = await asyncio.get_running_loop().run_in_executor(None, fn, *args)
    if state is None:
        return LocalTransactionState.UNKNOW
    if not isinstance(state, LocalTransactionState):
        raise LakeMQError(f"the transaction listener returned {state!r}, not a LocalTransactionState")
    return state


class TransactionProducer(Producer):
    def __init__(
        self,
        group: str,
        listener: TransactionListener,
        *,
        namesrv_addr: str | None = None,
        config: ProducerConfig | None = None,
        client_config: ClientConfig | None = None,
    ) -> None:
        super().__init__(group, namesrv_addr=namesrv_addr, config=config, client_config=client_config)
        self.listener = listener
        self._checks: set[asyncio.Task[None]] = set()
        self._heartbeated: set[str] = set()

    async def start(self) -> None:
        await super().start()
        assert self._instance is not None
        self._instance.remoting.register_processor(
            RequestCode.CHECK_TRANSACTION_STATE, _CheckTransactionState(self._instance)
        )
        await self._join_brokers()

    def publish_topics(self) -> list[str]:
        # TBW102 too: its route names the brokers that may hold this group's half messages, so
        # a producer that only answers check-backs (say, one restarted after a crash) keeps
        # heartbeating them.
        return [*super().publish_topics(), self.config.create_topic_key]

    async def _join_brokers(self) -> None:
        """Heartbeat the brokers at start (RocketMQ does too), so check-backs of this group's
        pending transactions can reach this producer before it sends anything."""
        assert self._instance is not None
        try:
            await self._instance.update_route(self.config.create_topic_key)
        except (RemotingError, BrokerError) as exc:
            log.warning("route of %s not found at start: %s", self.config.create_topic_key, exc)
            return
        await self._instance.send_heartbeat_to_all()

    async def _drain(self) -> None:
        """The broker's transaction checks being answered, then the sends."""
        if self._checks:
            await asyncio.gather(*self._checks, return_exceptions=True)
        await super()._drain()

    def _prepare(self, msg: Message) -> PreparedMessage:
        prepared = super()._prepare(msg)
        if msg.properties.get(MessageConst.TRANSACTION_PREPARED) == "true":
            return replace(prepared, sys_flag=prepared.sys_flag | MessageSysFlag.TRANSACTION_PREPARED_TYPE)
        return prepared

    # -- sending ------------------------------------------------------------------------
    async def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Send the half message, run the local transaction, end it on the broker. Send
        errors are raised (nothing was stored, the local transaction did not run)."""
        msg.properties.pop(MessageConst.DELAY_TIME_LEVEL, None)
        msg.properties[MessageConst.TRANSACTION_PREPARED] = "true"
        msg.properties[MessageConst.PRODUCER_GROUP] = self.group
        result = await self.send(msg)
        await self._announce(result)
        error: BaseException | None = None
        if result.send_status is SendStatus.SEND_OK:
            try:
                state = await _call(self.listener.execute_local_transaction, msg, arg)
            except Exception as exc:  # noqa: BLE001 - a listener's failure leaves the state UNKNOW
                log.warning("local transaction of %s raised, state UNKNOW: %r", result.msg_id, exc)
                state, error = LocalTransactionState.UNKNOW, exc
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE  # stored but not safely: do not commit
        try:
            await self._end_transaction(result, state, error)
        except LakeMQError as exc:
            log.warning(
                "local transaction %s is %s but ending it on the broker failed "
                "(the broker will check back): %s",
                result.msg_id,
                state.value,
                exc,
            )
        fields = {f: getattr(result, f) for f in SendResult.__dataclass_fields__}
        # As RocketMQ's Java client: the transaction id is the message's unique key (the id the
        # broker's check-backs and END_TRANSACTION carry).
        fields["transaction_id"] = result.msg_id
        return TransactionSendResult(**fields, local_transaction_state=state)

    async def _announce(self, result: SendResult) -> None:
        """Heartbeat once to a broker newly written to, so it can check back at once rather
        than after the next periodic heartbeat."""
        broker = result.message_queue.broker_name
        if broker not in self._heartbeated:
            self._heartbeated.add(broker)
            await self.sender.instance.send_heartbeat_to_all()

    async def _end_transaction(
        self, result: SendResult, state: LocalTransactionState, error: BaseException | None
    ) -> None:
        _, commit_log_offset = decode_message_id(result.offset_msg_id)
        addr = await self.sender.instance.broker_addr(
            result.message_queue.broker_name, result.message_queue.topic
        )
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=state.commit_or_rollback,
            msg_id=result.msg_id,
            from_transaction_check=False,
            transaction_id=result.msg_id,
        )
        remark = f"executeLocalTransactionBranch exception: {error!r}" if error else None
        await self.sender.instance.api.end_transaction_oneway(addr, header, remark)

    # -- check-backs --------------------------------------------------------------------
    def on_check(self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader) -> None:
        task = asyncio.create_task(self._check(broker_addr, msg, header))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _check(
        self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        error: BaseException | None = None
        try:
            state = await _call(self.listener.check_local_transaction, msg)
        except Exception as exc:  # noqa: BLE001 - a listener's failure leaves the state UNKNOW
            log.warning("check of local transaction %s raised, state UNKNOW: %r", msg.unique_key, exc)
            state, error = LocalTransactionState.UNKNOW, exc
        end = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=state.commit_or_rollback,
            msg_id=msg.unique_key or header.msg_id or "",
            from_transaction_check=True,
            transaction_id=header.transaction_id,
        )
        remark = f"checkLocalTransactionState exception: {error!r}" if error else None
        try:
            await self.sender.instance.api.end_transaction_oneway(broker_addr, end, remark)
        except LakeMQError as exc:
            log.warning("answering the check of %s to %s failed: %s", msg.unique_key, broker_addr, exc)


class _CheckTransactionState:
    """Broker -> producer CHECK_TRANSACTION_STATE: hand it to the producer of the message's
    group (PGROUP), answered later and separately, so the connection is never held up."""

    def __init__(self, instance: ClientInstance) -> None:
        self._instance = instance

    def reject_request(self) -> bool:
        return False

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand | None:
        try:
            header = decode_header(CheckTransactionStateRequestHeader, request.ext_fields)
            msg = decode_record(request.body, decompress=True)
        except (RemotingCommandError, RecordError) as exc:
            log.warning("bad CHECK_TRANSACTION_STATE from %s: %s", ctx.remote_addr, exc)
            return None
        group = msg.properties.get(MessageConst.PRODUCER_GROUP, "")
        producer = self._instance.producers.get(group)
        if not isinstance(producer, TransactionProducer):
            log.warning(
                "check of transaction %s for group %r, which has no transaction producer here",
                msg.unique_key,
                group,
            )
            return None
        producer.on_check(ctx.remote_addr, msg, header)
        return None
