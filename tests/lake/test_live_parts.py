"""The ``lakemq`` source's parts without Spark or brokers: a pull's body decodes to the rows the
lake holds for the same records, and pushed filters select the same rows and files on both
sides."""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    In,
    InputPartition,
    IsNotNull,
    LessThanOrEqual,
    StringStartsWith,
)
from test_decode import BASE, segment

from lakemq.client.client_api import RawQueryResult
from lakemq.common.message import properties_to_string
from lakemq.common.record import BODY_POS
from lakemq.errors import FrameError
from lakemq.jobs.decode import decode_pulled_body, decode_range
from lakemq.jobs.live_filters import DAY_MS, Pushed, push_filters, rows_where
from lakemq.jobs.live_index import _unusable
from lakemq.jobs.live_source import LiveReader
from lakemq.remoting.headers import QueryMessageResponseHeader
from lakemq.tiering.tables import SPARK_ARROW_SCHEMA


def _records() -> list[tuple[str, bytes, bytes]]:
    return [(f"T{i % 2}", b"body-%d" % i * (i + 1),
             properties_to_string({"TAGS": "paid" if i % 3 == 0 else "new", "KEYS": f"k{i}"}).encode())
            for i in range(12)]


def _record_bounds(buf: bytes) -> list[tuple[int, int]]:
    bounds, pos = [], 0
    while pos < len(buf):
        size = int.from_bytes(buf[pos:pos + 4], "big")
        bounds.append((pos, pos + size))
        pos += size
    return bounds


def test_a_pulled_body_decodes_to_the_rows_the_lake_holds() -> None:
    log = segment(_records())
    lake, _ = decode_range(log, BASE, skip_corrupt=False)
    # A pull gathers records from anywhere in the CommitLog: every other one, here.
    picked = _record_bounds(log)[::2]
    body = b"".join(log[a:b] for a, b in picked)
    pulled = decode_pulled_body(body)
    assert pulled.to_pylist() == lake.take(pa.array(range(0, 12, 2))).to_pylist()
    with pytest.raises(FrameError):
        decode_pulled_body(body[:-3])  # a record cut short
    second = picked[1][1] - picked[1][0] + picked[0][1] - picked[0][0]
    with pytest.raises(FrameError, match=f"byte {second} "):
        decode_pulled_body(body[:second] + b"\0" * 8 + body[second + 8 :])  # not a record's start
    damaged = bytearray(body)
    damaged[BODY_POS] ^= 0xFF  # the first record's body: its CRC no longer matches
    with pytest.raises(FrameError, match="record at byte 0 does not check out"):
        decode_pulled_body(bytes(damaged))
    damaged = bytearray(body)
    damaged[picked[0][1] - picked[0][0] - 2] = 0xFF  # a property byte (no CRC covers it): not UTF-8
    with pytest.raises(FrameError, match="UTF"):
        decode_pulled_body(bytes(damaged))
    assert decode_pulled_body(b"").num_rows == 0


def _batch() -> pa.RecordBatch:
    batch, _ = decode_range(segment(_records()), BASE, skip_corrupt=False)
    return batch.cast(SPARK_ARROW_SCHEMA)


def test_pushed_filters_select_rows_and_leave_the_rest_to_spark() -> None:
    batch = _batch()
    ts = batch.column("store_timestamp").to_pylist()
    kept = [IsNotNull(("tags",)), StringStartsWith(("keys",), "k")]
    pushed, left = push_filters(Pushed(), [
        EqualTo(("topic",), "T0"), In(("tags",), ("paid", "gone")), GreaterThan(("store_timestamp",), ts[0]),
        LessThanOrEqual(("store_timestamp",), ts[9]), *kept,
    ])
    assert list(left) == kept
    assert pushed == Pushed(topics=frozenset({"T0"}), tags=frozenset({"paid", "gone"}), ts_min=ts[0] + 1, ts_max=ts[9])
    assert pushed.subscription == "gone || paid"
    rows = pushed.apply(batch).to_pylist()
    want = [r for r in batch.to_pylist()
            if r["topic"] == "T0" and r["tags"] == "paid" and ts[0] < r["store_timestamp"] <= ts[9]]
    assert rows == want and want
    narrowed, _ = push_filters(pushed, [EqualTo(("tags",), "new")])
    assert narrowed.empty and narrowed.apply(batch).num_rows == 0
    assert Pushed().subscription == "*" and Pushed().apply(batch) is batch


def test_a_filter_that_keeps_every_row_returns_the_batch_without_copying_it() -> None:
    batch = _batch()
    topics = set(batch.column("topic").to_pylist())
    assert Pushed(topics=frozenset(topics)).apply(batch) is batch
    n = batch.num_rows
    assert rows_where(batch, pa.array([True] * n)) is batch
    some = rows_where(batch, pa.array([i % 2 == 0 for i in range(n)]))
    assert some.to_pylist() == batch.to_pylist()[::2]
    # A null is not a match: filter's drop, not the shortcut.
    with_null = rows_where(batch, pa.array([None] + [True] * (n - 1), pa.bool_()))
    assert with_null.to_pylist() == batch.to_pylist()[1:]


def test_pushed_filters_prune_lake_files_by_partition_and_statistics() -> None:
    day = 20_000
    file = {"partition.topic": "T0", "partition.store_date": datetime.date(1970, 1, 1) + datetime.timedelta(day),
            "min.store_timestamp": day * DAY_MS + 10, "max.store_timestamp": day * DAY_MS + 20,
            "min.queue_id": 2, "max.queue_id": 3}
    assert Pushed().wants_file(file)
    assert not Pushed(topics=frozenset({"T1"})).wants_file(file)
    assert Pushed(ts_min=day * DAY_MS + 20).wants_file(file)
    assert not Pushed(ts_min=day * DAY_MS + 21).wants_file(file)
    assert not Pushed(ts_max=day * DAY_MS + 9).wants_file(file)
    assert not Pushed(ts_min=(day + 1) * DAY_MS).wants_file({**file, "min.store_timestamp": None,
                                                              "max.store_timestamp": None})
    assert Pushed(queue_ids=frozenset({3})).wants_file(file)
    assert not Pushed(queue_ids=frozenset({0, 1})).wants_file(file)


def test_the_partition_spark_plans_for_an_empty_read_yields_no_rows(tmp_path: Path) -> None:
    # partitions() found no lake file and no hot range (a topic with nothing yet): Spark reads
    # one InputPartition(None) instead, which must be an empty answer, not a failed query.
    reader = LiveReader({"namesrv": "127.0.0.1:1", "lake": str(tmp_path)})
    assert list(reader.read(InputPartition(None))) == []


def test_a_key_read_asks_the_index_one_key_of_each_value() -> None:
    assert Pushed().key_lookups is None
    # The index holds each key of a KEYS value alone: the longest one of each value is asked.
    assert Pushed(keys=frozenset({"k-1 group-2", "solo"})).key_lookups == {"group-2", "solo"}
    assert Pushed(keys=frozenset({"k1", " "})).key_lookups is None  # a value without a key: pulled


def test_an_index_answer_is_used_only_when_it_holds_every_hot_match() -> None:
    def answer(cut: bool | None, whole_from: int | None) -> RawQueryResult:
        return RawQueryResult(b"", QueryMessageResponseHeader(1, 1, cut, whole_from))

    assert _unusable(answer(False, 100), "k", 100) is None
    assert _unusable(answer(False, 0), "k", -1) is None  # the lake holds none of the broker's records
    assert "past the lake's end" in str(_unusable(answer(False, 101), "k", 100))
    assert "index off" in str(_unusable(answer(False, None), "k", 100))
    assert "more messages for key 'k'" in str(_unusable(answer(True, 0), "k", 100))
    assert "more messages" in str(_unusable(answer(None, 0), "k", 100))  # a broker that does not say
