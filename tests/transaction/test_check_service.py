"""The transaction service and check service over a real MessageStore (files in tmp_path),
without networking: rewrites, check passes, discards, and the one-commit-per-transaction
rule when offsets were lost (a broker killed before it persisted them)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.transaction import (
    TransactionalMessageCheckService,
    TransactionalMessageService,
    to_half_message,
)
from lakemq.broker.transaction.half_message import (
    TRANS_SYS_GROUP,
    is_transactional,
    op_message,
    parse_op_body,
    real_message,
    renew_half_message,
)
from lakemq.broker.transaction.resolved import ResolvedTransactions
from lakemq.common.codes import RequestCode
from lakemq.common.message import MessageConst, MessageExt, MessageExtBrokerInner, MessageSysFlag
from lakemq.common.record import decode_record
from lakemq.errors import BrokerError
from lakemq.remoting.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    decode_header,
)
from lakemq.store.config import StoreConfig
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut

HALF, OP = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"
COMMIT, ROLLBACK = MessageSysFlag.TRANSACTION_COMMIT_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore(
        StoreConfig(
            store_path_root_dir=str(tmp_path / "store"),
            mapped_file_size_commit_log=1 << 20,
            mapped_file_size_consume_queue=600 * 20,
            flush_interval_commit_log=20,
        ),
        store_host="127.0.0.1:10911",
    )
    assert s.load()
    s.start()
    yield s
    s.shutdown()


def _prepared(body: bytes, *, born_ms_ago: int = 10_000, queue_id: int = 3) -> MessageExtBrokerInner:
    msg = MessageExtBrokerInner(
        topic="Orders",
        body=body,
        queue_id=queue_id,
        sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE,
        properties={
            MessageConst.TRANSACTION_PREPARED: "true",
            MessageConst.PRODUCER_GROUP: "pg",
            MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"UNIQ-{body.decode()}",
            MessageConst.TAGS: "TagA",
        },
        born_timestamp=int(time.time() * 1000) - born_ms_ago,
        born_host="127.0.0.1:40000",
    )
    to_half_message(msg)
    return msg


def _put(store: MessageStore, msg: MessageExtBrokerInner) -> MessageExt:
    result = store.put(MessagesPut.of(msg))
    assert result.is_ok and result.append_result is not None
    deadline = time.monotonic() + 5
    while store.dispatch_behind_bytes() > 0:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    stored = store.look_message_by_offset(result.append_result.wrote_offset)
    assert stored is not None
    return stored


def _settle(store: MessageStore) -> None:
    deadline = time.monotonic() + 5
    while store.dispatch_behind_bytes() > 0:
        assert time.monotonic() < deadline
        time.sleep(0.005)


def _services(
    store: MessageStore,
    tmp_path: Path,
    *,
    timeout_ms: int = 1000,
    check_max: int = 15,
) -> tuple[TransactionalMessageService, TransactionalMessageCheckService]:
    svc = TransactionalMessageService(store, ConsumerOffsetManager(tmp_path))
    checker = TransactionalMessageCheckService(
        svc, ProducerManager(), transaction_timeout_ms=timeout_ms, check_max=check_max, check_interval_ms=100
    )
    return svc, checker


def test_rewrites() -> None:
    half = _prepared(b"a")
    assert (half.topic, half.queue_id) == (HALF, 0)
    assert (
        half.properties[MessageConst.REAL_TOPIC] == "Orders"
        and half.properties[MessageConst.REAL_QUEUE_ID] == "3"
    )
    assert MessageSysFlag.transaction_value(half.sys_flag) == MessageSysFlag.TRANSACTION_NOT_TYPE
    assert "REAL_TOPIC\x01Orders" in half.properties_string and is_transactional(half)
    stored = half.replace(queue_offset=7, commit_log_offset=4242)
    copy = renew_half_message(stored, "127.0.0.1:1")
    assert copy.properties[MessageConst.TRANSACTION_CHECK_TIMES] == "1"
    assert copy.properties[MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET] == "7"
    assert copy.born_timestamp == half.born_timestamp and copy.topic == HALF
    real = real_message(stored, "127.0.0.1:1")
    assert (real.topic, real.queue_id, real.prepared_transaction_offset) == ("Orders", 3, 4242)
    assert MessageSysFlag.transaction_value(real.sys_flag) == COMMIT
    for gone in (MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID, MessageConst.TRANSACTION_PREPARED):
        assert gone not in real.properties
    assert real.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == "UNIQ-a" and real.tags == "TagA"
    op = op_message(copy.replace(queue_offset=9), "127.0.0.1:1")
    assert (op.topic, op.body, op.tags) == (OP, b"9", "d")
    assert parse_op_body(op) == (9, 7)


def test_delay_level_of_a_prepared_send_is_dropped(store: MessageStore) -> None:
    msg = MessageExtBrokerInner(
        topic="Orders",
        body=b"late",
        queue_id=1,
        sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE,
        properties={MessageConst.TRANSACTION_PREPARED: "true", MessageConst.DELAY_TIME_LEVEL: "3"},
        born_timestamp=int(time.time() * 1000),
        born_host="127.0.0.1:40000",
    )
    to_half_message(msg)
    stored = _put(store, msg)
    assert (stored.topic, stored.queue_id, stored.queue_offset) == (HALF, 0, 0)
    assert stored.properties[MessageConst.REAL_TOPIC] == "Orders" and stored.delay_time_level == 0
    assert store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 2) == 0


def test_half_message_has_no_entry_in_the_real_topic(store: MessageStore) -> None:
    _put(store, _prepared(b"a"))
    assert store.get_max_offset_in_queue(HALF, 0) == 1
    assert store.get_max_offset_in_queue("Orders", 3) == 0


def test_pass_checks_due_messages_and_leaves_young_ones(store: MessageStore, tmp_path: Path) -> None:
    svc, checker = _services(store, tmp_path, timeout_ms=5_000)
    _put(store, _prepared(b"old", born_ms_ago=60_000))
    _put(store, _prepared(b"young", born_ms_ago=0))
    _put(store, _prepared(b"old-behind-young", born_ms_ago=60_000))
    checks = checker.check_once()
    assert len(checks) == 1
    request = checks[0].request
    assert (
        request.code == RequestCode.CHECK_TRANSACTION_STATE
        and request.is_oneway
        and checks[0].producer_group == "pg"
    )
    header = decode_header(CheckTransactionStateRequestHeader, request.ext_fields)
    msg = decode_record(request.body)
    assert (msg.topic, msg.queue_id, msg.body) == ("Orders", 3, b"old")
    # The check names the copy put back at the end of the half queue.
    assert header.tran_state_table_offset == 3 and header.transaction_id == "UNIQ-old"
    copy = store.look_message_by_offset(header.commit_log_offset)
    assert copy is not None and copy.queue_offset == 3
    assert copy.properties[MessageConst.TRANSACTION_CHECK_TIMES] == "1"
    # The walk stopped at the young one; that progress is persisted.
    assert svc.offsets.query_offset(TRANS_SYS_GROUP, HALF, 0) == 1
    assert ConsumerOffsetManager(tmp_path).path.exists()


def test_unanswered_transaction_rolled_back_after_check_max(store: MessageStore, tmp_path: Path) -> None:
    svc, checker = _services(store, tmp_path, check_max=2)
    _put(store, _prepared(b"x"))
    rounds = []
    for _ in range(4):
        rounds.append(len(checker.check_once()))
        _settle(store)
        time.sleep(0.002)  # the next pass starts after the copies' store time
    assert rounds == [1, 1, 0, 0]
    assert store.get_max_offset_in_queue(OP, 0) == 1
    assert store.get_max_offset_in_queue("Orders", 3) == 0
    assert svc.resolved.is_resolved(0)


def test_one_commit_per_transaction_even_after_lost_offsets(store: MessageStore, tmp_path: Path) -> None:
    svc, checker = _services(store, tmp_path)
    original = _put(store, _prepared(b"tx"))
    (check,) = checker.check_once()
    _settle(store)
    header = decode_header(CheckTransactionStateRequestHeader, check.request.ext_fields)

    def end(queue_offset: int, commit_log_offset: int, state: int = COMMIT) -> str | None:
        return svc.end_transaction(
            EndTransactionRequestHeader("pg", queue_offset, commit_log_offset, state, "UNIQ-tx"),
            "127.0.0.1:1",
        )

    # The check's answer commits through the copy; the late answer to the first send names
    # the original, and must not store the message again.
    assert end(header.tran_state_table_offset, header.commit_log_offset) is None
    assert end(original.queue_offset, original.commit_log_offset) == "transaction already resolved"
    _settle(store)
    assert store.get_max_offset_in_queue("Orders", 3) == 1
    with pytest.raises(BrokerError, match="producer group wrong"):
        svc.end_transaction(
            EndTransactionRequestHeader("other", 0, original.commit_log_offset, COMMIT, "x"), "a"
        )

    # A broker killed before persisting: offsets back at 0, nothing resolved in memory. The
    # Op messages tell the new check service that both copies are done.
    fresh_svc, fresh = _services(store, tmp_path / "after-crash")
    assert fresh.check_once() == []
    assert fresh_svc.offsets.query_offset(TRANS_SYS_GROUP, HALF, 0) == 2
    assert fresh_svc.offsets.query_offset(TRANS_SYS_GROUP, OP, 0) == 1
    assert store.get_max_offset_in_queue("Orders", 3) == 1


def test_rollback_writes_only_an_op_message(store: MessageStore, tmp_path: Path) -> None:
    svc, _ = _services(store, tmp_path)
    half = _put(store, _prepared(b"r"))
    svc.end_transaction(
        EndTransactionRequestHeader("pg", half.queue_offset, half.commit_log_offset, ROLLBACK, "u"), "a"
    )
    _settle(store)
    assert store.get_max_offset_in_queue("Orders", 3) == 0
    assert store.get_max_offset_in_queue(OP, 0) == 1


def test_resolved_table_claims_once_and_is_bounded() -> None:
    table = ResolvedTransactions(capacity=3)
    assert table.claim(5) and not table.claim(5) and table.is_in_progress(5)
    table.settle(5, resolved=False)  # a failed put gives the claim back
    assert not table.is_resolved(5) and table.claim(5)
    table.settle(5, resolved=True)
    assert table.is_resolved(5) and not table.claim(5)
    for origin in (6, 7, 8):
        table.add(origin)
    assert len(table) == 3 and not table.is_resolved(5) and table.is_resolved(8)


def test_resolved_table_forgets_what_is_past_the_check_horizon(
    store: MessageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A check pass drops the entries recorded longer ago than a second END could still come
    # (timeout + check_max x interval = 1 s + 2 x 0.1 s), so the table holds a window, not
    # everything up to its capacity.
    svc, checker = _services(store, tmp_path, check_max=2)
    assert checker.resolved_horizon_s() == pytest.approx(1.2)
    now = [1_000.0]
    monkeypatch.setattr("lakemq.broker.transaction.resolved.time.monotonic", lambda: now[0])
    svc.resolved.add(1)
    now[0] += 1.0
    svc.resolved.add(2)
    svc.resolved.add(1)  # recorded again: its age starts anew and it keeps its place last
    now[0] += 0.5
    svc.resolved.add(3)
    checker.check_once()
    assert len(svc.resolved) == 3
    now[0] += 0.8  # 2 and 1 recorded 1.3 s ago, 3 0.8 s ago
    checker.check_once()
    assert len(svc.resolved) == 1 and svc.resolved.is_resolved(3) and not svc.resolved.is_resolved(1)


def test_own_immunity_time_puts_back_without_holding_up_the_queue(
    store: MessageStore, tmp_path: Path
) -> None:
    svc, checker = _services(store, tmp_path, timeout_ms=1_000)
    immune = _prepared(b"immune", born_ms_ago=5_000)
    immune.set_property(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS, "60")
    _put(store, immune)
    _put(store, _prepared(b"due", born_ms_ago=5_000))
    checks = checker.check_once()
    assert [decode_record(c.request.body).body for c in checks] == [b"due"]
    _settle(store)
    # Both walked past; the immune one waits at the end of the queue, its checks not counted.
    assert svc.offsets.query_offset(TRANS_SYS_GROUP, HALF, 0) == 2
    moved = svc.read(HALF, 2).messages
    assert [(m.body, m.properties[MessageConst.TRANSACTION_CHECK_TIMES]) for m in moved] == [
        (b"immune", "0"),
        (b"due", "1"),
    ]
