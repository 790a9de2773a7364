"""MessageStore: the hot tier's face to the broker (RocketMQ's DefaultMessageStore, slimmed).

It wires the parts, runs load / start / shutdown, and answers reads (a pull's read of a queue:
lakemq.store.queue_read). Every call blocks; the broker calls it from thread pools.

Load: an ``abort`` file left in the store root means the last run did not shut down
cleanly. Then the CommitLog is replayed (re-dispatched) from the last file old enough for
the checkpoint, IndexFiles that may be torn are rebuilt, and ConsumeQueue and IndexFile
entries past the recovered CommitLog end are cut. Otherwise the CommitLog's last files are
checked and cut at the first bad record. Either way the per-queue next offsets come from the
ConsumeQueues.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lakemq.common.durable import create_file_durably, make_dirs_durably, unlink_durably
from lakemq.common.message import MessageConst, MessageExt
from lakemq.common.record import decode_message_id, decode_record, read_header
from lakemq.common.validation import check_topic
from lakemq.errors import RecordError, StoreError
from lakemq.store.acks import AckSink, AckWatch
from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import BrokerRole, StoreConfig
from lakemq.store.consume_queue_store import ConsumeQueueStore
from lakemq.store.delay_levels import DelayLevels
from lakemq.store.device import appends_may_wait_for_writeback
from lakemq.store.dispatch import (
    CommitLogDispatcher,
    MessageArrivingListener,
    ReputMessageService,
    dispatch_to,
)
from lakemq.store.filter import MessageFilter
from lakemq.store.flush import FlushListener
from lakemq.store.get_results import GetMessageResult, QueryMessageResult
from lakemq.store.health import StoreHealth
from lakemq.store.index_service import IndexService
from lakemq.store.maintenance import CleanExpiredFilesService, FlushConsumeQueueService, UnconsumedJudge
from lakemq.store.put_request import MessagesPut, PutRequest
from lakemq.store.queue_read import QueueReader
from lakemq.store.results import PutMessageResult, PutMessageStatus
from lakemq.store.schedule import ScheduleMessageService
from lakemq.store.timer import RecallOutcome, TimerMessageService
from lakemq.store.timer_message import recall_marker

__all__ = ["MessageStore"]

_get_ident = threading.get_ident
_CREATE_FAILED = PutMessageStatus.CREATE_MAPPED_FILE_FAILED

log = logging.getLogger(__name__)


class MessageStore:
    def __init__(self, config: StoreConfig, *, store_host: str = "127.0.0.1:10911") -> None:
        self.config = config
        self.store_host = store_host
        self.checkpoint = StoreCheckpoint(config.checkpoint_path)
        self.commit_log = CommitLog(config, store_host=store_host, checkpoint=self.checkpoint)
        self.delay_levels = DelayLevels(config.message_delay_level)
        self.consume_queues = ConsumeQueueStore(
            config.consume_queue_dir, config.mapped_file_size_consume_queue, self.commit_log.pickup_store_timestamp
        )
        self.index_service: IndexService | None = (
            IndexService(config.index_dir, hash_slot_num=config.max_hash_slot_num, index_num=config.max_index_num)
            if config.message_index_enable else None
        )
        # The index before the ConsumeQueues (RocketMQ builds them the other way round): a
        # record has its keys indexed by the time its queue entry raises the queue's max offset,
        # so a key look-up made after reading a max offset finds every message below it (the
        # lakemq source's key reads, lakemq.jobs.live_index).
        self.dispatchers: list[CommitLogDispatcher] = [] if self.index_service is None else [self.index_service]
        self.dispatchers.append(self.consume_queues)
        self.message_arriving_listeners: list[MessageArrivingListener] = []
        self.health = StoreHealth(config, lambda: self.reput.dispatch_behind_bytes())
        self.reput = ReputMessageService(
            self.commit_log, self.dispatchers, reput_from_offset=0, delay_levels=self.delay_levels,
            listeners=self.message_arriving_listeners, health=self.health,
        )
        self.schedule = ScheduleMessageService(
            self.delay_levels, find_queue=self.consume_queues.find, read_message=self.look_message_by_offset,
            put_message=lambda msg: self.put(MessagesPut.of(msg)), offset_path=config.delay_offset_path,
            persist_interval_ms=config.flush_delay_offset_interval,
        )
        self.timer = TimerMessageService(
            find_queue=self.consume_queues.find, read_message=self.look_message_by_offset,
            put_message=lambda msg: self.put(MessagesPut.of(msg)), delivered_copy=self._timer_copy_exists,
            flushed_offset=lambda: self.commit_log.mapped_file_queue.flushed_where,
            checkpoint_path=config.timer_checkpoint_path, flush_interval_ms=config.timer_flush_interval_ms,
        )
        self.flush_consume_queue_service = FlushConsumeQueueService(
            config, self.consume_queues, self.index_service, self.checkpoint
        )
        self._retention_guard: Callable[[], int] | None = None
        self._unconsumed_judge: UnconsumedJudge | None = None
        self.clean_service = CleanExpiredFilesService(
            config, self.commit_log, self.consume_queues, self.index_service,
            dispatched_offset=lambda: self.reput.reput_from_offset, retention_guard=lambda: self._retention_guard,
            health=self.health, unconsumed_judge=lambda: self._unconsumed_judge,
        )
        # dispatch_inline's thread and request; _inline_due: a pass was requested, not yet run.
        self._inline_thread: int | None = None
        self._inline_request: Callable[[], None] | None = None
        self._inline_due = False
        self.last_exit_ok = True
        self._running = False
        # A slave's CommitLog is its master's: only replication appends to it.
        self._accepts_puts = False
        self._held: str | None = None  # why puts are held (hold_puts), None when they are not
        self._slave = config.broker_role is BrokerRole.SLAVE
        self._reader = QueueReader(config, self.consume_queues, self.commit_log,
                                   keeps_offsets=self._slave and not config.offset_check_in_slave)
        # Whether an append may wait for the disk (stable pages; lakemq.store.device): known
        # once the CommitLog's directory exists, at start.
        self.appends_may_wait = True

    # -- life cycle --------------------------------------------------------------------------

    def load(self) -> bool:
        """Open and recover every file; False when something cannot be loaded."""
        abort = self.config.abort_file_path
        self.last_exit_ok = not abort.exists()
        if not (self.commit_log.load() and self.consume_queues.load() and self.schedule.load()
                and self.timer.load()):
            return False
        if not self.consume_queues.all() and self.commit_log.get_min_offset() > 0:
            # Dispatch would rebuild only the queues still in the CommitLog: the others would
            # restart at offsets already used.
            raise StoreError(
                f"{self.config.consume_queue_dir} holds no queue but the CommitLog starts at offset "
                f"{self.commit_log.get_min_offset()} (older files are gone): rebuild the ConsumeQueues with "
                "`lakemq reindex` (it continues each queue from the lake and the committed offsets) or restore them")
        rebuild_from = None
        if self.index_service is not None:
            rebuild_from = self.index_service.load(self.last_exit_ok, self.checkpoint.index_msg_timestamp)
        self.consume_queues.recover()
        if self.last_exit_ok:
            process_offset = self.commit_log.recover_normally()
        else:
            min_ts = (self.checkpoint.min_timestamp_index() if self.config.message_index_safe
                      else self.checkpoint.min_timestamp())
            if rebuild_from is not None:
                min_ts = min(min_ts, rebuild_from)
            log.warning("abnormal shutdown detected: replaying the CommitLog from timestamp %d", min_ts)
            process_offset = self.commit_log.recover_abnormally(min_ts, lambda req: dispatch_to(self.dispatchers, req))
        self.consume_queues.truncate_dirty(process_offset)
        if self.index_service is not None:
            self.index_service.truncate_dirty(process_offset)
        self.consume_queues.correct_min_offset(self.commit_log.get_min_offset())
        self.reput.reput_from_offset = max(self.consume_queues.max_physic_offset(), self.commit_log.get_min_offset())
        return True

    def start(self, hold_puts: str | None = None) -> None:
        """Mark the run as not cleanly ended (the abort file), catch dispatch up, restore the
        per-queue offsets, then accept puts (unless ``hold_puts`` says why not yet: see
        :meth:`release_puts`) and start the background services."""
        make_dirs_durably(self.config.abort_file_path.parent)
        if not self.config.abort_file_path.exists():
            self.config.abort_file_path.touch()
            # Durable before any put: without it, a power cut would pass for a clean shutdown
            # and recovery would trust ConsumeQueues the cut rolled back.
            create_file_durably(self.config.abort_file_path)
        if self.index_service is not None:
            self.index_service.dispatching_from(self.reput.reput_from_offset)
        self.reput.do_reput()
        self.health.check()  # a disk already full refuses the first put
        self.commit_log.set_topic_queue_table(self.consume_queues.offset_table())
        self.commit_log.start()
        self.appends_may_wait = appends_may_wait_for_writeback(self.config.commit_log_dir)
        self._running = True
        self._held = hold_puts
        self._accepts_puts = not self._slave and hold_puts is None
        self.reput.start()
        self.flush_consume_queue_service.start()
        self.clean_service.start()
        if not self._slave:  # delays are delivered by the master; a slave keeps its offsets
            self.schedule.start()
            self.timer.start()

    def shutdown(self) -> None:
        """Stop puts, deliver nothing more, dispatch what was written, flush everything, write
        the checkpoint; the abort file goes only when all of that completed."""
        if not self._running:
            return
        self._running = self._accepts_puts = False
        self.schedule.shutdown()
        self.timer.shutdown()
        self.clean_service.shutdown()
        self.reput.shutdown()
        self.commit_log.shutdown()
        if not self._slave:  # the CommitLog is flushed now: the timer's last state can be saved
            self.timer.persist_quietly(fresh=True)
        self.flush_consume_queue_service.shutdown()
        if self.index_service is not None:
            self.checkpoint.index_msg_timestamp = self.index_service.flush()
            self.index_service.shutdown()
        self.consume_queues.shutdown()
        self.checkpoint.shutdown()
        if self.reput.dispatch_behind_bytes() == 0:
            unlink_durably(self.config.abort_file_path, missing_ok=True)
        else:
            log.warning("shutdown with %d bytes not dispatched: next load recovers abnormally",
                        self.reput.dispatch_behind_bytes())

    # -- put ---------------------------------------------------------------------------------

    def _refusal(self) -> PutMessageResult:
        if not self._running:
            why = "store is not running"
        else:
            why = "broker role is SLAVE: puts are refused" if self._slave else f"puts are held: {self._held}"
        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=why)

    @property
    def puts_held(self) -> bool:
        return self._running and self._held is not None

    def release_puts(self) -> None:
        """Accept the puts ``start(hold_puts=...)`` held, after dispatching what replication
        appended meanwhile (lakemq.broker.ha.catch_up) and taking each queue's next offset from
        the ConsumeQueues again: appends do not move it, and a put must not reuse an offset
        they filled. Blocks for the dispatch (not on an event loop)."""
        if not self.puts_held:
            return
        self.reput.do_reput()
        self.commit_log.set_topic_queue_table(self.consume_queues.offset_table())
        self._held = None
        self._accepts_puts = True

    def put(self, request: PutRequest, sink: AckSink | None = None, token: object = None) -> PutMessageResult:
        """Store ``request`` (lakemq.store.put_request) and wake dispatch. Without ``sink``
        this blocks until the put may be answered (under SYNC_FLUSH: flushed, or its
        deadline passed); with one, a put that waits comes back ``pending`` and ``sink``
        receives ``(token, status)`` later (CommitLog.put, lakemq.store.acks). Refused, with
        the reason, while the store is stopped, the disk is full or dispatch fails (StoreHealth),
        and always by a SLAVE's store: its CommitLog is its master's."""
        if not self._accepts_puts:
            return self._refusal()
        if self.health.refusal is not None:
            refused = self.health.refused_put()
            if refused is not None:
                return refused
        result = self.commit_log.put(request, sink, token)
        if result.status is _CREATE_FAILED:
            # No room for a new CommitLog file: the disk is measured now, not at the next check
            # (up to 100 ms away), and a full disk is this put's answer as it is the next ones'.
            self.health.check()
            refused = self.health.refused_put() if self.health.disk_full else None
            if refused is not None:
                return refused
        if result.append_result is not None:  # appended (PutMessageResult.is_ok, without its call)
            if self._inline_thread != _get_ident():
                self.reput.wakeup()
            elif not self._inline_due:
                self._inline_due = True
                self._inline_request()  # type: ignore[misc]
        return result

    def dispatch_inline(self, request: Callable[[], None] | None) -> None:
        """Dispatch the calling thread's puts on that thread (an event loop's) instead of
        waking the dispatch thread for them: after the first of its puts since the last pass
        the store calls ``request()``, which must see that :meth:`dispatch` runs soon on this
        thread (one pass then covers every put made meanwhile). Puts from other threads still
        wake the dispatch thread. ``None`` ends it."""
        self._inline_request = request
        self._inline_due = False
        self._inline_thread = threading.get_ident() if request is not None else None

    def dispatch(self) -> None:
        """A dispatch pass on the calling thread (see :meth:`dispatch_inline`)."""
        self._inline_due = False
        self.reput.dispatch_now()

    # -- timer messages ----------------------------------------------------------------------

    def recall_timer_message(self, topic: str, uniq_key: str, due_ms: int) -> RecallOutcome:
        """Cancel a waiting timer message (RocketMQ 5's RecallMessage; lakemq.store.timer)."""
        if not self._accepts_puts:
            return RecallOutcome.FAILED
        # The message may be stored and not yet dispatched: its send's answer can overtake
        # dispatch. Wait (bounded) until dispatch reached what was stored when the recall came.
        target, deadline = self.commit_log.get_max_offset(), time.monotonic() + 5.0
        while self.reput.reput_from_offset < target and time.monotonic() < deadline:
            self.reput.wakeup()
            time.sleep(0.001)
        return self.timer.recall(
            topic, uniq_key, due_ms,
            lambda key, due: self.put(MessagesPut.of(recall_marker(key, uniq_key, due, self.store_host))))

    def _timer_copy_exists(self, topic: str, uniq_key: str, due_ms: int) -> bool:
        """Whether ``topic`` holds the delivered copy of the timer message ``uniq_key`` due at
        ``due_ms`` (the copy keeps its TIMER_OUT_MS)."""
        for record in self.query_message(topic, uniq_key, 32, 0, 2**63 - 1).messages:
            if decode_record(record, read_body=False).properties.get(MessageConst.TIMER_OUT_MS) == str(due_ms):
                return True
        return False

    # -- replication -------------------------------------------------------------------------

    @property
    def is_slave(self) -> bool:
        return self._slave

    @property
    def commit_log_file_size(self) -> int:
        return self.config.mapped_file_size_commit_log

    def append_to_commit_log(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """A slave's replication append (CommitLog.append_replica), then dispatch is woken.
        Returns the new max offset; raises StoreError when the bytes do not go at ``offset``."""
        end = self.commit_log.append_replica(offset, data)
        self.reput.wakeup()
        return end

    def get_commit_log_data(self, offset: int) -> memoryview | None:
        """A master's bytes for its slaves: from ``offset`` to the end of what is written in
        the file holding it (None when no file holds it)."""
        if not self._running:
            return None
        return self.commit_log.get_data(offset)

    # -- pull --------------------------------------------------------------------------------

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
        max_total_bytes: int = 256 * 1024,
    ) -> GetMessageResult:
        """Up to ``max_msg_nums`` records of ``topic``/``queue_id`` from queue offset
        ``offset`` that pass the filter. ``next_begin_offset`` is where the next pull starts."""
        return self._reader.get_message(topic, queue_id, offset, max_msg_nums, message_filter, max_total_bytes)

    # -- lookups -----------------------------------------------------------------------------

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> bytes | None:
        """The raw record at ``commit_log_offset`` (its size read from the record when not given)."""
        if commit_log_offset < 0 or commit_log_offset >= self.commit_log.get_max_offset():
            return None
        if size is None:
            head = self.commit_log.get_message(commit_log_offset, 8)
            if head is None:
                return None
            size = read_header(head, 0).total_size
            if size <= 0:
                return None
        return self.commit_log.get_message(commit_log_offset, size)

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> MessageExt | None:
        record = self.select_one_message_by_offset(commit_log_offset, size)
        if record is None:
            return None
        try:
            msg = decode_record(record)
        except RecordError:
            return None
        return msg if msg.commit_log_offset == commit_log_offset else None

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        """Records indexed under ``key`` (a KEYS entry or the UNIQ_KEY) of ``topic`` stored in
        [begin, end] ms, newest first. Index entries whose record is no longer that message
        (cut by recovery, or expired) are dropped."""
        check_topic(topic)
        result = QueryMessageResult()
        if self.index_service is None or not key:
            return result
        # An IndexFile entry keeps whole seconds after its file's begin timestamp, so it reads
        # up to 999 ms early: look that much wider, then keep what was stored in [begin, end].
        limit = min(max_num, self.config.max_msgs_num_batch)
        found = self.index_service.query_offset(topic, key, limit, begin - 999, end)
        result.index_last_update_timestamp = found.index_last_update_timestamp
        result.index_last_update_phy_offset = found.index_last_update_phy_offset
        result.index_cut = len(found.phy_offsets) >= limit
        result.index_whole_from = found.whole_from
        seen: set[int] = set()
        for phy in found.phy_offsets:
            if phy in seen:
                continue
            seen.add(phy)
            record = self.select_one_message_by_offset(phy)
            if record is None:
                continue
            try:
                msg = decode_record(record, read_body=False)
            except RecordError:
                continue
            if (msg.commit_log_offset == phy and msg.topic == topic and begin <= msg.store_timestamp <= end
                    and (key in msg.keys or msg.unique_key == key)):
                result.messages.append(record)
        return result

    def view_message_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt | None:
        """By offset message id (host + CommitLog offset); with ``topic`` also by UNIQ_KEY."""
        if topic is not None:
            hits = self.query_message(topic, msg_id, 1, 0, 2**63 - 1).messages
            if hits:
                return decode_record(hits[0])
        try:
            _host, offset = decode_message_id(msg_id)
        except RecordError:
            return None
        msg = self.look_message_by_offset(offset)
        return msg if msg is not None and msg.msg_id == msg_id.upper() else None

    # -- offsets and times -------------------------------------------------------------------

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.get_offset_in_queue_by_time(timestamp_ms) if cq else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(cq_offset) if cq else None
        return unit.commit_log_offset if unit is not None and not unit.is_blank else 0

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(cq_offset) if cq else None
        if unit is None or unit.is_blank:
            return -1
        return self.commit_log.pickup_store_timestamp(unit.commit_log_offset, unit.size)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        return self.get_message_store_timestamp(topic, queue_id, self.get_min_offset_in_queue(topic, queue_id))

    def get_min_phy_offset(self) -> int:
        return self.commit_log.get_min_offset()

    def get_flushed_phy_offset(self) -> int:
        """How far the CommitLog is flushed to disk (a power cut keeps everything below)."""
        return self.commit_log.flushed_where

    def get_max_phy_offset(self) -> int:
        return self.commit_log.get_max_offset()

    def dispatch_behind_bytes(self) -> int:
        return self.reput.dispatch_behind_bytes()

    # -- admin -------------------------------------------------------------------------------

    def set_retention_guard(self, guard: Callable[[], int] | None) -> None:
        """``guard()`` is the highest CommitLog offset whose file may be deleted (tiering: the
        end of what the lake holds). With a guard, deleted records are still readable from
        there, so a pull stops at one rather than skipping it (QueueReader.stops_at_removed)."""
        self._retention_guard = guard
        self._reader.stops_at_removed = guard is not None

    def set_unconsumed_judge(self, judge: UnconsumedJudge | None) -> None:
        """``judge(ranges, unread_topics)`` says which messages of a deleted CommitLog file
        consumer groups had not consumed yet; expiry logs and counts them."""
        self._unconsumed_judge = judge

    def set_flush_listener(self, listener: FlushListener | None) -> None:
        """``listener(seconds, bytes)`` after every CommitLog flush that wrote something, on
        the flush thread, PutAcks' thread or an ack watch's owner (so it must be quick and
        thread-safe)."""
        self.commit_log.flush_service.flush_listener = listener

    def open_ack_watch(self, sink: AckSink) -> AckWatch | None:
        """See CommitLog.open_ack_watch."""
        return self.commit_log.open_ack_watch(sink)

    def flush_inline(self, request: Callable[[], None] | None) -> bool:
        """See CommitLog.flush_inline."""
        return self.commit_log.flush_inline(request)

    def flush_now(self, quiet_fd: int = -1) -> None:
        """See CommitLog.flush_now."""
        self.commit_log.flush_now(quiet_fd)

    def execute_delete_files_manually(self) -> None:
        self.clean_service.trigger_manual_delete()

    def delete_topics(self, topics: set[str]) -> None:
        """Drop the topics' ConsumeQueues and queue offsets (their records age out of the
        CommitLog as usual)."""
        for topic in topics:
            check_topic(topic)
        for cq in self.consume_queues.all():
            if cq.topic in topics:
                self.commit_log.remove_queue_from_topic_queue_table(cq.topic, cq.queue_id)
        self.consume_queues.delete_topics(topics)
