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
Brokers of one topic share the table and repeat each other's queue offsets, so the cut also
carries each broker's store hosts (``lakemq.storeHosts`` of its commits): a stream's lake part
of a (broker, queue) range takes only rows of those hosts.

Everything here runs where Spark plans the read (a Python worker on the driver) or in the
``lakemq sql`` driver; the brokers are asked through lakemq's own client
(:mod:`lakemq.client.sync`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lakemq.client.client_api import MQClientAPI
from lakemq.client.pull_consumer import PullConsumer
from lakemq.client.sync import background_loop
from lakemq.common.config import read_properties
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import BrokerError, ConfigError, LakeError, LakeMQError, RemotingError, TopicNotExistError
from lakemq.jobs.key_index import indexed_offsets
from lakemq.jobs.live_clients import drop_client, kept_client
from lakemq.jobs.live_filters import Pushed, day_number
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import commit_hosts
from lakemq.tiering.seal import QueueEnds, merge_queue_ends
from lakemq.tiering.table_files import holds_offset, snapshot_actions
from lakemq.tiering.tables import MESSAGES_TABLE, META_BROKER, META_QUEUE_ENDS

__all__ = ["HotSpan", "LakeCut", "LakeFile", "LiveOptions", "StaleBroker", "hot_spans", "lake_cut",
           "stale_note"]

log = logging.getLogger(__name__)

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
    key_index: bool = True  # option keyIndex: keys looked up in the brokers' index and the lake's message_keys

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
                   _flag(options, "allowstalehottail"), str(options.get("keyindex", "true")).lower() != "false")


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
    # broker -> the store hosts its commits record: which lake rows are its (offsets overlap across brokers)
    store_hosts: dict[str, frozenset[str]] = field(default_factory=dict)
    hostless: frozenset[str] = frozenset()  # brokers with commits from before store hosts were recorded


@dataclass(frozen=True, slots=True)
class _Pinned:
    """What one version of ``messages`` says, kept per table in the process: a stream plans
    twice a trigger and a lake's history grows with every tier run, so an unchanged version
    is not read again, and a new one reads only the commits since."""

    table: Any  # deltalake.DeltaTable, at ``version``
    version: int
    actions: list[dict[str, Any]]
    queue_ends: dict[str, QueueEnds]
    last_commit_ms: dict[str, int]
    commitlog_ends: dict[str, int]
    store_hosts: dict[str, frozenset[str]]
    hostless: frozenset[str]


_PINNED: dict[str, _Pinned] = {}
_PINNED_LOCK = threading.Lock()


def _pin(table: Any, since: _Pinned | None) -> _Pinned:
    """``table``'s current version read whole, or from ``since`` by the commits after it."""
    version = table.version()
    actions = snapshot_actions(table)
    queue_ends: dict[str, QueueEnds] = {} if since is None else json.loads(json.dumps(since.queue_ends))
    last = {} if since is None else dict(since.last_commit_ms)
    hosts = {} if since is None else {b: set(h) for b, h in since.store_hosts.items()}
    hostless = set() if since is None else set(since.hostless)
    commits = table.history(None if since is None else version - since.version)
    if since is not None and not set(range(since.version + 1, version + 1)) <= {int(c["version"]) for c in commits}:
        return _pin(table, None)  # the newest commits did not come back: read the whole history
    for commit in commits:
        broker = commit.get(META_BROKER)
        number = int(commit["version"])
        if broker is None or number > version or (since is not None and number <= since.version):
            continue
        last[broker] = max(last.get(broker, 0), int(commit.get("timestamp", 0)))
        merge_queue_ends(queue_ends.setdefault(broker, {}), json.loads(commit.get(META_QUEUE_ENDS) or "{}"))
        recorded = commit_hosts(commit)
        if recorded is None:
            hostless.add(broker)
        else:
            hosts.setdefault(broker, set()).update(recorded)
    ends = {b: e for b in last if (e := table.transaction_version(b)) is not None}
    return _Pinned(table, version, actions, queue_ends, last, ends, {b: frozenset(h) for b, h in hosts.items()},
                   frozenset(hostless))


def _latest(lake: LakeLocation, uri: str) -> _Pinned | None:
    from deltalake import DeltaTable

    with _PINNED_LOCK:
        pinned = _PINNED.get(uri)
        if pinned is not None:
            try:
                pinned.table.update_incremental()
            except Exception as exc:  # noqa: BLE001 - deltalake's errors have no common base; read afresh
                log.debug("reading %s afresh: %s", uri, exc)
                pinned = None
            else:
                if pinned.table.version() != pinned.version:
                    # A version that went back (the table made again) is read whole.
                    pinned = _pin(pinned.table, pinned if pinned.table.version() > pinned.version else None)
        if pinned is None:
            _PINNED.pop(uri, None)
            if not DeltaTable.is_deltatable(uri, storage_options=lake.delta_options()):
                return None
            pinned = _pin(DeltaTable(uri, storage_options=lake.delta_options()), None)
        _PINNED[uri] = pinned
        return pinned


def lake_cut(lake: LakeLocation, pushed: Pushed, *, key_index: bool = False) -> LakeCut:
    """Pin the latest version of ``messages`` and read from that one snapshot its files (those
    ``pushed`` may match) and each broker's CommitLog end and recorded queue ends. With
    ``key_index``, a read restricted to keys keeps only the files holding the offsets the lake's
    ``message_keys`` lists for them (read after the pin, so it covers the snapshot)."""
    uri = lake.table_uri(MESSAGES_TABLE)
    pinned = _latest(lake, uri)
    if pinned is None:
        return LakeCut(None)
    lookups = pushed.key_lookups if key_index else None
    offsets = indexed_offsets(lake, pushed.topics, lookups) if lookups else None
    if any(v is not None for a in pinned.actions for k, v in a.items() if k.startswith("deletion_vector")):
        raise LakeError(f"{uri} has deletion vectors, which the lakemq source does not read; "
                        "query messages_lake (the Delta table alone) instead")
    # Add-action paths are URIs: escaped partition directories (%RETRY%, %DLQ%) are escaped again.
    files = tuple(
        LakeFile(urllib.parse.unquote(a["path"]), str(a["partition.topic"]), day_number(a["partition.store_date"]),
                 a.get("min.queue_offset"), a.get("max.queue_offset"))
        for a in pinned.actions if pushed.wants_file(a) and (offsets is None or holds_offset(a, offsets))
    )
    return LakeCut(pinned.version, files, dict(pinned.commitlog_ends), json.loads(json.dumps(pinned.queue_ends)),
                   dict(pinned.last_commit_ms), dict(pinned.store_hosts), pinned.hostless)


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


async def _cluster(api: MQClientAPI, list_topics: bool) -> tuple[set[str], list[str]]:
    """The broker names registered with the name server (any member up), and its topics."""
    info = await api.get_broker_cluster_info()
    registered = {name for name, data in (info.get("brokerAddrTable") or {}).items() if data.get("brokerAddrs")}
    return registered, (await api.get_all_topic_list() if list_topics else [])


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


async def _routes(consumer: PullConsumer, namesrv: str, topics: list[str]) -> dict[str, list[MessageQueue]]:
    """Each topic's readable queues now, asked of the name server at once; a topic it does not
    know or no broker serves is left out (the lake may hold it still)."""
    answers = await asyncio.gather(*(consumer.fetch_subscribe_message_queues(t) for t in topics),
                                   return_exceptions=True)
    routes: dict[str, list[MessageQueue]] = {}
    for topic, answer in zip(topics, answers, strict=True):
        if isinstance(answer, TopicNotExistError):
            continue
        if isinstance(answer, RemotingError | BrokerError):
            raise LakeError(f"the hot tail is unavailable: cannot read the route of {topic} from "
                            f"{namesrv} ({_one_line(answer)})") from answer
        if isinstance(answer, LakeMQError):
            continue
        if isinstance(answer, BaseException):
            raise answer
        routes[topic] = answer
    return routes


async def _broker_offsets(consumer: PullConsumer, broker: str, topic: str,
                          queues: list[MessageQueue]) -> dict[MessageQueue, tuple[int, int]]:
    """(min, max) offset of each of ``queues`` (one topic on one broker): one topic-stats
    request; a queue it leaves out (more read queues than write queues) is asked on its own."""
    instance = consumer.core.instance
    addr = await instance.broker_addr(broker, topic, master_only=False)
    stats = await instance.api.get_topic_stats(addr, topic)
    for mq in queues:
        if mq not in stats:
            stats[mq] = (await instance.api.get_min_offset(addr, mq), await instance.api.get_max_offset(addr, mq))
    return stats


async def _offsets(consumer: PullConsumer, queues: list[MessageQueue]
                   ) -> dict[tuple[str, str], dict[MessageQueue, tuple[int, int]] | BaseException]:
    """Per (broker, topic), its queues' (min, max) offsets or why they could not be read; every
    broker asked at once."""
    groups: dict[tuple[str, str], list[MessageQueue]] = {}
    for mq in queues:
        groups.setdefault((mq.broker_name, mq.topic), []).append(mq)
    answers = await asyncio.gather(*(_broker_offsets(consumer, b, t, q) for (b, t), q in groups.items()),
                                   return_exceptions=True)
    return dict(zip(groups, answers, strict=True))


def hot_spans(options: LiveOptions, cut: LakeCut, pushed: Pushed) -> tuple[list[HotSpan], list[StaleBroker]]:
    """Each queue's range past the cut, up to its max offset now; and the brokers that could
    not be asked. Raises LakeError naming the first such broker unless ``allowStaleHotTail``.

    The process's kept client (:mod:`lakemq.jobs.live_clients`) asks: the name server once for
    the brokers and once per topic for its route, then each broker once per topic for every
    queue's offsets (GET_TOPIC_STATS_INFO), all brokers at once."""
    client = kept_client(options.namesrv)
    try:
        return _hot_spans(client.consumer, options, cut, pushed)
    except BaseException:
        drop_client(options.namesrv, client)
        raise


def _hot_spans(consumer: PullConsumer, options: LiveOptions, cut: LakeCut,
               pushed: Pushed) -> tuple[list[HotSpan], list[StaleBroker]]:
    try:
        registered, listed = _call(_cluster(consumer.core.instance.api, options.topic is None))
    except (RemotingError, BrokerError, TimeoutError) as exc:
        raise LakeError(f"the hot tail is unavailable: name server {options.namesrv} is unreachable "
                        f"({_one_line(exc)})") from exc
    # The lake's topics too: a topic whose brokers are all gone is no longer listed.
    held = {topic for ends in cut.queue_ends.values() for topic in ends}
    topics = [options.topic] if options.topic else sorted(set(listed) | held)
    if pushed.topics is not None:
        topics = [t for t in topics if t in pushed.topics]
    routes: dict[str, list[MessageQueue]] = _call(_routes(consumer, options.namesrv, topics))
    wanted = [mq for topic in topics for mq in sorted(routes.get(topic, []))
              if pushed.queue_ids is None or mq.queue_id in pushed.queue_ids]
    offsets = _call(_offsets(consumer, wanted))
    spans: list[HotSpan] = []
    stale: dict[str, StaleBroker] = {}
    for mq in wanted:
        answer = offsets[(mq.broker_name, mq.topic)]
        if mq.broker_name in stale:
            continue
        if isinstance(answer, RemotingError | BrokerError | LakeMQError):
            stale[mq.broker_name] = StaleBroker(mq.broker_name, consumer.core.instance.find_broker_addr(
                mq.broker_name, master_only=False), f"unreachable ({_one_line(answer)})",
                cut.last_commit_ms.get(mq.broker_name))
            continue
        if isinstance(answer, BaseException):
            raise answer
        span = _span(mq, answer[mq], cut)
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


def _span(mq: MessageQueue, offsets: tuple[int, int], cut: LakeCut) -> HotSpan | None:
    least, end = offsets
    recorded = cut.queue_ends.get(mq.broker_name, {}).get(mq.topic, {}).get(str(mq.queue_id))
    start = int(recorded) if recorded is not None else least
    if start >= end:
        return None
    return HotSpan(mq.broker_name, mq.topic, mq.queue_id, start, end, cut.commitlog_ends.get(mq.broker_name, -1))


def stale_note(stale: list[StaleBroker]) -> str:
    """One line saying which brokers' tails a stale answer lacks and how far behind it is."""
    now = int(time.time() * 1000)
    return "answered from the lake alone for " + "; ".join(s.line(now) for s in stale)

