"""reindex after the oldest CommitLog files were tiered and deleted, and consumequeue/ was lost:
every queue continues from where it really ended (the lake's manifest, the committed consumer
offsets, the delay levels' offsets), never from 0; without a witness for the deleted offsets
the rebuild is refused and nothing changes. A store restarted on the rebuild gives the next
message the next unused offset, and a new delayed message is delivered."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from reindex_helpers import STORE_HOST, store_config

from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.common.message import MessageConst, MessageExtBrokerInner
from lakemq.errors import StoreError
from lakemq.jobs.reindex import ReindexSettings, reindex
from lakemq.jobs.tier_run import tier_run
from lakemq.store.delay_levels import SCHEDULE_TOPIC
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.tiering.config import TieringConfig
from lakemq.tiering.retention import RetentionRules
from lakemq.tiering.seal import commitlog_files

BROKER = "broker-a"


def _msg(topic: str, i: int, queue_id: int = 0, **props: str) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic=topic, body=f"{topic}-{i}-".encode() * 20, queue_id=queue_id,
                                 properties=dict(props), born_timestamp=int(time.time() * 1000),
                                 born_host="192.168.0.7:54321", store_host=STORE_HOST)


def _open(root: Path) -> MessageStore:
    store = MessageStore(store_config(root), store_host=STORE_HOST)
    assert store.load()
    store.start()
    return store


def _ends(root: Path) -> dict[tuple[str, int], int]:
    store = MessageStore(store_config(root), store_host=STORE_HOST)
    assert store.load()
    try:
        return {(cq.topic, cq.queue_id): cq.get_max_offset_in_queue() for cq in store.consume_queues.all()}
    finally:
        store.commit_log.shutdown()
        store.consume_queues.shutdown()


def _wait(what: str, done: Any, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_queues_continue_where_they_ended_after_tiering_and_lost_consume_queues(spark: Any, tmp_path: Path) -> None:
    root, lake = tmp_path / "store", tmp_path / "lake"
    store = _open(root)
    try:
        for i in range(120):  # "Early" lives only in the files tiering will delete
            assert store.put(MessagesPut.of(_msg("Early", i, i % 2))).is_ok
        for i in range(3):  # delay level 1 (1 s): delivered before the files go
            assert store.put(MessagesPut.of(_msg("Early", 1000 + i, 0, **{MessageConst.DELAY_TIME_LEVEL: "1"}))).is_ok
        _wait("delay level 1 delivered", lambda: store.schedule.offset_table.get(1) == 3)
        offsets = ConsumerOffsetManager(root / "config")
        offsets.commit_offset("127.0.0.1:1", "early-group", "Early", 0, 25)
        offsets.persist(force=True)
        for i in range(400):  # "Late" fills the files that stay
            assert store.put(MessagesPut.of(_msg("Late", i, i % 3))).is_ok
    finally:
        store.shutdown()
    before = _ends(root)
    assert before[("Early", 0)] == 63 and before[(SCHEDULE_TOPIC, 0)] == 3

    tiering = TieringConfig(lake_uri=str(lake), tier_seal_idle_ms=1)
    ran = tier_run(spark, store_dir=root, broker_name=BROKER, config=tiering, upkeep=False,
                   retention=RetentionRules(file_reserved_ms=0, broker_reads_lake=True))
    assert ran.deleted, "tiering should have deleted the oldest files"
    first_left = commitlog_files(root)[0].start
    shutil.rmtree(root / "consumequeue")

    without_lake = ReindexSettings(config=store_config(root), stride=8 * 1024, broker_name=BROKER)
    with pytest.raises(StoreError, match=f"starts at offset {first_left}.*nothing changed"):
        reindex(spark, without_lake)
    assert not (root / "consumequeue").exists()

    with_lake = ReindexSettings(config=store_config(root), stride=8 * 1024, broker_name=BROKER, lake_uri=str(lake))
    result = reindex(spark, with_lake)
    after = _ends(root)
    assert after == before, "every queue must end where it ended before the loss"
    assert any(line.startswith("Early/0 at 63") for line in result.continued), result.continued
    assert any(line.startswith(f"{SCHEDULE_TOPIC}/0 at 3") for line in result.continued), result.continued

    store = _open(root)
    try:
        put = store.put(MessagesPut.of(_msg("Early", 9999, 0)))
        assert put.append_result is not None and put.append_result.logics_offset == 63
        assert store.get_min_offset_in_queue("Early", 0) == 63  # below: in the lake, not here
        delayed = store.put(MessagesPut.of(_msg("Early", 10_000, 1, **{MessageConst.DELAY_TIME_LEVEL: "1"})))
        assert delayed.is_ok
        _wait("a delayed message put after the rebuild is delivered",
              lambda: store.get_max_offset_in_queue("Early", 1) == before[("Early", 1)] + 1)
    finally:
        store.shutdown()
    print(f"injected: {len(ran.deleted)} CommitLog file(s) tiered and deleted, consumequeue/ removed; measured: "
          f"refused without the lake; with it: {'; '.join(result.continued)}")
