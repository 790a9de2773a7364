"""Find messages in the lake by key or unique key: the lake half of ``lakemq admin message query``.

The hot tier answers with its IndexFiles; history that hot retention has deleted lives only in
the ``messages`` table, read here with ``format("delta")``, found through ``message_keys``,
the lake's IndexFile (:mod:`lakemq.jobs.key_index`), in two steps as RocketMQ's own look-up:

1. the places (store host, CommitLog offset) of the key in ``message_keys``, read on the
   driver (:mod:`lakemq.tiering.table_files`): the Delta log's statistics leave the files whose
   key range holds the key, and the files are sorted by key, so Parquet's statistics leave one
   row group of each. This step reads a few rows; as a Spark query it cost 0.5 to 1 s of
   planning and Delta's file-skipping job on local[2], read directly 0.1 to 0.2 s;
2. the rows at those offsets in ``messages``: Delta's file statistics on ``commitlog_offset``
   leave the files that hold them, and Parquet's the row groups.

Where the index answers and its places lie in a few ``messages`` files (the usual look-up),
step 2 is read on the driver too (:func:`find_messages_on_driver`): no Spark is started or
asked, and ``admin message query --lake`` answers in about the time of its own start. Otherwise
the reads are Spark SQL (:mod:`lakemq.jobs.lake_sql`), so they run alike on a Spark here and on
the lake service.

Both steps prune by the ``topic`` partition and the time range too. A unique key whose
``messages`` files Delta's statistics narrow to one or two (the usual case: a producer's unique
keys grow with time) is read from them directly, one query instead of two. A lake whose index was
never filled (tiered before the index existed, until its next compaction fills it) is
searched the slow way, every ``keys`` or ``uniq_key`` value of the topic.

``KEYS`` holds space-separated keys; a key matches when it is one of them: equal, a prefix
followed by a space, a suffix after a space, or between spaces.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakemq.errors import LakeError
from lakemq.jobs.key_index import index_complete
from lakemq.jobs.lake_sql import delta_table, sql_session, sql_string
from lakemq.jobs.lake_tables import table_exists
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.table_files import add_actions, holds_offset, table_dataset
from lakemq.tiering.tables import (
    DATA_SCHEMA,
    KEY_TYPE_KEY,
    KEY_TYPE_UNIQ,
    KEYS_DATA_SCHEMA,
    KEYS_TABLE,
    LAKE_MESSAGE_COLUMNS,
    MESSAGES_TABLE,
    LakeMessage,
)

if TYPE_CHECKING:
    from lakemq.jobs.lake_sql import SqlSession

__all__ = ["LAKE_MESSAGE_ORDER", "find_messages", "find_messages_on_driver", "key_matches"]

_DAY_MS = 86_400_000
# A unique key whose files Delta's statistics narrow to this many is read straight from
# ``messages`` (one Spark query instead of two): a producer's unique keys grow with time.
_DIRECT_FILES = 2
# A look-up whose places lie in at most this many ``messages`` files is read on the driver,
# without Spark (find_messages_on_driver).
_DRIVER_FILES = 8
# The order of a result: store time, then CommitLog order (one CommitLog per store host).
LAKE_MESSAGE_ORDER = ("store_timestamp", "store_host", "commitlog_offset")


def _day(ms: int) -> datetime.date:
    return datetime.date(1970, 1, 1) + datetime.timedelta(days=ms // _DAY_MS)


def key_matches(keys: str, key: str) -> str:
    """A SQL condition: whether the space-separated column ``keys`` holds ``key`` (a key never
    holds a space)."""
    if " " in key or not key:
        return "false"
    return (f"({keys} = {sql_string(key)} OR startswith({keys}, {sql_string(key + ' ')}) "
            f"OR endswith({keys}, {sql_string(' ' + key)}) OR contains({keys}, {sql_string(' ' + key + ' ')}))")


def _places(lake: LakeLocation, topic: str, key: str, key_type: str, begin_ms: int, end_ms: int | None,
            limit: int) -> set[tuple[str, int]]:
    """The newest ``limit`` (store host, CommitLog offset) of ``key`` in ``message_keys``, by
    (store time, store host, CommitLog offset), read on the driver: Delta's statistics pick the
    files, Parquet's the row groups."""
    import pyarrow.compute as pc

    def may_hold(add: Mapping[str, Any]) -> bool:
        low, high = add.get("min.key"), add.get("max.key")
        first, last = add.get("min.store_timestamp"), add.get("max.store_timestamp")
        return (add["partition.topic"] == topic and (low is None or low <= key) and (high is None or key <= high)
                and (last is None or last >= begin_ms) and (end_ms is None or first is None or first <= end_ms))

    data = table_dataset(lake, KEYS_TABLE, KEYS_DATA_SCHEMA, may_hold)
    if data is None:
        return set()
    cond = (pc.field("key") == key) & (pc.field("key_type") == key_type) & (pc.field("store_timestamp") >= begin_ms)
    if end_ms is not None:
        cond &= pc.field("store_timestamp") <= end_ms
    found = data.to_table(columns=["store_timestamp", "store_host", "commitlog_offset"], filter=cond).to_pydict()
    # A key is indexed once per message (twice only after a rare race of two fills): a set.
    rows = sorted(set(zip(found["store_timestamp"], found["store_host"], found["commitlog_offset"], strict=True)))
    return {(host, offset) for _, host, offset in rows[-limit:]}


def _files_by_statistics(lake: LakeLocation, topic: str, unique_key: str) -> int:
    """How many ``messages`` files of ``topic`` Delta's statistics leave for ``unique_key``
    (read from the log on the driver, no Spark job)."""
    def may_hold(add: Mapping[str, Any]) -> bool:
        low, high = add.get("min.uniq_key"), add.get("max.uniq_key")
        return (add["partition.topic"] == topic and (low is None or low <= unique_key)
                and (high is None or unique_key <= high))

    return sum(1 for add in add_actions(lake, MESSAGES_TABLE) if may_hold(add))


def _lake_to_search(lake_uri: str, key: str | None, unique_key: str | None, limit: int,
                    storage_options: Mapping[str, str] | None) -> LakeLocation | None:
    """The lake a look-up reads; None when it can find nothing (no limit, no table)."""
    if (key is None) == (unique_key is None):
        raise ValueError("give exactly one of key and unique_key")
    lake = LakeLocation.of(lake_uri, storage_options)
    return lake if limit > 0 and table_exists(lake, MESSAGES_TABLE) else None


def find_messages_on_driver(
    lake_uri: str, *, topic: str, key: str | None = None, unique_key: str | None = None, begin_ms: int = 0,
    end_ms: int | None = None, limit: int = 64, storage_options: Mapping[str, str] | None = None,
) -> list[LakeMessage] | None:
    """What :func:`find_messages` answers, read on the driver with delta-rs and pyarrow, or None
    when that needs Spark: the index is not complete (the slow way scans every value), the
    places lie in more than ``_DRIVER_FILES`` files, or the snapshot has deletion vectors (which
    only Spark applies). A look-up reads a few rows: here tens of milliseconds, where a Spark
    query costs a driver's start or a round trip to the lake service and its planning."""
    from deltalake.exceptions import DeltaError

    lake = _lake_to_search(lake_uri, key, unique_key, limit, storage_options)
    if lake is None:
        return []
    if not index_complete(lake):
        return None
    if unique_key is None and (" " in str(key) or not key):
        return []
    try:
        return _read_on_driver(lake, topic, unique_key if unique_key is not None else str(key),
                               KEY_TYPE_UNIQ if unique_key is not None else KEY_TYPE_KEY, begin_ms, end_ms, limit)
    except (OSError, pa.ArrowException, DeltaError) as exc:
        raise LakeError(f"reading {lake.table_uri(MESSAGES_TABLE)}: {exc}") from exc


def _read_on_driver(lake: LakeLocation, topic: str, key: str, key_type: str, begin_ms: int, end_ms: int | None,
                    limit: int) -> list[LakeMessage] | None:
    import pyarrow.compute as pc

    places = _places(lake, topic, key, key_type, begin_ms, end_ms, limit)
    if not places:
        return []
    offsets = sorted({offset for _, offset in places})
    actions = add_actions(lake, MESSAGES_TABLE)
    if any(v is not None for a in actions for k, v in a.items() if k.startswith("deletion_vector")):
        return None

    def keep(add: Mapping[str, Any]) -> bool:
        return bool(add["partition.topic"] == topic and holds_offset(add, offsets))

    if sum(1 for add in actions if keep(add)) > _DRIVER_FILES:
        return None
    data = table_dataset(lake, MESSAGES_TABLE, DATA_SCHEMA, keep, actions)
    fetched = [] if data is None else data.to_table(
        columns=list(LAKE_MESSAGE_COLUMNS), filter=pc.field("commitlog_offset").isin(offsets)).to_pylist()
    found = sorted((r for r in fetched if (r["store_host"], r["commitlog_offset"]) in places),
                   key=lambda r: tuple(r[c] for c in LAKE_MESSAGE_ORDER))
    return [LakeMessage.from_row(topic, r) for r in found]


def find_messages(
    spark: SqlSession | Any, lake_uri: str, *, topic: str, key: str | None = None, unique_key: str | None = None,
    begin_ms: int = 0, end_ms: int | None = None, limit: int = 64,
    storage_options: Mapping[str, str] | None = None,
) -> list[LakeMessage]:
    """Messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``unique_key``),
    stored in ``[begin_ms, end_ms]``: the newest ``limit`` of them, listed oldest first, in
    (store time, store host, CommitLog offset) order, as a broker's IndexFile answers (newest
    first, up to its limit). ``spark``: a SparkSession or a :class:`SqlSession`."""
    lake = _lake_to_search(lake_uri, key, unique_key, limit, storage_options)
    if lake is None:
        return []
    session = sql_session(spark)
    cond = [f"topic = {sql_string(topic)}", f"store_date >= DATE'{_day(max(begin_ms, 0)).isoformat()}'"]
    if end_ms is not None:
        cond.append(f"store_date <= DATE'{_day(end_ms).isoformat()}'")
    stored = [f"store_timestamp >= {int(begin_ms)}"] + ([f"store_timestamp <= {int(end_ms)}"] if end_ms is not None
                                                        else [])
    columns = ", ".join(LAKE_MESSAGE_COLUMNS)
    messages = delta_table(session, lake, MESSAGES_TABLE)
    direct = unique_key is not None and _files_by_statistics(lake, topic, unique_key) <= _DIRECT_FILES
    if direct or not index_complete(lake):
        match = f"uniq_key = {sql_string(unique_key)}" if unique_key is not None else key_matches("keys", str(key))
        newest = ", ".join(f"{c} DESC" for c in LAKE_MESSAGE_ORDER)
        rows = session.sql(f"SELECT {columns} FROM {messages} WHERE {' AND '.join([*cond, *stored, match])} "
                           f"ORDER BY {newest} LIMIT {int(limit)}").to_pylist()
        return [LakeMessage.from_row(topic, r) for r in reversed(rows)]
    if unique_key is None and (" " in str(key) or not key):
        return []
    places = _places(lake, topic, unique_key if unique_key is not None else str(key),
                     KEY_TYPE_UNIQ if unique_key is not None else KEY_TYPE_KEY, begin_ms, end_ms, limit)
    if not places:
        return []
    offsets = ", ".join(str(offset) for offset in sorted({offset for _, offset in places}))
    fetched = session.sql(f"SELECT {columns} FROM {messages} "
                          f"WHERE {' AND '.join(cond)} AND commitlog_offset IN ({offsets})").to_pylist()
    found = sorted((r for r in fetched if (r["store_host"], r["commitlog_offset"]) in places),
                   key=lambda r: tuple(r[c] for c in LAKE_MESSAGE_ORDER))
    return [LakeMessage.from_row(topic, r) for r in found]
