"""CommitLog: the one append-only log of every message of a broker.

One appender at a time (the put lock). The record layout is :mod:`lakemq.common.record`'s.
A put's messages are checked and measured before the lock (:mod:`lakemq.store.commit_log_encode`,
mostly compiled, docs/NATIVE.md); under the lock the compiled Records pack every record with
its queue offset, physical offset and store time straight into the mapped file. A record
that does not fit (with 8 bytes to spare) seals the file with a blank record and goes to the
next one. Flushing happens after the lock is released.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Sequence

from lakemq.common.faults import append_stall_seconds
from lakemq.common.message import MessageExtBrokerInner
from lakemq.common.record import BLANK_MAGIC_CODE, STORE_TIMESTAMP_POS, create_message_id, encode_host
from lakemq.errors import MessageIllegalError, StoreError
from lakemq.store._append_lock import PutMessageSpinLock
from lakemq.store._records import Records
from lakemq.store.acks import AckCondition, AckSink, AckWatch, PutAcks
from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.commit_log_encode import END_FILE_MIN_BLANK_LENGTH, PutEncoder
from lakemq.store.commit_log_recovery import recover_abnormally, recover_normally
from lakemq.store.commit_log_scan import DispatchRequest
from lakemq.store.config import BrokerRole, FlushDiskType, StoreConfig
from lakemq.store.delay_levels import DelayLevels
from lakemq.store.flush import FlushCommitLogService, FlushRealTimeService
from lakemq.store.group_commit import GroupCommit
from lakemq.store.mapped_file import MappedFile
from lakemq.store.mapped_file_queue import MappedFileQueue
from lakemq.store.put_request import BatchPut, MessagesPut, PlainPut, PutRequest
from lakemq.store.replication import ReplicaAcks
from lakemq.store.results import (
    AppendMessageResult,
    AppendMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)
from lakemq.store.warm import WarmMappedFileService

__all__ = ["END_FILE_MIN_BLANK_LENGTH", "CommitLog", "PutMessageSpinLock"]

log = logging.getLogger(__name__)

_BLANK = struct.Struct(">iI")
_LONG = struct.Struct(">q")
# A put's results built as plain tuples: a NamedTuple's own constructor costs 3x as much.
_new_tuple = tuple.__new__
_PUT_OK = PutMessageStatus.PUT_OK
_APPEND_OK = AppendMessageStatus.PUT_OK


class CommitLog:
    def __init__(
        self,
        config: StoreConfig,
        *,
        store_host: str = "127.0.0.1:10911",
        checkpoint: StoreCheckpoint | None = None,
    ) -> None:
        self.config = config
        self.file_size = config.mapped_file_size_commit_log
        self.mapped_file_queue = MappedFileQueue(
            config.commit_log_dir, self.file_size,
            small_pages_while_appending=config.flush_disk_type is FlushDiskType.SYNC_FLUSH)
        self.delay_levels = DelayLevels(config.message_delay_level)
        self.store_host = store_host
        self._store_ip, self._store_port = encode_host(store_host)
        # The 16-byte offset message id is host + offset: the host half is fixed per store.
        self._msg_id_prefix = create_message_id(self._store_ip, self._store_port, 0)[:16].encode()
        self._put_lock = PutMessageSpinLock()
        self._lock_begin_ms = 0
        self._append_stall_s = append_stall_seconds()  # fault injection only; 0 in production
        self._create_failure = ""  # why the last new CommitLog file could not be created
        # (topic, queue id) -> next queue offset; the store facade restores it from the
        # ConsumeQueues at start.
        self._topic_queue_table: dict[tuple[str, int], int] = {}
        self._put_encoder = PutEncoder(config, self.file_size, self.delay_levels)
        # The acknowledgement's conditions (lakemq.store.acks): under SYNC_FLUSH the group
        # commit, under SYNC_MASTER replication (fed by the broker's HA service).
        conditions: list[AckCondition] = []
        self.flush_service: FlushCommitLogService
        self._publish: Callable[[int], None] | None = None  # a replicated append's flush (SYNC_FLUSH)
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            group_commit = GroupCommit(self.mapped_file_queue, checkpoint)
            conditions.append(group_commit)
            self.flush_service = group_commit
            self._publish = group_commit.expect
        else:
            self.flush_service = FlushRealTimeService(
                self.mapped_file_queue, config.flush_interval_commit_log,
                config.flush_commit_log_least_pages, config.flush_commit_log_thorough_interval, checkpoint,
            )
        self.replica_acks: ReplicaAcks | None = None
        if config.broker_role is BrokerRole.SYNC_MASTER:
            self.replica_acks = ReplicaAcks(config.ha_slave_fallbehind_max, config.slave_timeout)
            conditions.append(self.replica_acks)
        # None: every put is answered at its append.
        self.acks = PutAcks(config.sync_flush_timeout, conditions) if conditions else None
        self._warm_service = (WarmMappedFileService(self.mapped_file_queue, config.warm_mapped_file_ahead)
                              if config.warm_mapped_file_ahead > 0 else None)
        self._running = False
        # Plain parts and wire batches that went the object way (off the compiled path): what
        # tests and benchmarks read to see which way a put went.
        self.object_path_puts = 0

    # -- life cycle --------------------------------------------------------------------------

    def load(self) -> bool:
        return self.mapped_file_queue.load()

    def start(self) -> None:
        self.mapped_file_queue.prepare_appends()
        self.flush_service.start()
        if self.acks is not None:
            self.acks.start()
        if self._warm_service is not None:
            self._warm_service.start()
        self._running = True

    def shutdown(self) -> None:
        """Stop accepting puts, flush everything, unmap."""
        self._running = False
        with self._put_lock:
            pass  # a barrier: appends re-check ``_running`` under the lock, so none follow
        if self._warm_service is not None:
            self._warm_service.shutdown()
        self.flush_service.shutdown()
        if self.acks is not None:  # after the last flush: its last release answers what that covered
            self.acks.shutdown()
        self.mapped_file_queue.flush(0)
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()

    # -- topic queue table -------------------------------------------------------------------

    def set_topic_queue_table(self, table: dict[tuple[str, int], int]) -> None:
        with self._put_lock:
            self._topic_queue_table = dict(table)

    def get_queue_offset(self, topic: str, queue_id: int) -> int:
        return self._topic_queue_table.get((topic, queue_id), 0)

    def remove_queue_from_topic_queue_table(self, topic: str, queue_id: int) -> None:
        with self._put_lock:
            self._topic_queue_table.pop((topic, queue_id), None)

    # -- put ---------------------------------------------------------------------------------

    def put(self, request: PutRequest, sink: AckSink | None = None, token: object = None) -> PutMessageResult:
        """Append ``request`` (lakemq.store.put_request): a plain send's parts or a wire batch
        the compiled way when it can, else as message objects, which handle everything
        exactly. Then the acknowledgement (lakemq.store.acks): without ``sink`` block until
        the put may be answered; with one, a put that must wait comes back ``pending`` and
        ``sink`` later receives ``(token, status)``."""
        if not self._running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store is not running")
        if isinstance(request, MessagesPut):
            msgs = request.messages
        else:
            if isinstance(request, PlainPut):
                records = self._put_encoder.plain(request)
            else:
                records = self._put_encoder.batch(request)
            if records is not None:
                return self._acknowledge(self._append_records(records), True, sink, token)
            self.object_path_puts += 1
            try:
                msgs = request.messages(self.store_host)
            except MessageIllegalError as exc:  # a malformed batch body
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=str(exc))
        if len(msgs) == 1 and not isinstance(request, BatchPut):  # one message, no batch rules
            msg = msgs[0]
            encoded = self._put_encoder.message(msg)
            if not isinstance(encoded, Records):
                return encoded
            return self._acknowledge(self._append_records(encoded), msg.wait_store_msg_ok, sink, token)
        appended = self._append_messages(msgs)
        # The batch's wait flag is only read when there is an acknowledgement to wait for.
        wait = self.acks is not None and all(m.wait_store_msg_ok for m in msgs)
        return self._acknowledge(appended, wait, sink, token)

    def _acknowledge(self, appended: AppendMessageResult | PutMessageResult, wait: bool, sink: AckSink | None,
                     token: object) -> PutMessageResult:
        """The put's result: a refusal as it is; an append once acknowledged (lakemq.store.acks)."""
        if isinstance(appended, PutMessageResult):
            return appended  # refused, nothing appended
        acks = self.acks
        if acks is None:
            return _new_tuple(PutMessageResult, (_PUT_OK, appended, "", False))
        end = appended.wrote_offset + appended.wrote_bytes  # next_offset, without the property's call
        if sink is None:
            status = acks.wait(end, wait)
        else:
            registered = acks.register(end, wait, sink, token)
            if registered is None:
                return _new_tuple(PutMessageResult, (_PUT_OK, appended, "", True))
            status = registered
        return _new_tuple(PutMessageResult, (status, appended, "", False))

    def _append_messages(self, msgs: Sequence[MessageExtBrokerInner]) -> AppendMessageResult | PutMessageResult:
        """A batch: every message checked and measured, then appended as one run of records,
        in one file, with consecutive queue offsets per queue (a refusal: PutMessageResult)."""
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="empty batch")
        records = self._put_encoder.messages(msgs)
        if not isinstance(records, Records):
            return records
        return self._append_records(records)

    def _append_records(self, records: Records) -> AppendMessageResult | PutMessageResult:
        """Records checked and measured: into the current file (rolled if they do not fit).
        The append's result, or the refusal (PutMessageResult) when no file can take them."""
        size = records.total
        with self._put_lock:
            now = time.time_ns() // 1_000_000
            self._lock_begin_ms = now
            try:
                if self._append_stall_s:
                    time.sleep(self._append_stall_s)
                files = self.mapped_file_queue.mapped_files
                mf = files[-1] if files and self._running else None
                # _writable_file only when the records do not fit (or there is no file yet)
                if self._running and (mf is None
                                      or mf.file_size - mf.wrote_position < size + END_FILE_MIN_BLANK_LENGTH):
                    mf = self._writable_file(size)
                if mf is None:
                    return self._not_writable()
                offset = mf.file_from_offset + mf.wrote_position
                mf.append_packed(size, records.write, offset, now, self._store_ip, self._store_port,
                                 self._topic_queue_table)
                mf.store_timestamp = now
            finally:
                self._lock_begin_ms = 0
        return _new_tuple(AppendMessageResult, (
            _APPEND_OK, offset, size, records.msg_ids(self._msg_id_prefix, offset), now,
            records.first_queue_offset, records.count, records.body_bytes))

    def _not_writable(self) -> PutMessageResult:
        if not self._running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store is shutting down")
        # The OS's reason (e.g. no space left on device) tells the operator what to fix.
        return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED,
                                remark=f"cannot create a CommitLog file: {self._create_failure}")

    def _writable_file(self, size: int) -> MappedFile | None:
        """The file to append ``size`` bytes to, sealing the current one (END_OF_FILE) if the
        record and a blank record's 8 bytes do not fit."""
        queue = self.mapped_file_queue
        try:
            mf = queue.get_last_mapped_file()
            if mf is not None and size + END_FILE_MIN_BLANK_LENGTH > mf.remaining():
                mf.write_at(mf.wrote_position, _BLANK.pack(mf.remaining(), BLANK_MAGIC_CODE))
                mf.wrote_position = mf.file_size
                mf = queue.get_last_mapped_file()
        except (OSError, StoreError) as exc:
            log.exception("cannot create a CommitLog file")
            self._create_failure = str(exc)
            return None
        return mf

    def lock_time_ms(self) -> int:
        """How long the current put has held the append lock (0 when free): flow control."""
        begin = self._lock_begin_ms
        return time.time_ns() // 1_000_000 - begin if begin else 0

    def is_os_page_cache_busy(self) -> bool:
        return self.lock_time_ms() > self.config.os_page_cache_busy_timeout_mills

    # -- read --------------------------------------------------------------------------------

    def get_min_offset(self) -> int:
        return self.mapped_file_queue.get_min_offset()

    def get_max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    @property
    def flushed_where(self) -> int:
        return self.mapped_file_queue.flushed_where

    def open_ack_watch(self, sink: AckSink) -> AckWatch | None:
        """An AckWatch, for an event loop that acknowledges its own puts made with ``sink``
        (PutAcks.open_watch); None when every put is answered at its append."""
        return self.acks.open_watch(sink) if self.acks is not None else None

    def flush_inline(self, request: Callable[[], None] | None) -> bool:
        """Under SYNC_FLUSH, the calling thread flushes its own puts (GroupCommit.flush_inline);
        False when there is no group commit (nothing to flush for an acknowledgement)."""
        if not isinstance(self.flush_service, GroupCommit):
            return False
        self.flush_service.flush_inline(request)
        return True

    def flush_now(self, quiet_fd: int = -1) -> None:
        """The inline flush of the thread that called flush_inline (GroupCommit.flush_now)."""
        if isinstance(self.flush_service, GroupCommit):
            self.flush_service.flush_now(quiet_fd)

    def roll_next_file(self, offset: int) -> int:
        return self.mapped_file_queue.roll_next_file(offset)

    # -- replication -------------------------------------------------------------------------

    def append_replica(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """A slave's append: ``data``, the master's CommitLog bytes from ``offset`` on, written
        at the same offset. ``offset`` must be where this log ends (a file boundary when it is
        empty) and the bytes must fit in the file holding it, as the master's chunks do.
        Returns the new max offset; raises StoreError when the bytes cannot go there (nothing
        is written then)."""
        size = len(data)
        queue = self.mapped_file_queue
        with self._put_lock:
            if not self._running:
                raise StoreError("the store is not running")
            end = queue.get_max_offset()
            if queue.mapped_files and offset != end:
                raise StoreError(f"replicated bytes start at {offset}, but this CommitLog ends at {end}")
            if not queue.mapped_files and offset % self.file_size:
                raise StoreError(f"replicated bytes start at {offset}, not at a CommitLog file boundary "
                                 f"(file size {self.file_size}), and this CommitLog is empty")
            mf = queue.get_last_mapped_file(start_offset=offset)
            if mf is None:
                raise StoreError(f"no CommitLog file for offset {offset}")
            pos = offset - mf.file_from_offset
            if pos + size > mf.file_size:
                raise StoreError(f"{size} replicated bytes at {offset} cross the end of CommitLog file "
                                 f"{mf.path.name} (the file sizes of master and slave differ?)")
            if not mf.store_timestamp:
                # The first record's store time: older than anything flushed from this file,
                # so the checkpoint built from it makes a crash replay start early enough.
                first = data if pos == 0 else mf.read(0, STORE_TIMESTAMP_POS + 8)
                if len(first) >= STORE_TIMESTAMP_POS + 8:
                    mf.store_timestamp = _LONG.unpack_from(first, STORE_TIMESTAMP_POS)[0]
            mf.append(data)
        if self._publish is not None:
            self._publish(offset + size)  # SYNC_FLUSH: the commit thread flushes it soon, unwaited
        return offset + size

    def get_data(self, offset: int, return_first_on_not_found: bool = False) -> memoryview | None:
        """The written bytes from ``offset`` to the end of its file (zero copy)."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, return_first_on_not_found)
        if mf is None:
            return None
        return mf.select(offset - mf.file_from_offset)

    def view_of(self, offset: int) -> tuple[memoryview, int] | None:
        """The written bytes of the file holding ``offset`` and where that file starts."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        return None if mf is None else (mf.select(0), mf.file_from_offset)

    def get_message(self, offset: int, size: int) -> bytes | None:
        if size <= 0:  # no record is empty: an entry that says so is damaged, not a message
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        data = mf.read(offset - mf.file_from_offset, size)
        return data if len(data) == size else None

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        data = self.get_message(offset, size)
        return _LONG.unpack_from(data, STORE_TIMESTAMP_POS)[0] if data else -1

    def delete_expired_file(self, expired_ms: int, max_offset_allowed: int, delete_files_interval_ms: int = 0,
                            clean_immediately: bool = False) -> int:
        return self.mapped_file_queue.delete_expired_file_by_time(
            expired_ms, max_offset_allowed, delete_files_interval_ms, clean_immediately)

    # -- recovery (lakemq.store.commit_log_recovery) ------------------------------------------

    def recover_normally(self) -> int:
        """After a clean shutdown: the recovered end (the CommitLog max offset)."""
        return recover_normally(self.mapped_file_queue, self.config)

    def recover_abnormally(self, min_timestamp: int, dispatch: Callable[[DispatchRequest], None]) -> int:
        """After a crash: replay into ``dispatch`` from the checkpoint's ``min_timestamp``."""
        return recover_abnormally(self.mapped_file_queue, self.config, self.delay_levels, min_timestamp, dispatch)
