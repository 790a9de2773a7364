import zlib

import pytest

from lakemq.client import Message, MessageQueue, Producer, select_by_hash
from lakemq.client.sender import RetryAction, _derived_route, classify_failure
from lakemq.common.codes import ResponseCode
from lakemq.common.message import MessageSysFlag
from lakemq.common.message_batch import decode_batch
from lakemq.errors import (
    FrameError,
    InvalidNameError,
    MessageIllegalError,
    RemotingConnectError,
    RemotingTimeoutError,
    for_code,
)
from lakemq.remoting.bodies import TopicRouteData


def test_prepare_sets_uniq_key_and_compresses_at_4k() -> None:
    p = Producer("g")
    small = Message("T", b"x" * 4095)
    prepared = p._prepare(small)
    assert prepared.sys_flag == 0 and prepared.body == small.body
    assert small.unique_key == prepared.uniq_id and len(prepared.uniq_id) == 32
    assert f"UNIQ_KEY\x01{prepared.uniq_id}\x02" in prepared.properties
    big = Message("T", b"abc" * 2000)
    prepared = p._prepare(big)
    assert prepared.sys_flag & MessageSysFlag.COMPRESSED_FLAG
    assert zlib.decompress(prepared.body) == big.body and len(prepared.body) < 100
    assert big.body == b"abc" * 2000  # the caller's message keeps its body
    again = p._prepare(big)
    assert again.uniq_id == prepared.uniq_id  # a re-send keeps its id


def test_prepare_refuses_bad_messages() -> None:
    p = Producer("g")
    with pytest.raises(MessageIllegalError):
        p._prepare(Message("T", b""))
    with pytest.raises(MessageIllegalError):
        p._prepare(Message("T", b"x" * (4 * 1024 * 1024 + 1)))
    with pytest.raises(MessageIllegalError):
        p._prepare(Message("TBW102", b"x"))
    with pytest.raises(InvalidNameError):
        p._prepare(Message("a/b", b"x"))
    with pytest.raises(InvalidNameError):
        Producer("bad group!")


def test_prepare_batch() -> None:
    p = Producer("g")
    msgs = [Message("T", f"m{i}".encode()) for i in range(3)]
    prepared = p._prepare_batch(msgs)
    assert prepared.batch and prepared.uniq_id == ",".join(m.unique_key or "" for m in msgs)
    assert [e.body for e in decode_batch(prepared.body)] == [b"m0", b"m1", b"m2"]
    with pytest.raises(MessageIllegalError):
        p._prepare_batch([Message("T", b"a"), Message("U", b"b")])
    delayed = Message("T", b"a")
    delayed.delay_time_level = 3
    with pytest.raises(MessageIllegalError):
        p._prepare_batch([delayed])
    with pytest.raises(MessageIllegalError):
        p._prepare_batch([])


def test_retry_classification() -> None:
    assert classify_failure(RemotingTimeoutError("t")) is RetryAction.RETRY
    assert classify_failure(RemotingConnectError("c")) is RetryAction.RETRY
    assert classify_failure(FrameError("bad")) is RetryAction.RAISE
    assert classify_failure(for_code(ResponseCode.SYSTEM_BUSY)) is RetryAction.BACKOFF
    assert classify_failure(for_code(ResponseCode.TOO_MANY_REQUESTS)) is RetryAction.BACKOFF
    for code in (ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SYSTEM_ERROR,
                 ResponseCode.NO_PERMISSION):
        assert classify_failure(for_code(code)) is RetryAction.RETRY
    assert classify_failure(for_code(ResponseCode.MESSAGE_ILLEGAL)) is RetryAction.RAISE
    assert classify_failure(ValueError()) is RetryAction.RAISE


def test_auto_create_route_borrows_tbw102_brokers() -> None:
    default = TopicRouteData.decode(
        b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:1"},"brokerName":"b","cluster":"c"}],'
        b'"queueDatas":[{"brokerName":"b","perm":7,"readQueueNums":8,"writeQueueNums":8,"topicSysFlag":0}]}')
    route = _derived_route(default, 4)
    assert route.queue_datas[0].write_queue_nums == 4 and route.broker_datas == default.broker_datas


def test_select_by_hash_is_stable() -> None:
    mqs = [MessageQueue("T", "b", i) for i in range(4)]
    m = Message("T", b"x")
    assert select_by_hash(mqs, m, "order-17") == select_by_hash(mqs, m, "order-17")
    assert select_by_hash(mqs, m, 5) == mqs[abs(hash_of("5")) % 4]
    assert {select_by_hash(mqs, m, f"k{i}") for i in range(40)} == set(mqs)


def hash_of(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h
