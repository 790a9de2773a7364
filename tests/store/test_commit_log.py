from __future__ import annotations

from collections.abc import Callable

from lakemq.common.message import MessageConst, MessageSysFlag
from lakemq.common.record import decode_message_id, decode_record, iter_records
from lakemq.store.commit_log import CommitLog
from lakemq.store.delay_levels import SCHEDULE_TOPIC
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus
from tests.store.store_helpers import make_message

Open = Callable[..., CommitLog]


def _start(open_commit_log: Open, **config: object) -> CommitLog:
    cl = open_commit_log(**config)
    cl.recover_normally()
    cl.start()
    return cl


def test_put_and_read_back(open_commit_log: Open) -> None:
    cl = _start(open_commit_log)
    r1 = cl.put(MessagesPut.of(make_message(body=b"first", TAGS="tagA", KEYS="k1")))
    r2 = cl.put(MessagesPut.of(make_message(body=b"second")))
    r3 = cl.put(MessagesPut.of(make_message(body=b"other queue", queue_id=1)))
    assert r1.status is PutMessageStatus.PUT_OK and r1.is_ok
    a1, a2, a3 = r1.append_result, r2.append_result, r3.append_result
    assert a1 and a2 and a3
    assert (a1.wrote_offset, a1.logics_offset) == (0, 0)
    assert (a2.wrote_offset, a2.logics_offset) == (a1.wrote_bytes, 1)
    assert a3.logics_offset == 0
    assert cl.get_max_offset() == a3.next_offset and cl.get_min_offset() == 0
    assert decode_message_id(a2.msg_id) == ("10.1.2.3:10911", a2.wrote_offset)
    raw = cl.get_message(a1.wrote_offset, a1.wrote_bytes)
    assert raw is not None
    assert cl.get_message(a1.wrote_offset, 0) is None  # a zeroed ConsumeQueue entry reads as no message
    msg = decode_record(raw, check_crc=True)
    assert (msg.topic, msg.body, msg.tags, msg.keys) == ("TopicTest", b"first", "tagA", ["k1"])
    assert msg.born_host == "192.168.0.7:54321" and msg.store_host == "10.1.2.3:10911"
    assert msg.store_timestamp == a1.store_timestamp and msg.commit_log_offset == 0
    data = cl.get_data(0)
    assert data is not None
    assert [m.body for m in iter_records(data.tobytes(), check_crc=True)] == [b"first", b"second", b"other queue"]
    assert cl.get_queue_offset("TopicTest", 0) == 2


def test_end_of_file_blank_and_roll(open_commit_log: Open) -> None:
    cl = _start(open_commit_log, mapped_file_size_commit_log=4096, max_message_size=2048)
    offsets = [cl.put(MessagesPut.of(make_message(body=b"x" * 1000))).append_result for _ in range(5)]
    assert all(o is not None for o in offsets)
    wrote = [o.wrote_offset for o in offsets if o]
    assert wrote[3] == 4096 and wrote[4] == 4096 + offsets[0].wrote_bytes  # type: ignore[union-attr]
    files = cl.mapped_file_queue.mapped_files
    assert [f.path.name for f in files] == [f"{0:020d}", f"{4096:020d}"]
    blank_at = wrote[2] + offsets[2].wrote_bytes  # type: ignore[union-attr]
    tail = cl.get_data(blank_at)
    assert tail is not None and int.from_bytes(tail[:4], "big") == 4096 - blank_at
    assert int.from_bytes(tail[4:8], "big") == 0xCBD43194
    assert [a.logics_offset for a in offsets if a] == [0, 1, 2, 3, 4]
    assert cl.roll_next_file(100) == 4096


def test_refusals_are_clear_and_store_nothing(open_commit_log: Open) -> None:
    cl = _start(open_commit_log, max_message_size=1000)
    cases = {
        PutMessageStatus.MESSAGE_ILLEGAL: [
            make_message(body=b"x" * 1001),
            make_message(topic="bad/topic"),
            make_message(topic=""),
        ],
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: [make_message(big="v" * 33000)],
    }
    for status, msgs in cases.items():
        for msg in msgs:
            result = cl.put(MessagesPut.of(msg))
            assert result.status is status and not result.is_ok and result.remark
    flagged = make_message()
    flagged.sys_flag = MessageSysFlag.BORNHOST_V6_FLAG
    assert cl.put(MessagesPut.of(flagged)).status is PutMessageStatus.MESSAGE_ILLEGAL
    v6 = make_message()
    v6.born_host = "[::1]:5000"
    assert cl.put(MessagesPut.of(v6)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert cl.put(MessagesPut.of(make_message(), v6)).status is PutMessageStatus.MESSAGE_ILLEGAL
    huge_flag = make_message()
    huge_flag.flag = 1 << 40
    assert cl.put(MessagesPut.of(huge_flag)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert cl.get_max_offset() == 0


def test_compression_types_are_stored_as_sent_unknown_ones_refused(open_commit_log: Open) -> None:
    # The Java client 4.9.8 names the body's compression in bits 8-10: LZ4 0x101, ZSTD 0x201,
    # zlib 0x301. All are stored as they came; a type past zlib names nothing and is refused.
    cl = _start(open_commit_log)
    end = 0
    for sys_flag in (0x101, 0x201, 0x301):
        named = make_message(body=b"compressed")
        named.sys_flag = sys_flag
        stored = cl.put(MessagesPut.of(named))
        assert stored.is_ok and stored.append_result is not None
        raw = cl.get_message(stored.append_result.wrote_offset, stored.append_result.wrote_bytes)
        assert raw is not None and decode_record(raw).sys_flag == sys_flag
        end = stored.append_result.next_offset
    unknown = make_message()
    unknown.sys_flag = MessageSysFlag.COMPRESSED_FLAG | 0x400
    refused = cl.put(MessagesPut.of(unknown))
    assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL and "unknown" in (refused.remark or "")
    assert cl.get_max_offset() == end


def test_not_running_refuses(open_commit_log: Open) -> None:
    cl = open_commit_log()
    assert cl.put(MessagesPut.of(make_message())).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_delayed_message_is_rewritten(open_commit_log: Open) -> None:
    cl = _start(open_commit_log)
    result = cl.put(MessagesPut.of(make_message(topic="orders", queue_id=5, **{MessageConst.DELAY_TIME_LEVEL: "40"})))
    assert result.append_result is not None
    raw = cl.get_message(result.append_result.wrote_offset, result.append_result.wrote_bytes)
    msg = decode_record(raw or b"")
    assert (msg.topic, msg.queue_id) == (SCHEDULE_TOPIC, 17)
    assert msg.properties[MessageConst.REAL_TOPIC] == "orders"
    assert msg.properties[MessageConst.REAL_QUEUE_ID] == "5"
    assert msg.properties[MessageConst.DELAY_TIME_LEVEL] == "18"


def test_prepared_messages_take_no_queue_offset(open_commit_log: Open) -> None:
    cl = _start(open_commit_log)
    half = make_message()
    half.sys_flag = MessageSysFlag.TRANSACTION_PREPARED_TYPE
    assert cl.put(MessagesPut.of(half)).append_result.logics_offset == 0  # type: ignore[union-attr]
    assert cl.put(MessagesPut.of(make_message())).append_result.logics_offset == 0  # type: ignore[union-attr]
    assert cl.get_queue_offset("TopicTest", 0) == 1


def test_batch_append(open_commit_log: Open) -> None:
    cl = _start(open_commit_log)
    cl.put(MessagesPut.of(make_message(queue_id=2)))
    batch = [make_message(body=f"m{i}".encode(), queue_id=2) for i in range(10)]
    result = cl.put(MessagesPut.of(*batch))
    ar = result.append_result
    assert result.is_ok and ar is not None
    assert (ar.msg_num, ar.logics_offset) == (10, 1)
    ids = ar.msg_id.split(",")
    assert len(ids) == 10
    data = cl.get_message(ar.wrote_offset, ar.wrote_bytes)
    msgs = list(iter_records(data or b"", check_crc=True))
    assert [m.body for m in msgs] == [f"m{i}".encode() for i in range(10)]
    assert [m.queue_offset for m in msgs] == list(range(1, 11))
    assert [m.msg_id for m in msgs] == ids
    assert len({m.store_timestamp for m in msgs}) == 1
    delayed = make_message(**{MessageConst.DELAY_TIME_LEVEL: "1"})
    assert cl.put(MessagesPut.of(make_message(), delayed)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert cl.put(MessagesPut.of()).status is PutMessageStatus.MESSAGE_ILLEGAL


def test_batch_rolls_whole_to_next_file(open_commit_log: Open) -> None:
    cl = _start(open_commit_log, mapped_file_size_commit_log=4096, max_message_size=3500)
    assert cl.put(MessagesPut.of(make_message(body=b"x" * 3000))).is_ok
    result = cl.put(MessagesPut.of(*[make_message(body=b"y" * 500) for _ in range(3)]))
    assert result.append_result is not None and result.append_result.wrote_offset == 4096
    too_big = cl.put(MessagesPut.of(*[make_message(body=b"z" * 2000) for _ in range(3)]))
    assert too_big.status is PutMessageStatus.MESSAGE_ILLEGAL


def test_recover_normally_after_clean_shutdown(open_commit_log: Open) -> None:
    cl = _start(open_commit_log, mapped_file_size_commit_log=4096, max_message_size=2048)
    for i in range(20):
        cl.put(MessagesPut.of(make_message(body=bytes([i]) * 700)))
    end = cl.get_max_offset()
    cl.shutdown()
    cl2 = open_commit_log(mapped_file_size_commit_log=4096, max_message_size=2048)
    assert cl2.recover_normally() == end
    assert cl2.get_max_offset() == end and cl2.flushed_where == end
    cl2.start()
    after = cl2.put(MessagesPut.of(make_message(body=b"after")))
    assert after.append_result is not None and after.append_result.wrote_offset >= end
