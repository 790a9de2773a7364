"""Cold reads: CommitLog records of one queue, read back from the lake's ``messages`` table.

A pull below the hot ConsumeQueue's min offset is served from here. Records are rebuilt in
the store's wire format from the lake's columns; the lake keeps every field a record holds
except the original order of properties (a map), so a re-encoded record carries the same
properties, hosts, timestamps, offsets, flags and body, with ``body_crc`` as stored.
Reads go by blocks of ``block_size`` offsets kept in an LRU, so a consumer walking history
sequentially costs one lake read per block. A block read while the lake held only part of it
is read again when an offset it lacks is asked for: tiering may have added it since. Callers
run ``read`` off the event loop.

Every broker tiers into the one table, and two brokers' queues of one topic hold the same
queue offsets; a reader for a broker takes only rows of its store hosts, which its commits
record (:mod:`lakemq.tiering.broker_hosts`, read again with every block read from the lake).
Where the log cannot say (commits from before hosts were recorded) and rows of two hosts meet
at one queue offset, the read fails instead of guessing which is the broker's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from lakemq.errors import LakeError
from lakemq.tiering.broker_hosts import BrokerHosts, HostsSeen
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.table_files import table_dataset
from lakemq.tiering.tables import DATA_SCHEMA, MESSAGES_TABLE, encode_row

__all__ = ["ColdReadStats", "ColdReader", "ColdRecord", "may_hold"]

_COLUMNS = [f.name for f in DATA_SCHEMA]


@dataclass(frozen=True, slots=True)
class ColdRecord:
    queue_offset: int
    tags: str | None
    properties: dict[str, str]
    record: bytes


@dataclass(slots=True)
class ColdReadStats:
    lake_reads: int = 0
    cache_hits: int = 0


class ColdReader:
    def __init__(self, lake: LakeLocation, *, broker: str | None = None, block_size: int = 256,
                 cache_blocks: int = 64) -> None:
        """``broker``: the broker whose rows are read (None: any, for a lake of one broker)."""
        self.lake = lake
        self._hosts = None if broker is None else BrokerHosts(lake, broker)
        self.block_size = block_size
        self.cache_blocks = cache_blocks
        self.stats = ColdReadStats()
        self._cache: OrderedDict[tuple[str, int, int], dict[int, ColdRecord]] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, topic: str, queue_id: int, offset: int, end_offset: int, max_count: int) -> list[ColdRecord]:
        """Records of ``[offset, end_offset)`` in offset order, at most ``max_count``; stops at
        the first offset the lake does not hold."""
        found: list[ColdRecord] = []
        current = offset
        read_now: set[int] = set()  # blocks read from the lake during this call
        while current < end_offset and len(found) < max_count:
            index = current // self.block_size
            block, cached = self._block(topic, queue_id, index)
            if not cached:
                read_now.add(index)
            record = block.get(current)
            if record is None and index not in read_now and len(block) < self.block_size:
                block, _ = self._block(topic, queue_id, index, fresh=True)
                read_now.add(index)
                record = block.get(current)
            if record is None:
                break
            found.append(record)
            current += 1
        return found

    def _block(self, topic: str, queue_id: int, index: int, *,
               fresh: bool = False) -> tuple[dict[int, ColdRecord], bool]:
        """The block's records, and whether they came from the cache."""
        key = (topic, queue_id, index)
        with self._lock:
            cached = None if fresh else self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self.stats.cache_hits += 1
                return cached, True
        start = index * self.block_size
        block = self._load(topic, queue_id, start, start + self.block_size)
        with self._lock:
            self.stats.lake_reads += 1
            self._cache[key] = block
            while len(self._cache) > self.cache_blocks:
                self._cache.popitem(last=False)
        return block, False

    def _load(self, topic: str, queue_id: int, start: int, end: int) -> dict[int, ColdRecord]:
        data = table_dataset(self.lake, MESSAGES_TABLE, DATA_SCHEMA,
                             lambda add: add["partition.topic"] == topic and may_hold(add, queue_id, start, end))
        if data is None:
            return {}
        cond = (
            (pc.field("queue_id") == queue_id)
            & (pc.field("queue_offset") >= start)
            & (pc.field("queue_offset") < end)
        )
        seen = None if self._hosts is None else self._hosts.current()
        at: dict[int, list[dict[str, Any]]] = {}
        for row in data.to_table(columns=_COLUMNS, filter=cond).to_pylist():
            at.setdefault(row["queue_offset"], []).append(row)
        topic_bytes = topic.encode()
        block: dict[int, ColdRecord] = {}
        for offset, rows in at.items():
            row = self._mine(topic, queue_id, offset, rows, seen)
            if row is not None:
                block[offset] = _encode(topic_bytes, row)
        return block

    def _mine(self, topic: str, queue_id: int, offset: int, rows: list[dict[str, Any]],
              seen: HostsSeen | None) -> dict[str, Any] | None:
        """The broker's row among the lake's rows at one queue offset, or None when none is."""
        if seen is not None:
            mine = [r for r in rows if r["store_host"] in seen.hosts]
            if mine or seen.complete:
                rows = mine
            # Else the rows of its commits that lack hosts may be any of them: decided below.
        hosts = sorted({r["store_host"] for r in rows})
        if len(hosts) > 1:
            whose = "" if self._hosts is None else f" broker {self._hosts.broker}'s"
            raise LakeError(
                f"the lake holds rows of store hosts {', '.join(hosts)} at {topic} queue {queue_id} offset "
                f"{offset} and its commits do not say which is{whose} (tiered before store hosts were "
                "recorded); read it with a query that selects store_host")
        return rows[0] if rows else None


def may_hold(add: Mapping[str, Any], queue_id: int, start: int, end: int) -> bool:
    """Whether a file (its Delta add action, flattened) may hold offsets ``[start, end)`` of
    queue ``queue_id``, by its column statistics; a file without them may. Without this a
    block read opened every file of the topic: a lake of thousands of small files took minutes
    a block."""
    low_q, high_q = add.get("min.queue_id"), add.get("max.queue_id")
    if low_q is not None and high_q is not None and not low_q <= queue_id <= high_q:
        return False
    low, high = add.get("min.queue_offset"), add.get("max.queue_offset")
    return low is None or high is None or (high >= start and low < end)


def _encode(topic: bytes, row: dict[str, Any]) -> ColdRecord:
    properties = dict(row["properties"] or [])
    record = encode_row(topic, row, properties, row["store_host"])
    return ColdRecord(row["queue_offset"], row["tags"], properties, record)
