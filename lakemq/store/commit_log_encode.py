"""PutEncoder: what the CommitLog appends, made from a put (lakemq.store.put_request).

The compiled encoder (:mod:`lakemq.store._records`, docs/NATIVE.md) checks and measures the
common case: a plain send's parts or a wire batch (``None`` for anything off its path, which
the CommitLog then puts as message objects) and message objects of a known topic and born
host. The rest is checked and measured here, one message at a time, and a message that
cannot be stored is refused with the reason (a PutMessageResult) before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lakemq.common.message import MessageConst, MessageExtBrokerInner, MessageSysFlag, properties_to_string
from lakemq.common.record import PROPS_LEN, RECORD_FIXED_SIZE, crc32, encode_host
from lakemq.common.validation import is_valid_name
from lakemq.store._records import RecordEncoder, Records
from lakemq.store.config import StoreConfig
from lakemq.store.delay_levels import DelayLevels, rewrite_delayed_message
from lakemq.store.put_request import BatchPut, PlainPut
from lakemq.store.results import PutMessageResult, PutMessageStatus
from lakemq.store.timer_message import is_timer_request, rewrite_timer_message

__all__ = ["END_FILE_MIN_BLANK_LENGTH", "PutEncoder"]

# A CommitLog file keeps room for the blank record (size and magic code) that seals it.
END_FILE_MIN_BLANK_LENGTH = 8
_TRANSACTION_MASK = MessageSysFlag.TRANSACTION_MASK
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


def _bad_delay(msg: MessageExtBrokerInner) -> PutMessageResult | None:
    """A DELAY property that is not a number is refused (it would fail the rewrite)."""
    raw = msg.properties.get(_DELAY)
    if raw:
        try:
            int(raw)
        except ValueError:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"bad DELAY property {raw!r}")
    return None


def _unencodable(exc: OverflowError | UnicodeEncodeError) -> PutMessageResult:
    """The refusal of a message the encoder could not write (nothing was written)."""
    if isinstance(exc, OverflowError):  # a field outside its int32/int64 slot
        return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"field out of range: {exc}")
    # text that is not UTF-8 (a lone surrogate)
    return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"not UTF-8: {exc}")


class PutEncoder:
    """Records for one CommitLog of ``file_size`` bytes per file; the CommitLog asks only
    while it runs."""

    def __init__(self, config: StoreConfig, file_size: int, delay_levels: DelayLevels) -> None:
        self._config = config
        self._file_size = file_size
        self._delay_levels = delay_levels
        self._valid_topics: set[str] = set()
        self._topic_parts: dict[str, bytes] = {}
        self._born_hosts: dict[str, tuple[bytes, int]] = {}  # "ip:port" -> encoded, for every put
        # The compiled record packer (lakemq/store/_records.pyx) shares these tables.
        self._encoder = RecordEncoder(
            self._valid_topics, self._topic_parts, self._born_hosts, config.max_message_size,
            min(config.max_properties_size, _MAX_PROPERTIES_LEN), file_size - END_FILE_MIN_BLANK_LENGTH,
            properties_to_string)

    def plain(self, put: PlainPut) -> Records | None:
        """RecordEncoder.gather_one: None for anything off its path (see there)."""
        try:
            return self._encoder.gather_one(put.body, put.properties, put.topic, put.queue_id, put.flag,
                                            put.sys_flag, put.born_timestamp, put.born_host, put.reconsume_times,
                                            put.properties_suffix, _REFUSED_IN_BATCH)
        except OverflowError:  # a field outside its slot: the object path refuses it with the reason
            return None

    def batch(self, batch: BatchPut) -> Records | None:
        """RecordEncoder.gather_batch: None for anything off its path (see there)."""
        if batch.sys_flag & _REFUSED_IN_BATCH:
            return None
        try:
            records = self._encoder.gather_batch(
                batch.body, batch.topic, batch.queue_id, batch.sys_flag, batch.born_timestamp, batch.born_host,
                batch.reconsume_times, batch.properties_suffix)
        except OverflowError:  # as in plain
            return None
        if records is None or records.total + END_FILE_MIN_BLANK_LENGTH > self._file_size:
            return None
        return records

    def message(self, msg: MessageExtBrokerInner) -> Records | PutMessageResult:
        """One message object's record; a delayed one is first rewritten to the schedule topic,
        a timer message to the timer topic (lakemq.store.timer_message)."""
        if msg.topic not in self._valid_topics or msg.sys_flag & _UNKNOWN_BITS:
            refused = self._check(msg)
            if refused is not None:
                return refused
        if _DELAY in msg.properties:
            # A refused message is left as it came: the checks go before the rewrite.
            checked = _bad_delay(msg) or self._encode(msg)
            if isinstance(checked, PutMessageResult):
                return checked
            if is_timer_request(msg):  # a DELAY level wins: the timer's properties go
                rewrite_timer_message(msg, enabled=True, max_delay_sec=0)
            rewrite_delayed_message(msg, self._delay_levels)
        elif is_timer_request(msg):
            checked = self._encode(msg)  # as above: checked before the rewrite
            if isinstance(checked, PutMessageResult):
                return checked
            refused = rewrite_timer_message(msg, enabled=self._config.timer_wheel_enable,
                                            max_delay_sec=self._config.timer_max_delay_sec)
            if refused is not None:
                return refused
        try:  # _gather's call, made here: one frame less on the hot path
            return self._encoder.gather((msg,), self._encode, _UNKNOWN_BITS, False)
        except (OverflowError, UnicodeEncodeError) as exc:
            return _unencodable(exc)

    def messages(self, msgs: Sequence[MessageExtBrokerInner]) -> Records | PutMessageResult:
        """A batch's records, to go in one file. Batches may not be delayed or transactional
        (as RocketMQ)."""
        records = self._gather(msgs, self._encode_batch_member, _REFUSED_IN_BATCH, True)
        if isinstance(records, Records) and records.total + END_FILE_MIN_BLANK_LENGTH > self._file_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"batch of {records.total} bytes exceeds a CommitLog file")
        return records

    def _gather(self, msgs: Sequence[MessageExtBrokerInner], slow: Callable[[MessageExtBrokerInner], Any],
                refused_bits: int, check_delay: bool) -> Records | PutMessageResult:
        """RecordEncoder.gather, with a field it cannot encode refused (nothing written)."""
        try:
            return self._encoder.gather(msgs, slow, refused_bits, check_delay)
        except (OverflowError, UnicodeEncodeError) as exc:
            return _unencodable(exc)

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

    def _check(self, msg: MessageExtBrokerInner) -> PutMessageResult | None:
        """The checks a known topic with known sys flag bits skips (the put path only calls
        this for a new topic or unknown bits; _encode checks the sizes and the queue id)."""
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
                                    "unknown: only ZLIB, LZ4 and ZSTD (rocketmq.message.compressType)")
        if unknown:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"unknown sys flag bits 0x{msg.sys_flag:x}")
        return None

    def _encode(self, msg: MessageExtBrokerInner) -> _Parts | PutMessageResult:
        """A record's pieces but its fixed part: size, body CRC, born host, body, topic (with
        its length byte), properties length and properties."""
        body = msg.body
        body_len = len(body)
        if body_len > self._config.max_message_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"body of {body_len} bytes exceeds {self._config.max_message_size}")
        queue_id = msg.queue_id
        if not 0 <= queue_id < 1 << 31:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=f"bad queue id {queue_id}")
        properties = (msg.properties_string or properties_to_string(msg.properties)).encode()
        props_len = len(properties)
        if props_len > self._config.max_properties_size or props_len > _MAX_PROPERTIES_LEN:
            return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                    remark=f"properties of {props_len} bytes exceed {self._config.max_properties_size}")
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
        if size + END_FILE_MIN_BLANK_LENGTH > self._file_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"record of {size} bytes exceeds a CommitLog file")
        return (size, crc32(body) & 0x7FFFFFFF, born[0], born[1], body, topic_part,
                _PROPS_LEN_PACK(props_len), properties)
