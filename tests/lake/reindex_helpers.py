"""A store written through the real MessageStore for the reindex tests, and a byte snapshot of
its ConsumeQueue and IndexFile files."""

from __future__ import annotations

import time
from pathlib import Path

from lakemq.broker.transaction.half_message import op_message, real_message, to_half_message
from lakemq.common.message import MessageConst, MessageExtBrokerInner, MessageSysFlag
from lakemq.store.config import StoreConfig
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut

STORE_HOST = "127.0.0.1:10911"
# Small files so that the CommitLog rolls over, queues span several ConsumeQueue files and
# the index spans several IndexFiles (chains inside each).
STORE_CONF = {
    "mappedFileSizeCommitLog": str(64 * 1024),
    "mappedFileSizeConsumeQueue": str(40 * 20),
    "maxHashSlotNum": "64",
    "maxIndexNum": "300",
    "messageDelayLevel": "1s 5s 10s 30s 1m",
}
TOPICS = ("OrderTopic", "PayTopic", "LogTopic")


def store_config(root: Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=int(STORE_CONF["mappedFileSizeCommitLog"]),
        mapped_file_size_consume_queue=int(STORE_CONF["mappedFileSizeConsumeQueue"]),
        max_hash_slot_num=int(STORE_CONF["maxHashSlotNum"]),
        max_index_num=int(STORE_CONF["maxIndexNum"]),
        message_delay_level=STORE_CONF["messageDelayLevel"],
        flush_interval_consume_queue=50,
        flush_consume_queue_thorough_interval=0,
    )


def _msg(topic: str, body: bytes, queue_id: int, sys_flag: int = 0, **props: str) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic=topic, body=body, queue_id=queue_id, properties=dict(props),
                                 sys_flag=sys_flag, born_timestamp=int(time.time() * 1000),
                                 born_host="192.168.0.7:54321", store_host=STORE_HOST)


def write_store(root: Path, count: int = 420) -> dict[str, int]:
    """Many topics and queues with keys and tags, delayed messages (levels 2 and 4 still
    waiting at shutdown, a level-1 one delivered by the schedule service), a transaction's half + commit + op, a raw prepared and
    a raw rollback record; returns some offsets the tests look for."""
    store = MessageStore(store_config(root), store_host=STORE_HOST)
    assert store.load()
    store.start()
    marks: dict[str, int] = {}
    try:
        due = _msg("LogTopic", b"due-in-1s", 0, KEYS="delayed-1s", DELAY="1")
        assert store.put(MessagesPut.of(due)).is_ok
        for i in range(count):
            topic = TOPICS[i % 3]
            props = {MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"UNIQ{i:06d}"}
            if i % 5:
                props[MessageConst.KEYS] = f"order-{i} cust-{i % 7}"
            if i % 4:
                props[MessageConst.TAGS] = f"tag{i % 3}"
            if i % 50 == 7:
                props[MessageConst.DELAY_TIME_LEVEL] = str(1 + i % 4)
            assert store.put(MessagesPut.of(_msg(topic, f"body-{i}-".encode() * 12, i % 4, **props))).is_ok
            if i == count // 2:
                half = _msg("PayTopic", b"tx-body", 1, KEYS="tx-key", TAGS="txTag",
                            UNIQ_KEY="TXUNIQ000001", TRAN_MSG="true", PGROUP="pg")
                to_half_message(half)
                put = store.put(MessagesPut.of(half))
                assert put.is_ok and put.append_result is not None
                stored = store.look_message_by_offset(put.append_result.wrote_offset)
                assert stored is not None
                committed = store.put(MessagesPut.of(real_message(stored, STORE_HOST)))
                assert committed.is_ok and committed.append_result is not None
                marks["commit"] = committed.append_result.wrote_offset
                assert store.put(MessagesPut.of(op_message(stored, STORE_HOST))).is_ok
                prepared = _msg("PayTopic", b"raw-prepared", 2, MessageSysFlag.TRANSACTION_PREPARED_TYPE,
                                KEYS="prepared-key")
                assert store.put(MessagesPut.of(prepared)).is_ok
                rollback = _msg("PayTopic", b"raw-rollback", 2, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
                                KEYS="rollback-key")
                assert store.put(MessagesPut.of(rollback)).is_ok
        deadline = time.monotonic() + 20
        while not store.query_message("LogTopic", "delayed-1s", 4, 0, 2**62).messages:
            assert time.monotonic() < deadline, "the schedule service did not deliver the 1 s message"
            time.sleep(0.1)
    finally:
        store.shutdown()
    return marks


def snapshot(root: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every ConsumeQueue and IndexFile file."""
    out = {}
    for sub in ("consumequeue", "index"):
        base = root / sub
        if base.is_dir():
            for path in sorted(p for p in base.rglob("*") if p.is_file()):
                out[str(path.relative_to(root))] = path.read_bytes()
    return out
