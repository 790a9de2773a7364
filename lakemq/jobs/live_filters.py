"""The filters the ``lakemq`` source takes from Spark (PySpark's ``pushFilters``) and applies
to both sides of a read: topic, queue id, tags, keys and the store-time range.

Pushed filters are applied exactly, so Spark need not evaluate them again: on the lake side
they prune files by partition values (topic, store date) and file statistics, then rows;
on the hot side tags go to the broker as the pull's subscription (the broker filters by tag
hash), the topic and queue choose the queues pulled, keys (a finite set) are looked up in the
brokers' key index instead of pulling (:mod:`lakemq.jobs.live_index`), and rows are checked
after decoding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["DAY_MS", "Pushed", "day_number", "push_filters", "rows_where"]

DAY_MS = 86_400_000
_SETS = {"topic": "topics", "queue_id": "queue_ids", "tags": "tags", "keys": "keys"}


def _meet(current: frozenset[Any] | None, values: Iterable[Any]) -> frozenset[Any]:
    given = frozenset(values)
    return given if current is None else current & given


@dataclass(frozen=True, slots=True)
class Pushed:
    """The AND of the filters taken; None: that column is not restricted."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    tags: frozenset[str] | None = None
    keys: frozenset[str] | None = None  # the whole ``keys`` column, as Spark compares it
    ts_min: int | None = None  # store_timestamp bounds, inclusive
    ts_max: int | None = None

    def taken(self, name: str, values: Iterable[Any]) -> Pushed:
        field = _SETS[name]
        changes: dict[str, Any] = {field: _meet(getattr(self, field), values)}
        return replace(self, **changes)

    def at_least(self, ts: int) -> Pushed:
        return replace(self, ts_min=ts if self.ts_min is None else max(self.ts_min, ts))

    def at_most(self, ts: int) -> Pushed:
        return replace(self, ts_max=ts if self.ts_max is None else min(self.ts_max, ts))

    @property
    def subscription(self) -> str:
        """The pull's tag expression: the tags asked for, or every message."""
        return "*" if self.tags is None else " || ".join(sorted(self.tags)) or "*"

    @property
    def empty(self) -> bool:
        """True when no row can match (an empty set, or bounds that cross)."""
        sets = (self.topics, self.queue_ids, self.tags, self.keys)
        crossed = self.ts_min is not None and self.ts_max is not None and self.ts_min > self.ts_max
        return crossed or any(s is not None and not s for s in sets)

    @property
    def key_lookups(self) -> frozenset[str] | None:
        """What to ask a broker's key index so as to find every row whose ``keys`` is one of
        ``keys``: one key of each value (the index holds each space-separated key alone; the
        longest, likely the rarest). None when ``keys`` is not restricted or a value holds no
        key (a message without keys is in no index)."""
        if self.keys is None:
            return None
        asked = set()
        for value in self.keys:
            parts = [k for k in value.split(" ") if k]
            if not parts:
                return None
            asked.add(max(parts, key=len))
        return frozenset(asked)

    def wants_file(self, action: Mapping[str, Any]) -> bool:
        """Whether a lake data file (its flattened add action) may hold a matching row."""
        if self.topics is not None and action.get("partition.topic") not in self.topics:
            return False
        day = action.get("partition.store_date")
        days = day_number(day) if day is not None else None
        if days is not None and self.ts_min is not None and days < self.ts_min // DAY_MS:
            return False
        if days is not None and self.ts_max is not None and days > self.ts_max // DAY_MS:
            return False
        low, high = action.get("min.store_timestamp"), action.get("max.store_timestamp")
        if self.ts_min is not None and high is not None and high < self.ts_min:
            return False
        if self.ts_max is not None and low is not None and low > self.ts_max:
            return False
        if self.queue_ids is not None:
            qlow, qhigh = action.get("min.queue_id"), action.get("max.queue_id")
            if qlow is not None and qhigh is not None and not any(qlow <= q <= qhigh for q in self.queue_ids):
                return False
        return True

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of ``batch`` (``messages`` columns) that match."""
        masks = []
        for column, values in (("topic", self.topics), ("queue_id", self.queue_ids), ("tags", self.tags),
                               ("keys", self.keys)):
            if values is not None:
                masks.append(pc.is_in(batch.column(column), value_set=pa.array(sorted(values),
                                                                                batch.schema.field(column).type)))
        ts = batch.column("store_timestamp")
        if self.ts_min is not None:
            masks.append(pc.greater_equal(ts, self.ts_min))
        if self.ts_max is not None:
            masks.append(pc.less_equal(ts, self.ts_max))
        if not masks:
            return batch
        mask = masks[0]
        for more in masks[1:]:
            mask = pc.and_(mask, more)
        return rows_where(batch, pc.fill_null(mask, False))


def rows_where(batch: pa.RecordBatch, mask: pa.Array) -> pa.RecordBatch:
    """The rows of ``batch`` where ``mask`` is true; ``batch`` itself, not a copy of every body,
    when that is all of them (a read's usual case)."""
    return batch if pc.all(mask).as_py() and mask.null_count == 0 else batch.filter(mask)


def day_number(value: Any) -> int:
    """A store_date partition value (``2026-11-28``, or a date) as days since the epoch."""
    import datetime

    if isinstance(value, datetime.date):
        return (value - datetime.date(1970, 1, 1)).days
    return (datetime.date.fromisoformat(str(value)) - datetime.date(1970, 1, 1)).days


def push_filters(pushed: Pushed, filters: Iterable[Any]) -> tuple[Pushed, Iterator[Any]]:
    """Take the filters of ``filters`` (PySpark Filter objects) that :class:`Pushed` expresses;
    returns the new set and the filters left for Spark."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

    left = []
    for f in filters:
        name = f.attribute[0] if len(f.attribute) == 1 else None
        value: Any = getattr(f, "value", None)  # IsNull and IsNotNull have none
        if name in _SETS and isinstance(f, EqualTo) and value is not None:
            pushed = pushed.taken(name, [value])
        elif name in _SETS and isinstance(f, In) and None not in value:
            pushed = pushed.taken(name, value)
        elif name == "store_timestamp" and isinstance(value, int) and not isinstance(value, bool):
            if isinstance(f, EqualTo):
                pushed = pushed.at_least(value).at_most(value)
            elif isinstance(f, GreaterThan):
                pushed = pushed.at_least(value + 1)
            elif isinstance(f, GreaterThanOrEqual):
                pushed = pushed.at_least(value)
            elif isinstance(f, LessThan):
                pushed = pushed.at_most(value - 1)
            elif isinstance(f, LessThanOrEqual):
                pushed = pushed.at_most(value)
            else:
                left.append(f)
        else:
            left.append(f)
    return pushed, iter(left)
