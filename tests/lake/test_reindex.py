"""reindex (lakemq.jobs.reindex) on a store the real MessageStore wrote: the rebuilt ConsumeQueue
and IndexFile files equal the dispatch service's byte for byte, the checkpoint too; corrupt
input is reported with its offset and changes nothing; a store in use is refused."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reindex_helpers import STORE_HOST, snapshot, store_config, write_store

from lakemq.errors import CorruptSegmentError, StoreError
from lakemq.jobs.reindex import ReindexSettings, reindex
from lakemq.store.delay_levels import SCHEDULE_TOPIC
from lakemq.store.index_file import IndexFile
from lakemq.store.message_store import MessageStore
from lakemq.tiering.seal import commitlog_files

_CQ_UNIT = struct.Struct(">qiq")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes], dict[str, int]]:
    root = tmp_path_factory.mktemp("reindex") / "store"
    marks = write_store(root)
    assert len(commitlog_files(root)) >= 2, "the CommitLog should roll over to a second file"
    return root, snapshot(root), marks


@pytest.fixture
def store(tmp_path: Path, pristine: tuple[Path, dict[str, bytes], dict[str, int]]) -> Path:
    root = tmp_path / "store"
    shutil.copytree(pristine[0], root)
    return root


def _settings(root: Path, **kw: object) -> ReindexSettings:
    return ReindexSettings(config=store_config(root), stride=8 * 1024, **kw)  # type: ignore[arg-type]


def _split(snap: dict[str, bytes]) -> tuple[dict[str, bytes], list[tuple[str, bytes]]]:
    cq = {k: v for k, v in snap.items() if k.startswith("consumequeue/")}
    return cq, sorted((k, v) for k, v in snap.items() if k.startswith("index/"))


def _store_time_name(ms: int) -> str:
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"


def test_rebuild_after_losing_both_dirs_is_byte_identical(spark: object, store: Path, pristine: tuple) -> None:
    original = pristine[1]
    checkpoint = (store / "checkpoint").read_bytes()[:24]
    shutil.rmtree(store / "consumequeue")
    shutil.rmtree(store / "index")

    result = reindex(spark, _settings(store))  # type: ignore[arg-type]

    rebuilt = snapshot(store)
    cq_before, index_before = _split(original)
    cq_after, index_after = _split(rebuilt)
    assert cq_after == cq_before
    assert any(k.startswith(f"consumequeue/{SCHEDULE_TOPIC}/") for k in cq_after)
    assert len(index_before) >= 3, "the index should span several files"
    # Names too: the broker and the rebuild both name a file after its first record's store
    # time, counted on from the previous name when it would not sort after it (a file filled
    # within one millisecond: a batch's records share their store time).
    assert index_after == index_before
    cfg = store_config(store)
    previous = ""
    for name, _ in index_after:
        f = IndexFile(store / name, cfg.max_hash_slot_num, cfg.max_index_num)
        try:
            derived = _store_time_name(f.begin_timestamp)
        finally:
            f.close()
        expected = derived if derived > previous else f"{int(previous) + 1:0{len(previous)}d}"
        assert Path(name).name == expected
        previous = expected
    assert (store / "checkpoint").read_bytes()[:24] == checkpoint
    assert result.records > 420 and result.queues == len({str(Path(k).parent) for k in cq_before})
    assert result.corrupt == () and result.kept_queues == ()
    assert not list(store.glob("*.reindex*"))


def test_schedule_queue_holds_delivery_times_and_transactions_stay_out(
        spark: object, store: Path, pristine: tuple) -> None:
    shutil.rmtree(store / "consumequeue")
    reindex(spark, _settings(store, index=False))  # type: ignore[arg-type]
    ms = MessageStore(store_config(store), store_host=STORE_HOST)
    assert ms.load()
    try:
        levels = ms.delay_levels
        scheduled = 0
        for queue_dir in (store / "consumequeue" / SCHEDULE_TOPIC).iterdir():
            cq = ms.consume_queues.find(SCHEDULE_TOPIC, int(queue_dir.name))
            assert cq is not None
            for unit in cq.read_units(0, 1000):
                if unit.is_blank:
                    continue
                msg = ms.look_message_by_offset(unit.commit_log_offset)
                assert msg is not None
                assert unit.tags_code == msg.store_timestamp + levels.delay_ms(int(queue_dir.name) + 1)
                scheduled += 1
        assert scheduled >= 5
        bodies = set()
        for queue_id in range(4):
            cq = ms.consume_queues.find("PayTopic", queue_id)
            for unit in cq.read_units(0, 10_000) if cq is not None else []:
                msg = ms.look_message_by_offset(unit.commit_log_offset)
                assert msg is not None
                bodies.add(msg.body)
        assert b"tx-body" in bodies  # the committed message
        assert not {b"raw-prepared", b"raw-rollback"} & bodies
        assert ms.view_message_by_id("TXUNIQ000001", "PayTopic") is not None
        assert ms.query_message("PayTopic", "prepared-key", 4, 0, 2**62).messages  # prepared: indexed
        assert not ms.query_message("PayTopic", "rollback-key", 4, 0, 2**62).messages
    finally:
        ms.consume_queues.shutdown()
        if ms.index_service is not None:
            ms.index_service.shutdown()
        ms.commit_log.mapped_file_queue.shutdown()


def test_corrupt_consume_queue_file_rebuilt_and_index_names_kept(spark: object, store: Path,
                                                                 pristine: tuple) -> None:
    victim = min((store / "consumequeue" / "OrderTopic" / "1").iterdir())
    data = bytearray(victim.read_bytes())
    data[40:100] = b"\xff" * 60
    victim.write_bytes(bytes(data))
    index_file = sorted((store / "index").iterdir())[1]
    with open(index_file, "r+b") as f:
        f.seek(5000)
        f.write(b"\x7f" * 400)

    result = reindex(spark, _settings(store))  # type: ignore[arg-type]

    assert snapshot(store) == pristine[1]  # names and bytes: the existing index names are kept
    assert len(result.index_files) == len([k for k in pristine[1] if k.startswith("index/")])


def test_one_topic_rebuilt_others_untouched(spark: object, store: Path, pristine: tuple) -> None:
    shutil.rmtree(store / "consumequeue" / "LogTopic")
    other = store / "consumequeue" / "OrderTopic" / "0"
    inode = min(other.iterdir()).stat().st_ino
    result = reindex(spark, _settings(store, topic="LogTopic", index=False))  # type: ignore[arg-type]
    assert snapshot(store) == pristine[1]
    assert min(other.iterdir()).stat().st_ino == inode
    assert result.queues == len(list((store / "consumequeue" / "LogTopic").iterdir()))


def _first_record_in_second_file(root: Path) -> int:
    cq = max(p for p in (root / "consumequeue" / "OrderTopic" / "2").iterdir()).read_bytes()
    second = commitlog_files(root)[1].start
    return next(o for o, _s, _t in _CQ_UNIT.iter_unpack(cq) if o >= second + 1000)


def test_corrupt_record_stops_with_its_offset_and_changes_nothing(spark: object, store: Path,
                                                                   pristine: tuple) -> None:
    bad = _first_record_in_second_file(store)
    second = commitlog_files(store)[1]
    with open(second.path, "r+b") as f:  # one body byte: the CRC no longer matches
        f.seek(bad - second.start + 100)
        byte = f.read(1)
        f.seek(bad - second.start + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    shutil.rmtree(store / "index")
    with pytest.raises(CorruptSegmentError) as caught:
        reindex(spark, _settings(store))  # type: ignore[arg-type]
    assert caught.value.offset == bad and str(bad) in str(caught.value)
    assert snapshot(store) == {k: v for k, v in pristine[1].items() if not k.startswith("index/")}
    assert not list(store.glob("*.reindex*"))

    result = reindex(spark, _settings(store, skip_corrupt=True))  # type: ignore[arg-type]
    assert [a for a, _ in result.corrupt] == [bad]
    cq_after, _ = _split(snapshot(store))
    cq_before, _ = _split(pristine[1])
    changed = [k for k in cq_before if cq_after.get(k) != cq_before[k]]
    assert changed == [next(k for k in cq_before if k.startswith("consumequeue/OrderTopic/2/")
                            and _CQ_UNIT.pack(bad, 0, 0)[:8] in cq_before[k])]
    before, after = cq_before[changed[0]], cq_after[changed[0]]
    pos = next(i for i in range(0, len(before), 20) if before[i:i + 8] == _CQ_UNIT.pack(bad, 0, 0)[:8])
    assert after[pos:pos + 20] == _CQ_UNIT.pack(0, 0x7FFFFFFF, 0)  # a blank entry holds its place
    assert after[:pos] + after[pos + 20:] == before[:pos] + before[pos + 20:]


def test_smashed_record_size_reported_at_its_offset(spark: object, store: Path) -> None:
    bad = _first_record_in_second_file(store)
    second = commitlog_files(store)[1]
    with open(second.path, "r+b") as f:
        f.seek(bad - second.start)
        f.write(struct.pack(">i", 7))
    with pytest.raises(CorruptSegmentError) as caught:
        reindex(spark, _settings(store))  # type: ignore[arg-type]
    assert caught.value.offset == bad


def test_refuses_a_store_in_use_or_not_shut_down(spark: object, store: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import mmap, sys; f = open(sys.argv[1], 'rb'); "
         "m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ); f.close(); print('ready', flush=True); "
         "sys.stdin.read()"), str(commitlog_files(store)[0].path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError, match=f"in use by process {holder.pid}"):
            reindex(spark, _settings(store, force=True))  # type: ignore[arg-type]
    finally:
        holder.communicate("")
    (store / "abort").touch()
    with pytest.raises(StoreError, match="not shut down cleanly"):
        reindex(spark, _settings(store))  # type: ignore[arg-type]
    assert (store / "consumequeue").is_dir()
    reindex(spark, _settings(store, force=True))  # type: ignore[arg-type]
