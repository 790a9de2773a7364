"""CommitLog: the one append-only log of every message of a broker.

One appender at a time (the put lock). The record layout is :mod:`lakemq.common.record`'s.
The compiled encoder (:mod:`lakemq.store._native`, docs/NATIVE.md) checks and measures the
messages (body CRC included); under the lock it packs every record with its queue offset,
physical offset and store time straight into the mapped file. A record that does not fit
(with 8 bytes to spare) seals the file with a blank record and goes to the next one. Flushing
happens after the lock is released.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from lakemq.common.faults import append_stall_seconds
from lakemq.common.message import (
    MessageConst,
    MessageExtBatch,
    MessageExtBrokerInner,
    MessageSysFlag,
    properties_to_string,
)
from lakemq.common.record import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    PROPS_LEN,
    RECORD_FIXED_SIZE,
    STORE_TIMESTAMP_POS,
    check_record,
    crc32,
    create_message_id,
    encode_host,
)
from lakemq.common.validation import is_valid_name
from lakemq.errors import StoreError
from lakemq.store._native import PutMessageSpinLock, RecordEncoder, Records
from lakemq.store.checkpoint import StoreCheckpoint
from lakemq.store.commit_log_scan import DispatchRequest, iter_dispatch_requests, scan_valid_end
from lakemq.store.config import FlushDiskType, StoreConfig
from lakemq.store.delay_levels import DelayLevels, rewrite_delayed_message
from lakemq.store.flush import (
    AckSink,
    FlushCommitLogService,
    FlushRealTimeService,
    FlushWatch,
    GroupCommitService,
)
from lakemq.store.mapped_file import MappedFile
from lakemq.store.mapped_file_queue import MappedFileQueue
from lakemq.store.results import (
    AppendMessageResult,
    AppendMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)
from lakemq.store.warm import WarmMappedFileService

__all__ = ["END_FILE_MIN_BLANK_LENGTH", "CommitLog", "PutMessageSpinLock"]

log = logging.getLogger(__name__)

END_FILE_MIN_BLANK_LENGTH = 8
_BLANK = struct.Struct(">iI")
_FIRST_RECORD = struct.Struct(">iI")
_LONG = struct.Struct(">q")
# A put's results built as plain tuples: a NamedTuple's own constructor costs 3x as much.
_new_tuple = tuple.__new__
_PUT_OK = PutMessageStatus.PUT_OK
_APPEND_OK = AppendMessageStatus.PUT_OK
_TRANSACTION_MASK = 0xC
_DELAY = MessageConst.DELAY_TIME_LEVEL
_PROPS_LEN_PACK = PROPS_LEN.pack
# Sys flag bits that send a message off the encoder's common path: unknown bits (refused by
# _check), and in a batch also the transaction bits (batches may not be transactional).
_UNKNOWN_BITS = ~MessageSysFlag.KNOWN_MASK
_REFUSED_IN_BATCH = ~MessageSysFlag.KNOWN_MASK | _TRANSACTION_MASK
_MAX_PROPERTIES_LEN = 0x7FFF  # the record's properties length is a signed short
_TOPIC_LEN = tuple(bytes([n]) for n in range(256))
# (size, body CRC, born ip, born port, body, topic with its length byte, properties length, properties)
_Parts = tuple[int, int, bytes, int, bytes, bytes, bytes, bytes]

_MAX_BORN_HOSTS = 65_536


_FutureToken = tuple[Future[PutMessageResult], PutMessageResult]


def _complete_futures(acks: list[tuple[_FutureToken, PutMessageStatus]]) -> None:
    """put_message_async's sink: a release's futures completed in one pass."""
    for (future, result), status in acks:
        future.set_result(result if status is PutMessageStatus.PUT_OK
                          else PutMessageResult(status, result.append_result))


def _bad_delay(msg: MessageExtBrokerInner) -> PutMessageResult | None:
    """A DELAY property that is not a number is refused (it would fail the rewrite)."""
    raw = msg.properties.get(_DELAY)
    if raw:
        try:
            int(raw)
        except ValueError:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"bad DELAY property {raw!r}")
    return None


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
        self._valid_topics: set[str] = set()
        self._topic_parts: dict[str, bytes] = {}
        self._born_hosts: dict[str, tuple[bytes, int]] = {}  # "ip:port" -> encoded, for every put
        # The compiled record packer (lakemq/store/_native.pyx) shares these tables.
        self._encoder = RecordEncoder(
            self._valid_topics, self._topic_parts, self._born_hosts, config.max_message_size,
            min(config.max_properties_size, _MAX_PROPERTIES_LEN), self.file_size - END_FILE_MIN_BLANK_LENGTH,
            properties_to_string)
        self.flush_service: FlushCommitLogService
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.flush_service = GroupCommitService(self.mapped_file_queue, config.sync_flush_timeout, checkpoint)
        else:
            self.flush_service = FlushRealTimeService(
                self.mapped_file_queue, config.flush_interval_commit_log,
                config.flush_commit_log_least_pages, config.flush_commit_log_thorough_interval, checkpoint,
            )
        # ASYNC_FLUSH acknowledges every put at once: the put path skips asking the flusher.
        self._acks_at_once = isinstance(self.flush_service, FlushRealTimeService)
        self._warm_service = (WarmMappedFileService(self.mapped_file_queue, config.warm_mapped_file_ahead)
                              if config.warm_mapped_file_ahead > 0 else None)
        self._running = False

    # -- life cycle --------------------------------------------------------------------------

    def load(self) -> bool:
        return self.mapped_file_queue.load()

    def start(self) -> None:
        self.mapped_file_queue.prepare_appends()
        self.flush_service.start()
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

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Append one message; under SYNC_FLUSH block until it is on disk (or timed out)."""
        return self._flushed(self._append_message(msg), self._acks_at_once or msg.wait_store_msg_ok)

    def _flushed(self, result: PutMessageResult, wait: bool) -> PutMessageResult:
        """``result`` once the flush lets it be acknowledged (SYNC_FLUSH blocks here)."""
        ar = result.append_result
        if ar is None or self._acks_at_once:
            return result
        status = self.flush_service.on_put(ar.next_offset, wait)
        return result if status is PutMessageStatus.PUT_OK else PutMessageResult(status, ar)

    def put_message_async(self, msg: MessageExtBrokerInner) -> Future[PutMessageResult]:
        """Append one message now; the future completes when it may be acknowledged (under
        SYNC_FLUSH: once flushed, on the group-commit thread). No thread parks per put."""
        return self._complete_async(self._append_message(msg), msg.wait_store_msg_ok)

    def put_messages_async(self, msgs: Sequence[MessageExtBrokerInner]) -> Future[PutMessageResult]:
        return self._complete_async(self._append_messages(msgs), all(m.wait_store_msg_ok for m in msgs))

    def put_message_acked(self, msg: MessageExtBrokerInner, sink: AckSink,
                          token: object) -> tuple[PutMessageResult, bool]:
        """Append one message now. Returns (result, pending): if pending, the put waits for
        the group commit and ``sink`` receives ``(token, status)`` on the group-commit thread
        (or a flush watch's owner), in one list with every other put of that sink the same
        release covered (status PUT_OK or FLUSH_DISK_TIMEOUT); otherwise ``result`` is
        already final."""
        return self._ack_later(self._append_message(msg), msg.wait_store_msg_ok, sink, token)

    def put_messages_acked(self, msgs: Sequence[MessageExtBrokerInner], sink: AckSink,
                           token: object) -> tuple[PutMessageResult, bool]:
        wait = all(m.wait_store_msg_ok for m in msgs)
        return self._ack_later(self._append_messages(msgs), wait, sink, token)

    def _ack_later(self, result: PutMessageResult, wait: bool, sink: AckSink,
                   token: object) -> tuple[PutMessageResult, bool]:
        ar = result.append_result
        if ar is None or self._acks_at_once:
            return result, False
        status = self.flush_service.on_put_acked(ar.next_offset, wait, sink, token)
        if status is None:
            return result, True
        return (result if status is PutMessageStatus.PUT_OK else PutMessageResult(status, ar)), False

    def _complete_async(self, result: PutMessageResult, wait: bool) -> Future[PutMessageResult]:
        future: Future[PutMessageResult] = Future()
        final, pending = self._ack_later(result, wait, _complete_futures, (future, result))
        if not pending:
            future.set_result(final)
        return future

    def _append_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        if not self._running or msg.topic not in self._valid_topics or msg.sys_flag & ~MessageSysFlag.KNOWN_MASK:
            refused = self._check(msg)
            if refused is not None:
                return refused
        if _DELAY in msg.properties:
            # A refused message is left as it came: the checks go before the rewrite.
            checked = _bad_delay(msg) or self._encode(msg)
            if isinstance(checked, PutMessageResult):
                return checked
            rewrite_delayed_message(msg, self.delay_levels)
        try:
            records = self._encoder.gather((msg,), self._encode, _UNKNOWN_BITS, False)
        except OverflowError as exc:  # a field outside its int32/int64 slot: nothing written
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"field out of range: {exc}")
        if not isinstance(records, Records):
            return records
        return self._append_records(records)

    def _append_records(self, records: Records) -> PutMessageResult:
        """Records checked and measured: into the current file (rolled if they do not fit)."""
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
        return _new_tuple(PutMessageResult, (_PUT_OK, _new_tuple(AppendMessageResult, (
            _APPEND_OK, offset, size, records.msg_ids(self._msg_id_prefix, offset), now,
            records.first_queue_offset, records.count)), ""))

    def put_messages(self, msgs: Sequence[MessageExtBrokerInner]) -> PutMessageResult:
        """Append a batch contiguously in one file, with consecutive queue offsets per queue,
        then flush as put_message. Batches may not be delayed or transactional (as RocketMQ)."""
        result = self._append_messages(msgs)
        # With acks at once the wait flag is not read: skip walking the batch for it.
        return self._flushed(result, self._acks_at_once or all(m.wait_store_msg_ok for m in msgs))

    def _append_messages(self, msgs: Sequence[MessageExtBrokerInner]) -> PutMessageResult:
        """Every message checked and measured (the compiled encoder), then the whole batch
        appended as one run of records, in one file (_append_records)."""
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="empty batch")
        if not self._running:
            return self._not_writable()
        try:
            records = self._encoder.gather(msgs, self._encode_batch_member, _REFUSED_IN_BATCH, True)
        except OverflowError as exc:  # a field outside its int32/int64 slot: nothing written
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"field out of range: {exc}")
        if not isinstance(records, Records):
            return records
        if records.total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"batch of {records.total} bytes exceeds a CommitLog file")
        return self._append_records(records)

    def put_plain_message(self, topic: str, queue_id: int, body: bytes, properties: str, flag: int, sys_flag: int,
                          born_timestamp: int, born_host: str, reconsume_times: int, properties_suffix: bytes,
                          sink: AckSink | None = None, token: object = None) -> tuple[PutMessageResult, bool] | None:
        """Append one message from the parts a send request carries, ``properties_suffix``
        appended to its properties, without a message object (RecordEncoder.gather_one).
        Returns (result, pending) as put_message_acked with a ``sink``; without one the flush
        is awaited as put_message and pending is False. None when the message is off that
        path (see gather_batch): the caller then builds it and puts it, which handles it exactly."""
        if not self._running:
            return None
        try:
            records = self._encoder.gather_one(body, properties, topic, queue_id, flag, sys_flag, born_timestamp,
                                               born_host, reconsume_times, properties_suffix, _REFUSED_IN_BATCH)
        except OverflowError:  # a field outside its slot: the object path refuses it with the reason
            return None
        return None if records is None else self._put_records(records, sink, token)

    def put_message_batch(self, batch: MessageExtBatch, sink: AckSink | None = None,
                          token: object = None) -> tuple[PutMessageResult, bool] | None:
        """Append a batch straight from its wire encoding (RecordEncoder.gather_batch) and
        set its ``body_bytes``; acknowledged and None as put_plain_message."""
        if batch.sys_flag & _REFUSED_IN_BATCH or not self._running:
            return None
        try:
            records = self._encoder.gather_batch(
                batch.body, batch.topic, batch.queue_id, batch.sys_flag, batch.born_timestamp, batch.born_host,
                batch.reconsume_times, batch.properties_suffix.encode())
        except OverflowError:  # as in put_plain_message
            return None
        if records is None or records.total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return None
        batch.body_bytes = records.body_bytes
        return self._put_records(records, sink, token)

    def _put_records(self, records: Records, sink: AckSink | None,
                     token: object) -> tuple[PutMessageResult, bool]:
        result = self._append_records(records)
        if sink is None:
            return self._flushed(result, True), False
        return self._ack_later(result, True, sink, token)

    def _encode_batch_member(self, msg: MessageExtBrokerInner) -> _Parts | PutMessageResult:
        refused = self._check_batch_member(msg)
        return refused if refused is not None else self._encode(msg)

    def _check_batch_member(self, msg: MessageExtBrokerInner) -> PutMessageResult | None:
        """_check, and batches may not hold delayed or transactional messages (as RocketMQ)."""
        refused = self._check(msg)
        if refused is not None:
            return refused
        bad_delay = _bad_delay(msg)
        if bad_delay is not None:
            return bad_delay
        if msg.sys_flag & _TRANSACTION_MASK or msg.delay_time_level > 0:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark="batch messages cannot be delayed or transactional")
        return None

    def _not_writable(self) -> PutMessageResult:
        if not self._running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store is shutting down")
        # The OS's reason (e.g. no space left on device) tells the operator what to fix.
        return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED,
                                remark=f"cannot create a CommitLog file: {self._create_failure}")

    def _check(self, msg: MessageExtBrokerInner) -> PutMessageResult | None:
        """The checks a known topic with known sys flag bits skips (the put path only calls
        this for a new topic or unknown bits; _encode checks the sizes and the queue id)."""
        if not self._running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store is not running")
        topic = msg.topic
        if topic not in self._valid_topics:
            if not is_valid_name(topic):
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"invalid topic {topic!r}")
            if len(self._valid_topics) > 100_000:
                self._valid_topics.clear()
                self._topic_parts.clear()
            self._valid_topics.add(topic)
        unknown = MessageSysFlag.unknown_bits(msg.sys_flag)
        if unknown & MessageSysFlag.COMPRESSION_TYPE_MASK:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"body compression type {unknown >> 8} (sys flag 0x{msg.sys_flag:x}) is "
                                    "not supported by lakemq: only zlib (rocketmq.message.compressType=ZLIB)")
        if unknown:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"unknown sys flag bits 0x{msg.sys_flag:x}")
        return None

    def _encode(self, msg: MessageExtBrokerInner) -> _Parts | PutMessageResult:
        """A record's pieces but its fixed part: size, body CRC, born host, body, topic (with
        its length byte), properties length and properties."""
        if not self._running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store is not running")
        body = msg.body
        body_len = len(body)
        if body_len > self.config.max_message_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"body of {body_len} bytes exceeds {self.config.max_message_size}")
        queue_id = msg.queue_id
        if not 0 <= queue_id < 1 << 31:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"bad queue id {queue_id}")
        properties = (msg.properties_string or properties_to_string(msg.properties)).encode()
        props_len = len(properties)
        if props_len > self.config.max_properties_size or props_len > _MAX_PROPERTIES_LEN:
            return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                    remark=f"properties of {props_len} bytes exceed {self.config.max_properties_size}")
        born = self._born_hosts.get(msg.born_host)
        if born is None:
            try:
                born = encode_host(msg.born_host)
            except (OSError, ValueError):
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                        remark=f"born host {msg.born_host!r} is not an IPv4 ip:port")
            if len(self._born_hosts) > _MAX_BORN_HOSTS:
                self._born_hosts.clear()
            self._born_hosts[msg.born_host] = born
        topic_part = self._topic_parts.get(msg.topic)
        if topic_part is None:
            topic_bytes = msg.topic.encode()
            topic_part = self._topic_parts[msg.topic] = _TOPIC_LEN[len(topic_bytes)] + topic_bytes
        size = RECORD_FIXED_SIZE - 1 + body_len + len(topic_part) + props_len
        if size + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"record of {size} bytes exceeds a CommitLog file")
        return (size, crc32(body) & 0x7FFFFFFF, born[0], born[1], body, topic_part,
                _PROPS_LEN_PACK(props_len), properties)

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

    def open_flush_watch(self, sink: AckSink) -> FlushWatch | None:
        """Under SYNC_FLUSH a FlushWatch, for an event loop that acknowledges its own puts
        made with ``sink`` (GroupCommitService.open_watch); None under ASYNC_FLUSH."""
        service = self.flush_service
        return service.open_watch(sink) if isinstance(service, GroupCommitService) else None

    def roll_next_file(self, offset: int) -> int:
        return self.mapped_file_queue.roll_next_file(offset)

    def get_data(self, offset: int, return_first_on_not_found: bool = False) -> memoryview | None:
        """The written bytes from ``offset`` to the end of its file (zero copy)."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, return_first_on_not_found)
        if mf is None:
            return None
        return mf.select(offset - mf.file_from_offset)

    def get_message(self, offset: int, size: int) -> bytes | None:
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

    # -- recovery ----------------------------------------------------------------------------

    def recover_normally(self) -> int:
        """After a clean shutdown: walk the last three files, stop at the first bad record and
        cut there. Returns the recovered end (the CommitLog max offset)."""
        files = self.mapped_file_queue.mapped_files
        check_crc = self.config.check_crc_on_recover

        def scan(mf: MappedFile, pos: int) -> tuple[int, bool]:
            return scan_valid_end(mf.raw_view(), pos, mf.file_from_offset, check_crc=check_crc)

        return self._recover_from(max(0, len(files) - 3), scan)

    def recover_abnormally(self, min_timestamp: int, dispatch: Callable[[DispatchRequest], None]) -> int:
        """After a crash: replay from the last file whose first record was stored at or before
        ``min_timestamp`` (the checkpoint's), handing every good record to ``dispatch`` so the
        ConsumeQueues and IndexFile are rebuilt; cut after the last good record."""
        files = self.mapped_file_queue.mapped_files
        index = len(files) - 1
        while index > 0 and not self._is_recover_start(files[index], min_timestamp):
            index -= 1
        check_crc = self.config.check_crc_on_recover
        levels = self.delay_levels

        def scan(mf: MappedFile, pos: int) -> tuple[int, bool]:
            for req in iter_dispatch_requests(mf.raw_view(), pos, mf.file_from_offset,
                                              check_crc=check_crc, delay_levels=levels):
                if req.msg_size > 0:
                    dispatch(req)
                    pos += req.msg_size
                else:
                    return pos, req.msg_size == 0
            raise AssertionError("iter_dispatch_requests ends with a blank or bad record")

        return self._recover_from(max(index, 0), scan)

    @staticmethod
    def _is_recover_start(mf: MappedFile, min_timestamp: int) -> bool:
        view = mf.raw_view()
        _, magic = _FIRST_RECORD.unpack_from(view, 0)
        if magic != MESSAGE_MAGIC_CODE:
            return False
        store_timestamp: int = _LONG.unpack_from(view, STORE_TIMESTAMP_POS)[0]
        return 0 < store_timestamp <= min_timestamp

    def _set_aside_good_files(self, later: list[MappedFile], process_offset: int) -> None:
        """Files after the recovered end that start with a good record mean damage in the
        middle of the log, not a torn tail. They leave the log (it must be contiguous) but are
        moved to ``commitlog.cut/{offset}/`` instead of deleted: nothing that reached the disk
        is destroyed by recovery."""
        good = []
        for mf in later:
            with mf.raw_view() as view:
                if check_record(view, 0, check_crc=True, physical_offset=mf.file_from_offset) > 0:
                    good.append(mf)
        if good:
            directory = self.config.root_dir / "commitlog.cut" / f"{process_offset:020d}"
            log.error("CommitLog damaged at offset %d with %d good file(s) after it: moved to %s",
                      process_offset, len(good), directory)
            self.mapped_file_queue.set_aside(good, directory)

    def _recover_from(self, index: int, scan: Callable[[MappedFile, int], tuple[int, bool]]) -> int:
        queue = self.mapped_file_queue
        files = queue.mapped_files
        if not files:
            queue.flushed_where = 0
            return 0
        while True:
            mf = files[index]
            end, sealed = scan(mf, 0)
            if sealed and index + 1 < len(files):
                index += 1
                continue
            process_offset = mf.file_from_offset + end
            break
        self._set_aside_good_files(files[index + 1 :], process_offset)
        log.info("CommitLog recovered to offset %d", process_offset)
        queue.set_positions(process_offset)
        queue.truncate_dirty_files(process_offset)
        return process_offset
