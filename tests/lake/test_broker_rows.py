"""Two brokers' rows in one lake: both CommitLogs start at offset 0 and both brokers' queue 0
of a topic count from 0, so only a row's ``store_host`` names its broker. Seals and tier
commits record the hosts; verification, cold reads and the stream's lake parts take one
broker's rows by them; lakes tiered before hosts were recorded behave as before, and a cold
read that cannot tell two brokers' rows apart fails instead of guessing."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lake_helpers import make_message, store_writer
from reindex_helpers import store_config

from lakemq.common.record import decode_message_id
from lakemq.errors import LakeError
from lakemq.jobs.compact import compact
from lakemq.jobs.live_index import in_ranges
from lakemq.jobs.live_plan import LakeCut, LakeFile
from lakemq.jobs.live_source import LakePart
from lakemq.jobs.live_stream import LiveStreamReader
from lakemq.jobs.ordered_scan import ordered_pages
from lakemq.jobs.sql import register_views
from lakemq.store.put_request import MessagesPut
from lakemq.tiering.cold_read import ColdReader
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest, manifest_path
from lakemq.tiering.seal import load_seals, seal_dir, seal_segments
from lakemq.tiering.verify import count_lake_range, verify_manifest

HOST_A = "10.1.2.3:10911"
HOST_B = "10.1.2.4:10911"
TOPIC = "TopicShared"
COUNT = 40


def _write(store: Path, broker: str, host: str, count: int = COUNT, first: int = 0) -> None:
    # Equal sizes on both brokers: the same CommitLog offsets and queue offsets on each.
    store_writer(store)([make_message(TOPIC, b"%s-%04d" % (broker.encode(), i) + bytes(100))
                         for i in range(first, first + count)], store_host=host)


def _drop_hosts(store: Path) -> None:
    """Make the store's seals as a lakemq from before store hosts were recorded wrote them."""
    for path in seal_dir(store).glob("*.json"):
        raw = json.loads(path.read_text())
        raw.pop("store_hosts")
        path.write_text(json.dumps(raw))


def test_a_seal_records_the_store_hosts_of_its_records(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _write(store, "a", HOST_A, 300)
    _write(store, "a", HOST_B, 300, first=300)  # the broker's address changed
    seals = seal_segments(store, idle_ms=0)
    # The first file holds both hosts' records (sorted), the second only the new host's.
    assert [s.store_hosts for s in seals] == [(HOST_A, HOST_B), (HOST_B,)]
    assert load_seals(store) == seals  # kept in the seal files
    _drop_hosts(store)
    assert all(s.store_hosts is None for s in load_seals(store))  # an older seal: unknown


def _reader(tmp_path: Path) -> LiveStreamReader:
    return LiveStreamReader({"namesrv": "127.0.0.1:1", "lake": str(tmp_path / "lake")})


def _cut(**kwargs: Any) -> LakeCut:
    return LakeCut(3, (LakeFile(f"topic={TOPIC}/part-0.parquet", TOPIC, 0, 0, 99),), **kwargs)


def test_a_streams_lake_part_takes_each_brokers_rows_by_its_hosts(tmp_path: Path) -> None:
    ranges = {(TOPIC, "broker-a", "0"): (0, 50), (TOPIC, "broker-b", "0"): (10, 60), (TOPIC, "broker-c", "0"): (0, 5)}
    cut = _cut(store_hosts={"broker-a": frozenset({HOST_A}), "broker-b": frozenset({HOST_B, "10.9.9.9:1"})})
    parts = _reader(tmp_path)._lake_parts(cut, ranges)
    assert len(parts) == 1 and isinstance(parts[0], LakePart)
    # broker-c has no commit in the lake: none of the file's rows are its.
    assert parts[0].ranges == ((0, 0, 50, (HOST_A,)), (0, 10, 60, (HOST_B, "10.9.9.9:1")))
    batch = pa.RecordBatch.from_pydict({"queue_id": [0, 0, 0, 0], "queue_offset": [5, 5, 55, 55],
                                        "store_host": [HOST_A, HOST_B, HOST_A, HOST_B]})
    assert in_ranges(batch, parts[0].ranges).to_pylist() == [True, False, False, True]

    # A lake from before hosts were recorded: one broker's topic reads every row, as before ...
    alone = _reader(tmp_path)._lake_parts(_cut(hostless=frozenset({"broker-a"})),
                                         {(TOPIC, "broker-a", "0"): (0, 50)})
    assert [p.ranges for p in alone if isinstance(p, LakePart)] == [((0, 0, 50, None),)]
    # ... and a topic two brokers serve cannot be told apart.
    with pytest.raises(LakeError, match="record no store hosts"):
        _reader(tmp_path)._lake_parts(_cut(store_hosts={"broker-b": frozenset({HOST_B})},
                                           hostless=frozenset({"broker-a"})), ranges)


def _tier(spark: Any, store: Path, lake: Path, broker: str) -> Manifest:
    compact(spark, store_dir=store, lake_uri=str(lake), broker_name=broker, seal_idle_ms=0)
    return Manifest.open(LakeLocation.of(str(lake)), broker)


@pytest.mark.spark
def test_two_brokers_in_one_lake_verify_and_cold_read_their_own_rows(spark: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    location = LakeLocation.of(str(lake))
    stores = {"broker-a": (tmp_path / "a", HOST_A), "broker-b": (tmp_path / "b", HOST_B)}
    manifests = {}
    for broker, (store, host) in stores.items():
        _write(store, broker[-1], host)
        manifests[broker] = _tier(spark, store, lake, broker)
    entry = manifests["broker-b"].entries[0]
    assert entry.store_hosts == (HOST_B,)
    # Both brokers' rows share the range's CommitLog offsets: all of them are twice the segment's.
    assert count_lake_range(location, entry.range_start, entry.range_end).rows == 2 * entry.rows
    for broker, (store, _host) in stores.items():
        verified, counts = verify_manifest(location, store, manifests[broker])
        assert all(e.verified for e in verified.entries) and sum(c.rows for c in counts.values()) == COUNT

    # The manifest rebuilt from the Delta log alone has the hosts too.
    location.fs.rm(manifest_path(location, "broker-b"))
    assert Manifest.open(location, "broker-b").entries == manifests["broker-b"].entries

    for broker in stores:
        cold = ColdReader(location, broker=broker).read(TOPIC, 0, 0, COUNT, COUNT)
        assert [r.queue_offset for r in cold] == list(range(COUNT))
        assert all(b"%s-%04d" % (broker[-1].encode(), i) in r.record for i, r in enumerate(cold)), broker
    assert ColdReader(location, broker="broker-z").read(TOPIC, 0, 0, COUNT, COUNT) == []  # none of its rows
    with pytest.raises(LakeError, match="do not say which"):
        ColdReader(location).read(TOPIC, 0, 0, COUNT, COUNT)  # no broker named: two hosts at one offset


@pytest.mark.spark
def test_a_lake_tiered_before_hosts_were_recorded_reads_as_before(spark: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    location = LakeLocation.of(str(lake))
    store_a = tmp_path / "a"
    _write(store_a, "a", HOST_A)
    seal_segments(store_a, idle_ms=0)
    _drop_hosts(store_a)
    manifest = _tier(spark, store_a, lake, "broker-a")
    assert all(e.store_hosts is None for e in manifest.entries)
    verified, _ = verify_manifest(location, store_a, manifest)  # counts every row of the range, as before
    assert all(e.verified for e in verified.entries)
    assert len(ColdReader(location, broker="broker-a").read(TOPIC, 0, 0, COUNT, COUNT)) == COUNT

    # A second old broker at the same offsets: broker-a's commits cannot say which rows are its.
    store_b = tmp_path / "b"
    _write(store_b, "b", HOST_B)
    seal_segments(store_b, idle_ms=0)
    _drop_hosts(store_b)
    _tier(spark, store_b, lake, "broker-b")
    with pytest.raises(LakeError, match=f"store hosts {HOST_A}, {HOST_B} at {TOPIC} queue 0 offset 0"):
        ColdReader(location, broker="broker-a").read(TOPIC, 0, 0, COUNT, COUNT)


@pytest.mark.spark
def test_an_ordered_scan_reads_two_brokers_rows_at_one_position_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both brokers store the same sizes at the same millisecond: every (store_timestamp,
    commitlog_offset) position holds two rows, and pages of an odd size still read each once."""
    lake = tmp_path / "lake"
    with monkeypatch.context() as frozen:
        frozen.setattr(time, "time_ns", lambda: 1_800_000_000_000 * 1_000_000)
        for broker, host in (("broker-a", HOST_A), ("broker-b", HOST_B)):
            _write(tmp_path / broker, broker[-1], host)
    for broker in ("broker-a", "broker-b"):
        _tier(spark, tmp_path / broker, lake, broker)
    total, left, pages = ordered_pages(spark, str(lake), topic=TOPIC, begin_ms=0, end_ms=2**62, page_rows=7)
    rows = [(r["store_timestamp"], r["commitlog_offset"], r["msg_id"]) for page in pages for r in page.to_pylist()]
    assert (total, left) == (2 * COUNT, 2 * COUNT)
    assert len({m for _, _, m in rows}) == len(rows) == 2 * COUNT  # msg ids name the store host: each row once
    assert len({(t, o) for t, o, _ in rows}) == COUNT and rows == sorted(rows, key=lambda r: r[:2])


def _transaction(root: Path, host: str, *, end: bool) -> None:
    """A half message at the half queue's offset 0 and CommitLog offset 0; with ``end`` its
    commit and Op message too."""
    from lakemq.broker.transaction.half_message import op_message, real_message, to_half_message
    from lakemq.store.message_store import MessageStore

    store = MessageStore(store_config(root), store_host=host)
    assert store.load()
    store.start()
    try:
        half = make_message("PayTopic", b"tx-body", queue_id=1, uniq=f"TX-{host}", TRAN_MSG="true", PGROUP="pg")
        to_half_message(half)
        put = store.put(MessagesPut.of(half))
        assert put.is_ok and put.append_result is not None and put.append_result.wrote_offset == 0
        if end:
            stored = store.look_message_by_offset(0)
            assert stored is not None
            assert store.put(MessagesPut.of(real_message(stored, host))).is_ok
            assert store.put(MessagesPut.of(op_message(stored, host))).is_ok
    finally:
        store.shutdown()


@pytest.mark.spark
def test_the_transactions_view_ends_a_half_message_only_by_its_own_brokers_records(spark: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    for broker, host, end in (("broker-a", HOST_A, True), ("broker-b", HOST_B, False)):
        _transaction(tmp_path / broker, host, end=end)
        _tier(spark, tmp_path / broker, lake, broker)
    register_views(spark, str(lake), suffix="_two")
    states = {decode_message_id(r["msg_id"])[0]: r["state"]
              for r in spark.sql("SELECT msg_id, state FROM transactions_two").collect()}
    # broker-b's half shares queue and CommitLog offset 0 with broker-a's, whose Op and commit name it.
    assert states == {HOST_A: "COMMIT", HOST_B: "PENDING"}
