"""PULL_MESSAGE (RocketMQ PullMessageProcessor), with long polling.

The request's sys flags (PullSysFlag) say whether to commit ``commitOffset`` for the group,
whether the pull may be held when nothing is there (suspend), whether the request carries its
own subscription, and whether class filtering is on. Found records are returned as they lie
in the CommitLog, concatenated, as the body. A pull that finds nothing and may be suspended
awaits the hold service (up to ``suspendTimeoutMillis``, at most ``maxSuspendTimeoutMillis``,
with long polling, else ``shortPollingTimeMills``; released at once when its connection
closes) and is then run again without suspension.

Which broker the client should pull from next (``suggestWhichBrokerId``, as RocketMQ 4.9):
the master (id 0), unless ``slaveReadEnable``; then the group's ``whichBrokerWhenConsumeSlowly``
when the pull read far behind (further from the CommitLog's end than
``accessMessageInMemoryMaxRatio`` of RAM), else the group's ``brokerId``. A slave serves every
pull it gets; without ``offsetCheckInSlave`` it never moves a consumer's offset (it may be
behind its master): such a pull is answered PULL_RETRY_IMMEDIATELY, pointing at the group's
``brokerId``.

Where a pull runs: on the event loop when its group already exists (nothing to create and
persist) and it reads nothing or starts within the CommitLog's most recent
``accessMessageInMemoryMaxRatio`` of RAM (in the page cache, as RocketMQ judges it); otherwise,
and for reads from the lake, in the pull pool, where a page fault or a file write blocks no one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from lakemq.broker.business_pool import BusinessPool
from lakemq.broker.config import BrokerConfig
from lakemq.broker.consumer_manager import ConsumerManager
from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.filter import check_expression_type, message_filter_for
from lakemq.broker.metrics import BrokerMetrics
from lakemq.broker.pull_request_hold_service import PullRequestHoldService
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.broker.topic_config_manager import TopicConfigManager
from lakemq.common.codes import ResponseCode
from lakemq.common.constants import MASTER_ID, PermName, PullSysFlag
from lakemq.common.subscription import SubscriptionData
from lakemq.common.validation import check_group
from lakemq.errors import FilterExpressionError, for_code
from lakemq.filter import parse_subscription
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import PullMessageRequestHeader, decode_header, pull_response_fields
from lakemq.store.filter import MessageFilter
from lakemq.store.get_results import GetMessageResult, GetMessageStatus
from lakemq.store.message_store import MessageStore

if TYPE_CHECKING:  # the lake reader (Delta, pyarrow) is imported only by brokers with a lakeUri
    from lakemq.broker.cold_read import ColdPuller

__all__ = ["PullMessageProcessor"]

log = logging.getLogger(__name__)

_POSTED_CACHE = 4096  # subscriptions whose filters are kept (cleared when full)
# Store answers for offsets whose records only the lake still holds.
_LAKE_HELD = frozenset({
    GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.MESSAGE_WAS_REMOVING})


class PullMessageProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        consumers: ConsumerManager,
        offsets: ConsumerOffsetManager,
        hold_service: PullRequestHoldService,
        pool: BusinessPool,
        metrics: BrokerMetrics,
        cold: ColdPuller | None = None,
    ) -> None:
        self._metrics = metrics
        self._record_get = metrics.gets.record
        self._cold = cold  # None: no lakeUri, offsets below the hot min are moved as before
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._consumers = consumers
        self._offsets = offsets
        self._hold = hold_service
        self._pool = pool
        # Filters of the subscriptions pulls carry (PullSysFlag.SUBSCRIPTION), by what was sent.
        self._posted: dict[tuple[str, str | None, str | None, int], tuple[SubscriptionData, MessageFilter]] = {}
        self._hot_bytes = _physical_memory() * store.config.access_message_in_memory_max_ratio // 100
        self._slave_reads = config.slave_read_enable
        self._keeps_offsets = store.is_slave and not store.config.offset_check_in_slave

    def reject_request(self) -> bool:
        return False

    def process_request(
        self, ctx: RequestContext, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand] | None:
        header = decode_header(PullMessageRequestHeader, request.ext_fields)
        if self._reads_hot(header):
            # Nothing to create and what is read sits in the page cache: done on the loop, as a
            # pool hop (two thread switches and GIL hand-offs) costs more than the read.
            message_filter, response = self._check_and_pull(ctx, request, header, on_loop=True)
            if response.code == ResponseCode.PULL_NOT_FOUND and header.sys_flag & PullSysFlag.SUSPEND:
                # Held without a task: the hold service calls back, which answers (None: the
                # response is written later).
                self._hold.hold_then(header.topic, header.queue_id, header.queue_offset, self._hold_seconds(header),
                                     message_filter, ctx.connection,
                                     lambda _woken: self._answer_held(ctx, request, header, message_filter))
                return None
            return response
        return self._pooled(ctx, request, header)

    def _hold_seconds(self, header: PullMessageRequestHeader) -> float:
        timeout_ms = (
            min(max(header.suspend_timeout_millis, 0), self._config.max_suspend_timeout_millis)
            if self._config.long_polling_enable
            else self._config.short_polling_time_mills
        )
        return timeout_ms / 1000

    def _answer_held(self, ctx: RequestContext, request: RemotingCommand, header: PullMessageRequestHeader,
                     message_filter: MessageFilter) -> None:
        """A held pull's end (woken, timed out or released), on the loop: pull again, answer."""
        if not ctx.is_open:
            return  # the client went away while held; an answer has nowhere to go
        try:
            # Woken by an arrival: what it reads was just dispatched and sits in the page cache.
            response = self._pull(request, header, message_filter, on_loop=True)
        except Exception as exc:  # a failure is the puller's answer, as the dispatcher's
            log.exception("held pull of %s:%d failed", header.topic, header.queue_id)
            response = request.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        ctx.connection.send_response(response)

    async def _pooled(
        self, ctx: RequestContext, request: RemotingCommand, header: PullMessageRequestHeader
    ) -> RemotingCommand:
        # Checks may create the group's config (a file write) and reads may fault pages in from
        # disk: both in the pool.
        message_filter, response = await self._pool.run(
            lambda: self._check_and_pull(ctx, request, header, on_loop=False))
        if response.code == ResponseCode.PULL_NOT_FOUND and header.sys_flag & PullSysFlag.SUSPEND:
            return await self._hold_and_pull(ctx, request, header, message_filter, response)
        return response

    async def _hold_and_pull(
        self,
        ctx: RequestContext,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        message_filter: MessageFilter,
        response: RemotingCommand,
    ) -> RemotingCommand:
        await self._hold.hold(
            header.topic, header.queue_id, header.queue_offset, self._hold_seconds(header), message_filter,
            ctx.connection
        )
        if not ctx.is_open:
            return response  # the client went away while held; the answer is dropped anyway
        # Woken by an arrival: what it reads was just dispatched and sits in the page cache,
        # so the read is done here rather than after another hop through the pull pool.
        return self._pull(request, header, message_filter, on_loop=True)

    def _reads_hot(self, header: PullMessageRequestHeader) -> bool:
        """True when the pull can run on the loop: its group exists (no auto-creation) and the
        first record it reads lies within the CommitLog's most recent bytes, which RocketMQ
        counts as in memory (accessMessageInMemoryMaxRatio of RAM), or it reads nothing."""
        if self._groups.get(header.consumer_group) is None:
            return False
        try:
            cq = self._store.consume_queues.find(header.topic, header.queue_id)
        except ValueError:  # a bad topic or queue id: refused with its reason by the pool path
            return False
        if cq is None:
            return True
        if header.queue_offset >= cq.get_max_offset_in_queue():
            return True  # nothing to read yet: answered or held without touching the CommitLog
        unit = cq.get_unit(header.queue_offset)
        if unit is None:
            return False  # below the min offset: moved, or read from the lake
        commit_log = self._store.commit_log
        if unit.commit_log_offset < commit_log.get_min_offset():
            return False  # its CommitLog file is gone: read from the lake, or skipped
        return commit_log.get_max_offset() - unit.commit_log_offset < self._hot_bytes

    def _check_and_pull(
        self, ctx: RequestContext, request: RemotingCommand, header: PullMessageRequestHeader, *, on_loop: bool
    ) -> tuple[MessageFilter, RemotingCommand]:
        message_filter = self._check(header)
        response = self._pull(request, header, message_filter, on_loop=on_loop)
        if header.sys_flag & PullSysFlag.COMMIT_OFFSET and self._config.broker_id == MASTER_ID:
            self._offsets.commit_offset(
                ctx.remote_addr, header.consumer_group, header.topic, header.queue_id, header.commit_offset
            )
        return message_filter, response

    def _check(self, header: PullMessageRequestHeader) -> MessageFilter:
        """Permissions, group, topic, queue and subscription; raises BrokerError to refuse.
        Returns the store filter of the subscription."""
        c = self._config
        if not PermName.is_readable(c.broker_permission):
            raise for_code(
                ResponseCode.NO_PERMISSION, f"the broker[{c.broker_ip1}] pulling message is forbidden"
            )
        group_config = self._groups.find_subscription_group_config(header.consumer_group)
        if group_config is None:
            check_group(header.consumer_group)  # a name that breaks the rules is refused as such
            raise for_code(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{header.consumer_group}] does not exist",
            )
        if not group_config.consume_enable:
            raise for_code(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {header.consumer_group}"
            )
        topic_config = self._topics.select_topic_config(header.topic)
        if topic_config is None:
            raise for_code(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!"
            )
        if not PermName.is_readable(topic_config.perm):
            raise for_code(
                ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] pulling message is forbidden"
            )
        if not 0 <= header.queue_id < topic_config.read_queue_nums:
            raise for_code(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] "
                f"consumer:[{header.consumer_group}]",
            )
        if header.sys_flag & PullSysFlag.SUBSCRIPTION:
            # A consumer sends the same subscription with every pull: parsed once.
            key = (header.topic, header.subscription, header.expression_type, header.sub_version)
            cached = self._posted.get(key)
            if cached is None:
                try:
                    subscription = parse_subscription(
                        header.topic, header.subscription, header.expression_type, sub_version=header.sub_version
                    )
                except FilterExpressionError as exc:
                    raise for_code(
                        ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                        f"parse the consumer's subscription[{header.subscription}] failed: {exc}",
                    ) from exc
                if len(self._posted) >= _POSTED_CACHE:
                    self._posted.clear()
                cached = self._posted[key] = (subscription, message_filter_for(subscription))
            self._check_expression(cached[0])
            return cached[1]
        else:
            group_info = self._consumers.get_consumer_group_info(header.consumer_group)
            if group_info is None:
                raise for_code(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's group info not exist, group: {header.consumer_group}",
                )
            if not group_config.consume_broadcast_enable and group_info.message_model == "BROADCASTING":
                raise for_code(
                    ResponseCode.NO_PERMISSION,
                    f"the consumer group[{header.consumer_group}] can not consume by broadcast way",
                )
            found = group_info.subscription_table.get(header.topic)
            if found is None:
                raise for_code(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription not exist, group: {header.consumer_group}",
                )
            if found.sub_version < header.sub_version:
                raise for_code(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST,
                    f"the consumer's subscription not latest, group: {header.consumer_group}",
                )
        self._check_expression(found)
        return message_filter_for(found)

    def _check_expression(self, subscription: SubscriptionData) -> None:
        check_expression_type(subscription, self._config.enable_property_filter)

    def _pull(
        self, request: RemotingCommand, header: PullMessageRequestHeader, message_filter: MessageFilter, *,
        on_loop: bool
    ) -> RemotingCommand:
        """The pull's answer. Offsets the hot tier no longer holds are read from the lake
        (with a lakeUri): below the queue's min (expired), in a ConsumeQueue file that expiry
        just deleted, or whose record's CommitLog file is gone while its entry is not yet. Such
        a read blocks, so ``on_loop`` answers PULL_RETRY_IMMEDIATELY at the same offset
        instead, and the client's next pull runs in the pool (_reads_hot sends it there)."""
        max_bytes = header.max_msg_bytes if header.max_msg_bytes and header.max_msg_bytes > 0 else 256 * 1024
        result = self._store.get_message(
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.queue_offset,
            max(header.max_msg_nums, 1),
            message_filter,
            max_bytes,
        )
        if self._cold is not None and result.status in _LAKE_HELD:
            if on_loop:
                result.status, result.next_begin_offset = GetMessageStatus.MESSAGE_WAS_REMOVING, header.queue_offset
            else:
                # Expired: up to the hot min. Deleted under the read: as far as the lake goes.
                end = result.min_offset if result.status is GetMessageStatus.OFFSET_TOO_SMALL else result.max_offset
                result = self._cold.pull(
                    header.topic, header.queue_id, header.queue_offset, end, max(header.max_msg_nums, 1),
                    message_filter, max_bytes, result,
                ) or result
        code, remark = _map_status(result, header.queue_offset)
        suggest = MASTER_ID
        group = self._groups.get(header.consumer_group) if self._slave_reads or self._keeps_offsets else None
        if self._slave_reads and group is not None:
            suggest = group.which_broker_when_consume_slowly if result.suggest_pulling_from_slave else group.broker_id
        if code == ResponseCode.PULL_OFFSET_MOVED and self._keeps_offsets:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
            suggest = group.broker_id if group is not None else MASTER_ID
        fields = pull_response_fields(suggest, result.next_begin_offset, result.min_offset, result.max_offset)
        body = result.joined() if code == ResponseCode.SUCCESS else b""
        if body:
            self._record_get(header.topic, header.consumer_group, result.msg_count, len(body))
        return request.reply(code, remark, fields, body)


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


def _map_status(result: GetMessageResult, requested_offset: int) -> tuple[int, str]:
    status = result.status
    if status is GetMessageStatus.FOUND:
        return ResponseCode.SUCCESS, "FOUND"
    if status in (GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MATCHED_MESSAGE):
        return ResponseCode.PULL_RETRY_IMMEDIATELY, status.name
    if status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
        if requested_offset != 0:
            log.info(
                "pull offset %d of an empty or unknown queue: moved to %d",
                requested_offset,
                result.next_begin_offset,
            )
            return ResponseCode.PULL_OFFSET_MOVED, status.name
        return ResponseCode.PULL_NOT_FOUND, status.name
    if status in (GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.OFFSET_OVERFLOW_ONE):
        return ResponseCode.PULL_NOT_FOUND, status.name
    # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL: the client resets to next_begin_offset.
    log.info(
        "pull offset %d out of range [%d, %d]: %s",
        requested_offset,
        result.min_offset,
        result.max_offset,
        status.name,
    )
    return ResponseCode.PULL_OFFSET_MOVED, status.name
