"""The put and dispatch fast paths (compiled: lakemq/store/_records.pyx, _scan, _cq_runs, _index) against independent
expectations: records the Python codec would build byte for byte, the DispatchRequests the
Python decoder reads back, Java's hashCode as the pure-Python one computes it, and
byte-identical ConsumeQueue and IndexFile files from batched and one-by-one dispatch (gaps,
replays and file rolls included)."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakemq.common.message import MessageConst, MessageSysFlag, string_to_properties, tags_hash_code
from lakemq.common.record import body_crc, check_record, crc32, decode_record, encode_host, encode_record
from lakemq.store import _append_lock, _cq_runs, _index, _records, _scan
from lakemq.store.commit_log import CommitLog
from lakemq.store.commit_log_scan import (
    DispatchRequest,
    iter_dispatch_requests,
    read_dispatch_requests,
    requests_of,
    scan_valid_end,
)
from lakemq.store.consume_queue_store import ConsumeQueueStore
from lakemq.store.delay_levels import SCHEDULE_TOPIC
from lakemq.store.dispatch import CommitLogDispatcher, ReputMessageService, gets_consume_queue_entry
from lakemq.store.index_file import index_key_hash
from lakemq.store.index_service import IndexService
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus
from tests.store.store_helpers import make_msg, small_config


@pytest.fixture
def commit_log(tmp_path: Path) -> Iterator[CommitLog]:
    cl = CommitLog(small_config(tmp_path / "store", mapped_file_size_commit_log=8192), store_host="10.0.0.9:10911")
    cl.load()
    cl.start()
    yield cl
    cl.shutdown()


def test_the_compiled_extension_is_in_use() -> None:
    """The store imports the compiled modules (no Python stand-in exists)."""
    for module in (_append_lock, _records, _scan, _cq_runs, _index):
        assert module.__file__ is not None and module.__file__.endswith(".so")
    from lakemq.store import (
        commit_log,
        commit_log_encode,
        consume_queue_store,
        dispatch,
        index_file,
        index_service,
    )
    assert vars(commit_log_encode)["RecordEncoder"] is _records.RecordEncoder
    assert vars(commit_log)["PutMessageSpinLock"] is _append_lock.PutMessageSpinLock
    assert vars(dispatch)["scan_records"] is _scan.scan_records
    assert vars(index_file)["put_index_keys"] is _index.put_index_keys
    assert vars(index_service)["index_keys"] is _index.index_keys
    assert vars(consume_queue_store)["consume_queue_runs"] is _cq_runs.consume_queue_runs


def _index_hash(key: str) -> int:
    h = tags_hash_code(key)  # the pure-Python String.hashCode over UTF-16 code units
    return 0 if h == -0x80000000 else abs(h)


def test_java_hash_matches_the_python_hash_code() -> None:
    keys = [f"Topic#{i:032X}" for i in range(300)]
    keys += ["polygenelubricants", "", "T#", "T#ключ", "T#\U0001f600emoji", "x" * 500, "T#a b"]
    keys += [chr(0xFFFF) * 7, "Aa", "BB"]  # "Aa" and "BB" collide in Java
    assert [_index.java_hash(k) for k in keys] == [tags_hash_code(k) for k in keys]
    assert [index_key_hash(k) for k in keys] == [_index_hash(k) for k in keys]
    assert _index.java_hash("polygenelubricants") == -0x80000000
    assert index_key_hash("polygenelubricants") == 0


@given(st.text(alphabet=st.characters(codec="utf-8")))  # any text a str can be encoded from
def test_java_hash_of_any_text(text: str) -> None:
    assert _index.java_hash(text) == tags_hash_code(text)


def test_body_crc_is_zlibs_crc32() -> None:
    """The record CRC (ISA-L's) is RocketMQ's: zlib's CRC-32 with the sign bit cleared."""
    rng = random.Random(7)
    for size in (0, 1, 15, 16, 17, 100, 1024, 4095, 65_537):
        body = rng.randbytes(size)
        assert body_crc(body) == zlib.crc32(body) & 0x7FFFFFFF
        assert crc32(memoryview(body)[1:]) == zlib.crc32(body[1:])


def _expected_record(cl: CommitLog, raw: bytes) -> bytes:
    """What encode_record builds for the message stored in ``raw`` (fields read back)."""
    m = decode_record(raw)
    return bytes(encode_record(
        topic=m.topic.encode(), queue_id=m.queue_id, body=m.body, flag=m.flag,
        properties=_props_bytes(raw), sys_flag=m.sys_flag, born_timestamp=m.born_timestamp,
        born_host=encode_host(m.born_host), store_host=encode_host(cl.store_host),
        reconsume_times=m.reconsume_times, prepared_transaction_offset=m.prepared_transaction_offset,
        queue_offset=m.queue_offset, physical_offset=m.commit_log_offset, store_timestamp=m.store_timestamp,
    ))


def _props_bytes(raw: bytes) -> bytes:
    body_len = int.from_bytes(raw[84:88], "big")
    topic_pos = 88 + body_len
    props_pos = topic_pos + 1 + raw[topic_pos]
    return raw[props_pos + 2 :]


def test_put_paths_write_exactly_what_the_codec_builds(commit_log: CommitLog) -> None:
    single = make_msg("TopicA", b"one", tags="t", keys="k1 k2", uniq="U1")
    single.flag, single.reconsume_times, single.prepared_transaction_offset = 7, 3, 99
    results = [commit_log.put(MessagesPut.of(single))]
    batch = [make_msg("TopicA", bytes([i]) * (i * 13), queue_id=i % 3, uniq=f"U{i}") for i in range(20)]
    results.append(commit_log.put(MessagesPut.of(*batch)))
    results.append(commit_log.put(MessagesPut.of(make_msg("Other", b"", sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE))))
    assert all(r.status is PutMessageStatus.PUT_OK for r in results)
    data = commit_log.get_data(0)
    assert data is not None
    requests = list(iter_dispatch_requests(data, 0, 0, check_crc=True))[:-1]
    assert len(requests) == 22
    for request in requests:
        raw = commit_log.get_message(request.commit_log_offset, request.msg_size)
        assert raw is not None and raw == _expected_record(commit_log, raw)
    assert [r.consume_queue_offset for r in requests[1:21]] == [1, 0, 0, 2, 1, 1, 3, 2, 2, 4, 3, 3, 5, 4, 4,
                                                                6, 5, 5, 7, 6]


def test_refused_field_in_a_batch_writes_nothing(commit_log: CommitLog) -> None:
    good = make_msg("TopicA", b"ok")
    bad = make_msg("TopicA", b"bad")
    bad.born_timestamp = 1 << 64  # outside the record's int64 slot: found only when packing
    assert commit_log.put(MessagesPut.of(*[good, bad])).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert commit_log.put(MessagesPut.of(bad)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert commit_log.get_max_offset() == 0 and commit_log.get_queue_offset("TopicA", 0) == 0
    assert commit_log.put(MessagesPut.of(*[good, good])).append_result.logics_offset == 0  # type: ignore[union-attr]


def _fill(cl: CommitLog) -> None:
    """Records that exercise every dispatch branch: several queues, tags, keys and unique
    keys, transactions, a delayed record, a queue that jumps ahead (a gap), file rolls."""
    for i in range(120):
        flag = (MessageSysFlag.TRANSACTION_PREPARED_TYPE if i % 17 == 5
                else MessageSysFlag.TRANSACTION_ROLLBACK_TYPE if i % 23 == 7 else 0)
        msg = make_msg(f"Topic{i % 2}", b"b" * (i * 11 % 300), queue_id=i % 3, tags=f"tag{i % 4}" if i % 5 else None,
                       keys=f"k{i} shared" if i % 3 else None, uniq=f"UNIQ{i:08d}" if i % 4 else None,
                       delay=1 if i == 40 else 0, sys_flag=flag)
        if i == 60:
            cl.set_topic_queue_table({**cl._topic_queue_table, ("Topic0", 0): 30})
        if i % 10 == 9:
            assert cl.put(MessagesPut.of(*[make_msg("Topic1", b"x" * 40, queue_id=2, uniq=f"B{i}-{j}") for j in range(8)])).is_ok
        else:
            assert cl.put(MessagesPut.of(msg)).is_ok


class OneByOne:
    """A dispatcher without dispatch_batch: the reput hands it records one at a time."""

    def __init__(self, inner: CommitLogDispatcher) -> None:
        self.inner = inner

    def dispatch(self, request: DispatchRequest) -> None:
        self.inner.dispatch(request)


def _build(cl: CommitLog, root: Path, wrap: Callable[[CommitLogDispatcher], CommitLogDispatcher]) -> list[bytes]:
    cqs = ConsumeQueueStore(root / "consumequeue", 10 * 20, cl.pickup_store_timestamp)
    index = IndexService(root / "index", hash_slot_num=8, index_num=40)
    index.load(True, 0)
    reput = ReputMessageService(cl, [wrap(cqs), wrap(index)], reput_from_offset=0, delay_levels=cl.delay_levels)
    assert reput.do_reput() > 0
    reput.reput_from_offset = 0
    reput.do_reput()  # a replay of everything: must change nothing
    cqs.flush()
    index.flush()
    files = sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file())
    cq_bytes = [str(p.relative_to(root)).encode() + p.read_bytes() for p in files]
    index_bytes = [p.read_bytes() for p in sorted((root / "index").iterdir())]
    cqs.shutdown()
    index.shutdown()
    assert len(index_bytes) > 3 and len(files) > 10
    return cq_bytes + index_bytes


def test_batched_dispatch_builds_the_same_files(commit_log: CommitLog, tmp_path: Path) -> None:
    _fill(commit_log)
    assert len(commit_log.mapped_file_queue.mapped_files) > 3
    assert _build(commit_log, tmp_path / "batched", lambda d: d) == _build(commit_log, tmp_path / "single", OneByOne)


def _decoded_requests(cl: CommitLog) -> list[DispatchRequest]:
    """What dispatch must see, read with the Python decoder (lakemq.common.record)."""
    out = []
    for mf in cl.mapped_file_queue.mapped_files:
        data, pos = bytes(mf.select(0)), 0
        while (size := check_record(data, pos, check_crc=True)) > 0:
            m = decode_record(data, pos)
            props = m.properties
            tags_code = tags_hash_code(props.get(MessageConst.TAGS))
            if m.topic == SCHEDULE_TOPIC and int(props.get(MessageConst.DELAY_TIME_LEVEL, "0")) > 0:
                level = int(props[MessageConst.DELAY_TIME_LEVEL])
                tags_code = cl.delay_levels.deliver_timestamp(level, m.store_timestamp)
            out.append(DispatchRequest(size, True, m.topic, m.queue_id, m.commit_log_offset, tags_code,
                                       m.store_timestamp, m.queue_offset, props.get(MessageConst.KEYS, ""),
                                       props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX), m.sys_flag,
                                       m.prepared_transaction_offset, m.born_timestamp, props))
            pos += size
    return out


def test_compiled_reader_matches_the_python_decoder(commit_log: CommitLog) -> None:
    _fill(commit_log)
    bulk: list[DispatchRequest] = []
    one_by_one: list[DispatchRequest] = []
    for mf in commit_log.mapped_file_queue.mapped_files:
        data, base = mf.select(0), mf.file_from_offset
        one_by_one.extend(r for r in iter_dispatch_requests(data, 0, base, check_crc=True,
                                                            delay_levels=commit_log.delay_levels) if r.msg_size > 0)
        pos, stop = 0, 1
        while stop == 1 and pos < len(data):
            batch = read_dispatch_requests(data, pos, base + pos, max_count=7,
                                           delay_levels=commit_log.delay_levels)
            pos, stop = batch.end_pos, batch.stop
            bulk.extend(requests_of(batch))
    expected = _decoded_requests(commit_log)
    assert len(bulk) > 150 and bulk == expected and one_by_one == expected
    assert any(r.topic == "SCHEDULE_TOPIC_XXXX" and r.tags_code > 10**12 for r in bulk)
    assert any(r.properties.get(MessageConst.TAGS) for r in bulk)
    # a damaged record stops the reader where the Python check stops
    written = commit_log.get_data(0)
    assert written is not None
    damaged = bytearray(written)
    damaged[bulk[5].commit_log_offset + 4] ^= 0xFF
    batch = read_dispatch_requests(damaged, 0, 0, max_count=1000)
    assert (len(batch), batch.end_pos, batch.stop) == (5, bulk[5].commit_log_offset, -1)
    # with the CRC checked, a flipped body bit is a bad record too
    damaged = bytearray(written)
    damaged[bulk[3].commit_log_offset + 88] ^= 0x01
    assert check_record(damaged, bulk[3].commit_log_offset, check_crc=True) == -1
    batch = read_dispatch_requests(damaged, 0, 0, max_count=1000, check_crc=True)
    assert (len(batch), batch.stop) == (3, -1)
    assert len(read_dispatch_requests(damaged, 0, 0, max_count=1000)) > 3  # unchecked: read on


def _reference_scan(buf: bytes, base: int, check_crc: bool) -> tuple[int, bool]:
    pos = 0
    while True:
        size = check_record(buf, pos, check_crc=check_crc, physical_offset=base + pos)
        if size <= 0:
            return pos, size == 0
        pos += size


def test_recovery_scan_stops_where_check_record_stops(commit_log: CommitLog) -> None:
    _fill(commit_log)
    mf = commit_log.mapped_file_queue.mapped_files[0]
    clean = bytes(mf.raw_view())
    assert scan_valid_end(clean, 0, 0, check_crc=True) == _reference_scan(clean, 0, True)
    assert scan_valid_end(clean, 0, 0, check_crc=True)[1]  # a sealed file ends in a blank record
    rng = random.Random(3)
    for _ in range(300):
        damaged = bytearray(clean)
        damaged[rng.randrange(0, mf.wrote_position)] ^= 1 << rng.randrange(8)
        for check_crc in (True, False):
            assert scan_valid_end(damaged, 0, 0, check_crc=check_crc) == _reference_scan(bytes(damaged), 0, check_crc)
    assert scan_valid_end(clean, 0, 4096, check_crc=False) == (0, False)  # records at other offsets: bad
    assert scan_valid_end(clean[:50], 0, 0, check_crc=False) == _reference_scan(clean[:50], 0, False)


def test_a_delay_that_is_not_a_number_is_refused(commit_log: CommitLog) -> None:
    """Found by the encoder fuzz test: DELAY ":" raised ValueError out of put_message."""
    msg = make_msg("TopicA", b"x")
    msg.properties[MessageConst.DELAY_TIME_LEVEL] = ":"
    for result in (commit_log.put(MessagesPut.of(msg)), commit_log.put(MessagesPut.of(*[msg]))):
        assert result.status is PutMessageStatus.MESSAGE_ILLEGAL and "DELAY" in result.remark
    assert msg.topic == "TopicA" and commit_log.get_max_offset() == 0


def test_refused_delayed_message_is_left_as_it_came(commit_log: CommitLog) -> None:
    too_big = make_msg("TopicA", b"x" * (commit_log.config.max_message_size + 1), delay=1)
    assert commit_log.put(MessagesPut.of(too_big)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert too_big.topic == "TopicA" and MessageConst.REAL_TOPIC not in too_big.properties
    commit_log.shutdown()
    stopped = make_msg("TopicA", b"x", delay=1)
    assert commit_log.put(MessagesPut.of(stopped)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert stopped.topic == "TopicA"


# -- fuzzing the compiled encoder and reader against the Python codec ------------------------

_key_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02 "), max_size=12)


@settings(deadline=None, max_examples=50)  # each example opens a CommitLog: slow on a busy machine
@given(st.lists(st.tuples(st.binary(max_size=300), st.integers(0, 5), st.integers(-(2**31), 2**31 - 1),
                          st.sampled_from([0, 1, 2, 3, 4, 8, 9, 12]), st.integers(-(2**63), 2**63 - 1),
                          st.integers(0, 2**31 - 1),
                          # any property but DELAY, which moves a message to the schedule topic
                          st.dictionaries(_key_text.filter(lambda k: k and k != MessageConst.DELAY_TIME_LEVEL),
                                          _key_text, max_size=4),
                          st.booleans()),
                min_size=1, max_size=12))
def test_encoder_writes_what_the_codec_builds(
        tmp_path_factory: pytest.TempPathFactory,
        fields: list[tuple[bytes, int, int, int, int, int, dict[str, str], bool]]) -> None:
    """Any field values (the int32/int64 extremes, non-ASCII properties, a bytearray body),
    one by one and in a batch: every record is what encode_record builds from the same fields."""
    root = tmp_path_factory.mktemp("enc")
    cl = CommitLog(small_config(root, mapped_file_size_commit_log=64 * 1024), store_host="10.0.0.9:10911")
    cl.load()
    cl.start()
    try:
        msgs = []
        for body, queue_id, flag, sys_flag, born_ts, reconsume, props, as_bytearray in fields:
            msg = make_msg(f"T{queue_id % 2}", bytes(body), queue_id=queue_id, sys_flag=sys_flag)
            msg.body = bytearray(body) if as_bytearray else body  # type: ignore[assignment]  # any buffer
            msg.flag, msg.born_timestamp, msg.reconsume_times = flag, born_ts, reconsume
            msg.prepared_transaction_offset = born_ts // 3
            msg.properties.update(props)
            msgs.append(msg)
        single = [cl.put(MessagesPut.of(m)) for m in msgs]
        assert all(r.is_ok for r in single), single
        plain = [m for m in msgs if not m.sys_flag & 0xC]
        if plain:
            assert cl.put(MessagesPut.of(*plain)).is_ok
        data = commit_log_bytes(cl)
        pos = 0
        for msg, result in zip(msgs + plain, single + [None] * len(plain)):
            size = check_record(data, pos, check_crc=True, physical_offset=pos)
            assert size > 0
            raw = bytes(data[pos : pos + size])
            m = decode_record(raw)
            assert raw == bytes(encode_record(
                topic=msg.topic.encode(), queue_id=msg.queue_id, body=bytes(msg.body), flag=msg.flag,
                properties=msg.encoded_properties(), sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
                born_host=encode_host(msg.born_host), store_host=encode_host(cl.store_host),
                reconsume_times=msg.reconsume_times,
                prepared_transaction_offset=msg.prepared_transaction_offset,
                queue_offset=m.queue_offset, physical_offset=pos, store_timestamp=m.store_timestamp))
            if result is not None:
                assert result.append_result is not None and result.append_result.wrote_offset == pos
                assert result.append_result.logics_offset == m.queue_offset
            pos += size
    finally:
        cl.shutdown()


def commit_log_bytes(cl: CommitLog) -> bytes:
    files = cl.mapped_file_queue.mapped_files
    assert len(files) == 1
    return bytes(files[0].select(0))


def _reference_request(raw: bytes, pos: int) -> tuple[DispatchRequest, list[str]]:
    """A record read with the Python decoder, and its IndexFile keys."""
    m = decode_record(raw, pos)
    props_raw = _props_bytes(raw[pos : pos + m.store_size])
    props = string_to_properties(props_raw.decode("utf-8", "replace"))
    uniq = props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    keys = [uniq] if uniq else []
    keys += [k for k in props.get(MessageConst.KEYS, "").split(" ") if k]
    request = DispatchRequest(m.store_size, True, m.topic, m.queue_id, m.commit_log_offset,
                              tags_hash_code(props.get(MessageConst.TAGS)), m.store_timestamp, m.queue_offset,
                              props.get(MessageConst.KEYS, ""), uniq,
                              m.sys_flag, m.prepared_transaction_offset, m.born_timestamp, props)
    return request, [f"{m.topic}#{k}" for k in keys]


_prop_value = st.one_of(_key_text, st.lists(_key_text, max_size=4).map(" ".join))


@settings(deadline=None, max_examples=50)  # each example builds an IndexFile
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "X"]), _prop_value),
                          st.booleans(), st.sampled_from([0, 4, 8, 12])), min_size=1, max_size=10))
def test_reader_reads_what_the_python_decoder_reads(
        tmp_path_factory: pytest.TempPathFactory, records: list[tuple[dict[str, str], bool, int]]) -> None:
    """Any properties (non-ASCII, duplicates, empty keys, bytes that are not UTF-8): the same
    DispatchRequests as the Python decoder, and every index key found again by a query."""
    buf = bytearray()
    for i, (props, mangle, sys_flag) in enumerate(records):
        text = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
        if i % 3 == 2:
            text += "TAGS\x01dup\x02"  # a later duplicate wins, as in a dict
        raw = text.encode()
        if mangle:
            raw += b"X\x01\xff\xc3(\xe2\x82\x02"  # invalid UTF-8: decoded with replacement characters
        buf += encode_record(topic="Topicé".encode(), queue_id=i % 3, body=b"b" * i, flag=0, properties=raw,
                             sys_flag=sys_flag, born_timestamp=1, born_host=encode_host("1.2.3.4:5"),
                             store_host=encode_host("1.2.3.4:6"), queue_offset=i, physical_offset=len(buf),
                             store_timestamp=1_700_000_000_000 + i)
    batch = read_dispatch_requests(buf, 0, 0, max_count=100, check_crc=True)
    assert (len(batch), batch.end_pos, batch.stop) == (len(records), len(buf), 1)
    expected, pos, keys = [], 0, []
    while pos < len(buf):
        request, record_keys = _reference_request(bytes(buf), pos)
        expected.append(request)
        if request.sys_flag & 0xC != 0xC:
            keys += [(k, request.commit_log_offset) for k in record_keys]
        pos += request.msg_size
    assert requests_of(batch) == expected
    # Long polling's view: the records that get a ConsumeQueue entry, without their properties.
    assert batch.arrivals() == [(r.topic, r.queue_id, r.consume_queue_offset + 1, r.tags_code, r.store_timestamp)
                                for r in expected if gets_consume_queue_entry(r.sys_flag)]
    index_keys = _index.index_keys(batch, -1)
    assert len(index_keys) == len(keys)
    root = tmp_path_factory.mktemp("idx")
    index = IndexService(root, hash_slot_num=7, index_num=200)
    index.load(True, 0)
    index.dispatch_batch(batch)
    for key, phy in keys:
        topic, _, name = key.partition("#")
        assert phy in index.query_offset(topic, name, 1000, 0, 2**62).phy_offsets
    index.destroy()
