"""Planning a read of the live lake: one cut across the Delta table and the brokers' hot tails.

The cut is made of one pinned Delta snapshot (version ``v``) and, per (broker, queue), the
queue offsets past what that snapshot holds up to the broker's max offset when the read was
planned. Every tier commit of a broker sets the app transaction ``(broker, range end)`` and
ranges are committed oldest first, so snapshot ``v`` holds exactly that broker's records
below ``E = transaction_version(broker)`` at ``v``: a pulled record belongs to the hot side
when its CommitLog offset is at or past ``E``. That test, not a queue offset, decides each
record, so a tier run committing the very range being read cannot make a row appear twice
or not at all. Where each queue's pull starts is only a saving: the queue ends recorded by
the commits up to ``v`` (``lakemq.queueEnds`` in their commit info) are at most where the
lake's part of the queue ends; a queue with none recorded starts at the broker's min offset.

Everything here runs where Spark plans the read (a Python worker on the driver) or in the
``lakemq sql`` driver; the brokers are asked through lakemq's own client
(:mod:`lakemq.client.sync`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lakemq.client.admin import Admin
from lakemq.client.sync import SyncPullConsumer, background_loop
from lakemq.common.config import read_properties
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import BrokerError, ConfigError, LakeError, LakeMQError, RemotingError, TopicNotExistError
from lakemq.jobs.live_filters import Pushed, day_number
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.seal import QueueEnds, merge_queue_ends
from lakemq.tiering.tables import MESSAGES_TABLE, META_BROKER, META_QUEUE_ENDS

__all__ = ["READER_GROUP", "HotSpan", "LakeCut", "LakeFile", "LiveOptions", "StaleBroker", "hot_spans", "lake_cut",
           "stale_note"]

log = logging.getLogger(__name__)

# The consumer group the source's pulls name (brokers create it on first use; no offsets kept).
READER_GROUP = "lakemq_live_reader"


def _flag(options: Mapping[str, str], name: str) -> bool:
    return str(options.get(name, "false")).lower() == "true"


@dataclass(frozen=True, slots=True)
class LiveOptions:
    """The source's options; ``conf`` (a broker.conf) gives ``namesrvAddr`` and ``lakeUri``
    when ``namesrv`` or ``lake`` are not given."""

    namesrv: str
    lake: LakeLocation
    topic: str | None
    allow_stale: bool

    @classmethod
    def of(cls, given: Mapping[str, str]) -> LiveOptions:
        options = {key.lower(): value for key, value in given.items()}  # Spark's options ignore case
        conf = read_properties(options["conf"]) if options.get("conf") else {}
        namesrv = options.get("namesrv") or conf.get("namesrvAddr", "")
        lake = options.get("lake") or conf.get("lakeUri", "")
        if not namesrv:
            raise ConfigError("the lakemq source needs option 'namesrv' (or 'conf', a broker.conf with namesrvAddr)")
        if not lake:
            raise ConfigError("the lakemq source needs option 'lake' (or 'conf', a broker.conf with lakeUri)")
        storage = json.loads(options.get("storage_options") or "{}")
        return cls(namesrv, LakeLocation.of(lake, storage), options.get("topic") or None,
                   _flag(options, "allowstalehottail"))


@dataclass(frozen=True, slots=True)
class LakeFile:
    """One data file of the pinned snapshot, with its partition values."""

    path: str  # relative to the table's root
    topic: str
    store_date: int  # days since the epoch
    min_queue_offset: int | None = None  # the file's statistics, where Delta kept them
    max_queue_offset: int | None = None


@dataclass(frozen=True, slots=True)
class LakeCut:
    """The pinned snapshot: its files, and per broker what it holds."""

    version: int | None  # None: the lake has no messages table yet
    files: tuple[LakeFile, ...] = ()
    commitlog_ends: dict[str, int] = field(default_factory=dict)  # broker -> E (app transaction)
    queue_ends: dict[str, QueueEnds] = field(default_factory=dict)  # broker -> recorded queue ends
    last_commit_ms: dict[str, int] = field(default_factory=dict)  # broker -> its newest commit's time


def lake_cut(lake: LakeLocation, pushed: Pushed) -> LakeCut:
    """Pin the latest version of ``messages`` and read from that one snapshot its files (those
    ``pushed`` may match) and each broker's CommitLog end and recorded queue ends."""
    from deltalake import DeltaTable

    uri = lake.table_uri(MESSAGES_TABLE)
    if not DeltaTable.is_deltatable(uri, storage_options=lake.delta_options()):
        return LakeCut(None)
    table = DeltaTable(uri, storage_options=lake.delta_options())
    version = table.version()
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    if any(v is not None for a in actions for k, v in a.items() if k.startswith("deletion_vector")):
        raise LakeError(f"{uri} has deletion vectors, which the lakemq source does not read; "
                        "query messages_lake (the Delta table alone) instead")
    # Add-action paths are URIs: escaped partition directories (%RETRY%, %DLQ%) are escaped again.
    files = tuple(
        LakeFile(urllib.parse.unquote(a["path"]), str(a["partition.topic"]), day_number(a["partition.store_date"]),
                 a.get("min.queue_offset"), a.get("max.queue_offset"))
        for a in actions if pushed.wants_file(a)
    )
    queue_ends: dict[str, QueueEnds] = {}
    last: dict[str, int] = {}
    for commit in table.history():
        broker = commit.get(META_BROKER)
        if broker is None or int(commit["version"]) > version:
            continue
        last[broker] = max(last.get(broker, 0), int(commit.get("timestamp", 0)))
        merge_queue_ends(queue_ends.setdefault(broker, {}), json.loads(commit.get(META_QUEUE_ENDS) or "{}"))
    ends = {b: e for b in last if (e := table.transaction_version(b)) is not None}
    return LakeCut(version, files, ends, queue_ends, last)


@dataclass(frozen=True, slots=True)
class HotSpan:
    """Queue offsets [start, end) of one queue to pull; rows below CommitLog offset
    ``lake_end`` are the lake's and are left out."""

    broker: str
    topic: str
    queue_id: int
    start: int
    end: int
    lake_end: int


@dataclass(frozen=True, slots=True)
class StaleBroker:
    """A broker whose hot tail could not be read when the read was planned."""

    broker: str
    addr: str | None
    reason: str
    last_commit_ms: int | None  # its newest commit in the pinned snapshot

    def line(self, now_ms: int) -> str:
        where = f"broker {self.broker}" + (f" ({self.addr})" if self.addr else "")
        if self.last_commit_ms is None:
            behind = "the lake holds none of its messages"
        else:
            behind = f"the lake has its messages up to {(now_ms - self.last_commit_ms) / 1000:.0f} s ago"
        return f"{where}: {self.reason}; {behind}"


def _call(coro: Any) -> Any:
    return asyncio.run_coroutine_threadsafe(coro, background_loop()).result(30)


async def _cluster(namesrv: str, list_topics: bool) -> tuple[set[str], list[str]]:
    """The broker names registered with the name server (any member up), and its topics."""
    async with Admin(namesrv) as admin:
        info = await admin.cluster_info()
        registered = {name for name, data in (info.get("brokerAddrTable") or {}).items() if data.get("brokerAddrs")}
        return registered, (await admin.list_topics() if list_topics else [])


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def hot_spans(options: LiveOptions, cut: LakeCut, pushed: Pushed) -> tuple[list[HotSpan], list[StaleBroker]]:
    """Each queue's range past the cut, up to its max offset now; and the brokers that could
    not be asked. Raises LakeError naming the first such broker unless ``allowStaleHotTail``."""
    try:
        registered, listed = _call(_cluster(options.namesrv, options.topic is None))
    except (RemotingError, BrokerError, TimeoutError) as exc:
        raise LakeError(f"the hot tail is unavailable: name server {options.namesrv} is unreachable "
                        f"({_one_line(exc)})") from exc
    # The lake's topics too: a topic whose brokers are all gone is no longer listed.
    held = {topic for ends in cut.queue_ends.values() for topic in ends}
    topics = [options.topic] if options.topic else sorted(set(listed) | held)
    if pushed.topics is not None:
        topics = [t for t in topics if t in pushed.topics]
    spans: list[HotSpan] = []
    stale: dict[str, StaleBroker] = {}
    with SyncPullConsumer(READER_GROUP, namesrv_addr=options.namesrv) as consumer:
        instance = consumer.consumer.core.instance
        for topic in topics:
            try:
                queues = consumer.fetch_subscribe_message_queues(topic)
            except TopicNotExistError:
                continue
            except (RemotingError, BrokerError) as exc:
                raise LakeError(f"the hot tail is unavailable: cannot read the route of {topic} from "
                                f"{options.namesrv} ({_one_line(exc)})") from exc
            except LakeMQError:
                continue  # no broker serves the topic now (the lake may hold it still)
            for mq in sorted(queues):
                if mq.broker_name in stale or (pushed.queue_ids is not None and mq.queue_id not in pushed.queue_ids):
                    continue
                try:
                    span = _span(consumer, mq, cut)
                except (RemotingError, BrokerError, LakeMQError) as exc:
                    stale[mq.broker_name] = StaleBroker(mq.broker_name, instance.find_broker_addr(
                        mq.broker_name, master_only=False), f"unreachable ({_one_line(exc)})",
                        cut.last_commit_ms.get(mq.broker_name))
                    continue
                if span is not None:
                    spans.append(span)
    for broker, ends in cut.queue_ends.items():
        # A broker whose processes are gone drops out of the routes: the lake says it served these topics.
        if broker not in registered and broker not in stale and any(t in ends for t in topics):
            stale[broker] = StaleBroker(broker, None, "not registered with the name server",
                                        cut.last_commit_ms.get(broker))
    if stale and not options.allow_stale:
        first = next(iter(stale.values()))
        raise LakeError(f"the hot tail is unavailable: {first.line(int(time.time() * 1000))} "
                        "(option allowStaleHotTail=true answers from the lake alone)")
    spans = [s for s in spans if s.broker not in stale]
    return spans, list(stale.values())


def _span(consumer: SyncPullConsumer, mq: MessageQueue, cut: LakeCut) -> HotSpan | None:
    end = consumer.max_offset(mq)
    recorded = cut.queue_ends.get(mq.broker_name, {}).get(mq.topic, {}).get(str(mq.queue_id))
    start = int(recorded) if recorded is not None else consumer.min_offset(mq)
    if start >= end:
        return None
    return HotSpan(mq.broker_name, mq.topic, mq.queue_id, start, end, cut.commitlog_ends.get(mq.broker_name, -1))


def stale_note(stale: list[StaleBroker]) -> str:
    """One line saying which brokers' tails a stale answer lacks and how far behind it is."""
    now = int(time.time() * 1000)
    return "answered from the lake alone for " + "; ".join(s.line(now) for s in stale)

