"""What the pages show, fetched from the cluster (admin wire codes) and the lake (in a
thread pool). One instance per console process; it also drives the periodic sampler."""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lakemq.client.admin import Admin
from lakemq.client.message_id import message_id_kind
from lakemq.client.producer import Producer
from lakemq.client.pull_consumer import PullConsumer
from lakemq.client.results import PullStatus
from lakemq.common.compression import decompress_body
from lakemq.common.message import Message, MessageConst, MessageExt
from lakemq.common.message_queue import MessageQueue
from lakemq.common.record import create_message_id, encode_host
from lakemq.console.lake_view import (
    BrokerTiering,
    DeltaVersion,
    broker_tiering,
    delta_history,
    search_lake,
)
from lakemq.console.sampler import Sampler
from lakemq.errors import LakeMQError
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.tables import LakeMessage

__all__ = ["DLQ_PREFIX", "RETRY_PREFIX", "BrokerRow", "ConsoleData", "Counts", "Found", "GroupRow", "Searched", "TopicRow",
           "is_system_group"]

T = TypeVar("T")
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
CONSOLE_GROUP = "lakemq_console"
# Properties the broker sets on a stored record; a re-sent message gets fresh ones.
_BROKER_PROPERTIES = {MessageConst.RETRY_TOPIC, MessageConst.REAL_TOPIC, MessageConst.ORIGIN_MESSAGE_ID,
                      "REAL_QID", "MAX_OFFSET", "MIN_OFFSET", "CONSUME_START_TIME", "RECONSUME_TIME",
                      "DELAY", "UNIQ_KEY", "WAIT", "CLUSTER"}


@dataclass(frozen=True, slots=True)
class Found:
    """A message row from either tier, with its source."""
    source: str  # "hot", "lake" or "hot+lake"
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    unique_key: str
    tags: str
    keys: tuple[str, ...]
    store_timestamp: int
    born_timestamp: int
    store_host: str
    reconsume_times: int
    properties: dict[str, str]
    body: bytes

    @classmethod
    def hot(cls, m: MessageExt) -> Found:
        # Pulled messages carry the producer's id as msg_id; the console keys rows by the
        # offset message id (store host + CommitLog offset), as the lake does.
        offset_id = create_message_id(*encode_host(str(m.store_host)), m.commit_log_offset)
        return cls("hot", m.topic, m.queue_id, m.queue_offset, offset_id, m.unique_key or "", m.tags or "",
                   tuple(m.keys), m.store_timestamp, m.born_timestamp, str(m.store_host), m.reconsume_times,
                   dict(m.properties), m.body)

    @classmethod
    def lake(cls, m: LakeMessage) -> Found:
        return cls("lake", m.topic, m.queue_id, m.queue_offset, m.msg_id, m.uniq_key or "", m.tags or "", m.keys,
                   m.store_timestamp, m.born_timestamp, m.store_host, m.reconsume_times, m.properties,
                   decompress_body(m.body, m.sys_flag))


@dataclass(frozen=True, slots=True)
class Searched:
    """A search's rows (the newest matches, listed oldest first), notes on what could not be
    searched, and ``more`` when the limit cut older rows off."""
    rows: list[Found]
    notes: list[str]
    more: bool


@dataclass(frozen=True, slots=True)
class BrokerRow:
    cluster: str
    name: str
    addr: str
    runtime: dict[str, str]
    error: str = ""
    broker_id: int = 0  # 0: the master of its broker name, > 0 a slave

    @property
    def role(self) -> str:
        return self.runtime.get("brokerRole") or ("MASTER" if self.broker_id == 0 else "SLAVE")

    @property
    def replication(self) -> list[str]:
        """What the broker says of its replication: a master's slaves and how far behind
        each is, or a slave's link to its master."""
        r = self.runtime
        if self.role == "SLAVE":
            state = "connected" if r.get("haConnected") == "true" else "not connected"
            return [f"follows {r.get('haMasterAddress') or '(no master known)'}: {state}"]
        if "haConnectedSlaves" not in r:
            return []
        lines = [f"{r.get(f'haSlave{i}Addr')}: {int(r.get(f'haSlave{i}LagBytes', '0')):,} bytes, "
                 f"{float(r.get(f'haSlave{i}LagSeconds', '0')):.1f} s behind"
                 for i in range(int(r["haConnectedSlaves"]))]
        return lines or ["no slave connected"]


@dataclass(frozen=True, slots=True)
class Counts:
    topics: int
    system_topics: int
    groups: int
    system_groups: int


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    read_queues: int
    write_queues: int
    perm: int
    order: bool
    brokers: tuple[str, ...]
    messages: int | None = None
    tps: float | None = None


@dataclass(frozen=True, slots=True)
class GroupRow:
    name: str
    total_lag: int
    queues: list[tuple[str, int, int, int]] = field(default_factory=list)  # (queue, broker off, consumer off, lag)


class ConsoleData:
    def __init__(self, namesrv: str, lake: LakeLocation | None, *, store_dirs: dict[str, str] | None = None,
                 sample_interval_s: float = 5.0) -> None:
        self.namesrv = namesrv
        self.lake = lake
        self.store_dirs = dict(store_dirs or {})
        self.sample_interval_s = sample_interval_s
        self.admin = Admin(namesrv)
        self.sampler = Sampler()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="console-lake")
        self._puller = PullConsumer(CONSOLE_GROUP, namesrv_addr=namesrv)
        self._producer = Producer(CONSOLE_GROUP, namesrv_addr=namesrv)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._puller.start()
        await self._producer.start()
        self._task = asyncio.create_task(self.sampler.run(self.sample_interval_s, self.sample))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._producer.shutdown()
        await self._puller.shutdown()
        await self.admin.__aexit__()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    # -- cluster ---------------------------------------------------------------------------
    async def brokers(self) -> list[BrokerRow]:
        """Every registered broker, masters and slaves, by name then id."""
        info = await self.admin.cluster_info()
        owner = {b: c for c, names in (info.get("clusterAddrTable") or {}).items() for b in names}
        members = sorted((str(name), int(broker_id), str(addr))
                         for name, data in (info.get("brokerAddrTable") or {}).items()
                         for broker_id, addr in (data.get("brokerAddrs") or {}).items())

        async def one(name: str, broker_id: int, addr: str) -> BrokerRow:
            try:
                runtime = await self.admin.broker_runtime_info(addr)
                return BrokerRow(owner.get(name, ""), name, addr, runtime, broker_id=broker_id)
            except (LakeMQError, OSError) as exc:
                return BrokerRow(owner.get(name, ""), name, addr, {}, str(exc) or type(exc).__name__, broker_id)

        return list(await asyncio.gather(*(one(*member) for member in members)))

    async def _topic_configs(self) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]], set[str]]:
        """Every topic's config and brokers, and the system topics among them."""
        configs: dict[str, dict[str, Any]] = {}
        owners: dict[str, list[str]] = {}
        for name, addr in (await self.admin.masters()).items():
            for topic, cfg in (await self.admin.topic_configs(addr)).items():
                configs.setdefault(topic, cfg)
                owners.setdefault(topic, []).append(name)
        info = await self.admin.cluster_info()
        # Brokers create a topic named after themselves and their cluster: system topics too.
        own = set(info.get("brokerAddrTable") or {}) | set(info.get("clusterAddrTable") or {})
        return configs, owners, {t for t in configs if _is_system(t) or t in own}

    async def counts(self) -> Counts:
        """How many user and system topics and consumer groups the cluster has (the cluster
        page's cards; the Topics and Consumer lag pages list the same ones)."""
        (configs, _, system), groups = await asyncio.gather(self._topic_configs(), self.group_names(show_system=True))
        system_groups = sum(1 for g in groups if is_system_group(g))
        return Counts(len(configs) - len(system), len(system), len(groups) - system_groups, system_groups)

    async def topics(self, *, pattern: str = "", page: int = 1, per_page: int = 50,
                     show_system: bool = False) -> tuple[list[TopicRow], int]:
        """One page of topics (and how many match) with queue counts, message count and TPS."""
        configs, owners, system = await self._topic_configs()
        names = sorted(t for t in configs if show_system or t not in system)
        if pattern:
            glob = pattern if any(c in pattern for c in "*?[") else f"*{pattern}*"
            names = [t for t in names if fnmatch.fnmatchcase(t.lower(), glob.lower())]
        start = (max(page, 1) - 1) * per_page
        shown = names[start:start + per_page]
        counts = await asyncio.gather(*(self._message_count(t) for t in shown), return_exceptions=True)
        rows = []
        for topic, count in zip(shown, counts):
            cfg = configs[topic]
            messages = count if isinstance(count, int) else None
            rows.append(TopicRow(topic, int(cfg.get("readQueueNums", 0)), int(cfg.get("writeQueueNums", 0)),
                                 int(cfg.get("perm", 6)), bool(cfg.get("order", False)), tuple(owners[topic]),
                                 messages, self.sampler.tps(topic)))
        return rows, len(names)

    async def _message_count(self, topic: str) -> int:
        stats = await self.admin.topic_stats(topic)
        total = sum(s.max_offset for s in stats)
        self.sampler.record_count(topic, total)
        return total

    async def topic_config(self, topic: str) -> dict[str, Any] | None:
        for addr in (await self.admin.masters()).values():
            cfg = (await self.admin.topic_configs(addr)).get(topic)
            if cfg is not None:
                return cfg
        return None

    async def save_topic(self, topic: str, queues: int, perm: int, order: bool) -> list[str]:
        return await self.admin.create_topic(topic, queue_nums=queues, perm=perm, order=order)

    # -- consumer groups -------------------------------------------------------------------
    async def group_names(self, *, show_system: bool = False) -> list[str]:
        """The consumer groups, without the console's own; without RocketMQ's system groups
        unless ``show_system``."""
        names: set[str] = set()
        for addr in (await self.admin.masters()).values():
            names.update(await self.admin.subscription_groups(addr))
        return sorted(g for g in names if g != CONSOLE_GROUP and (show_system or not is_system_group(g)))

    async def group(self, group: str) -> GroupRow:
        rows = await self.admin.consumer_progress(group)
        queues = [(f"{r.mq.topic} · {r.mq.broker_name}:{r.mq.queue_id}", r.broker_offset, r.consumer_offset, r.lag)
                  for r in rows]
        return GroupRow(group, sum(q[3] for q in queues), queues)

    async def sample(self) -> None:
        """One sampling round: lag of every group with progress, counts of watched topics."""
        for name in await self.group_names(show_system=True):
            try:
                row = await self.group(name)
            except LakeMQError:
                continue  # a group without consume progress yet has no lag to chart
            if row.queues:
                self.sampler.record_lag(name, {q[0]: q[3] for q in row.queues})
        for topic in self.sampler.watched_topics():
            try:
                await self._message_count(topic)
            except LakeMQError:
                continue  # deleted since it was watched

    # -- messages --------------------------------------------------------------------------
    async def search(self, *, topic: str, key: str = "", msg_id: str = "", unique_key: str = "",
                     begin_ms: int = 0, end_ms: int | None = None, limit: int = 100,
                     hot_tier: bool = True) -> Searched:
        """Hot tier and lake results merged (hot wins on the same message id): the newest
        ``limit``, listed oldest first, ties in CommitLog order (``admin message query``'s
        rule), with notes about a tier that could not be searched, and whether ``limit`` cut
        them (each tier answers its newest ``limit`` + 1)."""
        end = end_ms if end_ms is not None else int(time.time() * 1000)
        notes: list[str] = []
        if msg_id and not unique_key and message_id_kind(msg_id) == "unique":
            notes.append(f"{msg_id} is a unique key (the id a producer gets back): searched as one")
            msg_id, unique_key = "", msg_id
        if unique_key and not topic and hot_tier:
            notes.append("hot tier not searched: a unique key is looked up in the brokers' IndexFiles with its topic")
        hot: list[Found] = []
        more = False
        try:
            if hot_tier:
                hot, more = await self._search_hot(topic, key, msg_id, unique_key, begin_ms, end, limit)
        except (LakeMQError, OSError) as exc:
            notes.append(f"hot tier not searched: {exc}")
        cold: list[Found] = []
        if self.lake is not None:
            try:
                found = await self.in_thread(search_lake, self.lake, topic=topic or None, key=key or None,
                                             msg_id=msg_id or None, unique_key=unique_key or None,
                                             begin_ms=begin_ms, end_ms=end, limit=limit + 1, newest=True)
                cold = [Found.lake(m) for m in found]
            except (LakeMQError, OSError) as exc:
                notes.append(f"lake not searched: {exc}")
        in_lake = {f.msg_id for f in cold}
        seen = {f.msg_id for f in hot}
        # A record still hot and already tiered shows once, marked as held by both tiers.
        merged = [dataclasses.replace(f, source="hot+lake") if f.msg_id in in_lake else f for f in hot]
        merged += [f for f in cold if f.msg_id not in seen]
        # The offset message id (store host, CommitLog offset) orders one broker's ties as stored.
        merged.sort(key=lambda f: (f.store_timestamp, f.msg_id))
        return Searched(merged[-limit:], notes, more or len(merged) > limit)

    async def _search_hot(self, topic: str, key: str, msg_id: str, unique_key: str, begin_ms: int, end_ms: int,
                          limit: int) -> tuple[list[Found], bool]:
        """The hot tier's newest ``limit`` matches and whether more matched."""
        if msg_id:
            try:
                return [Found.hot(await self.admin.view_message(msg_id))], False
            except LakeMQError:
                return [], False  # the record left the hot tier
        if not topic:
            return [], False
        if key or unique_key:
            found = await self.admin.query_message_limited(topic, key or unique_key, max_num=limit,
                                                           begin_ms=begin_ms, end_ms=end_ms,
                                                           unique_key=bool(unique_key))
            return [Found.hot(m) for m in found.messages], found.more or found.capped
        return await self._browse(topic, begin_ms, end_ms, limit)

    async def _browse(self, topic: str, begin_ms: int, end_ms: int, limit: int) -> tuple[list[Found], bool]:
        """The newest ``limit`` messages of ``topic`` stored in [begin_ms, end_ms], oldest first,
        and whether more were: each queue is pulled from the end of the range, whose offsets
        its store times follow."""
        out: list[Found] = []
        for mq in await self._puller.fetch_subscribe_message_queues(topic):
            low = await self._puller.search_offset(mq, begin_ms) if begin_ms else await self._puller.min_offset(mq)
            # The first offset stored after end_ms (the max offset when none was).
            high = await self._puller.search_offset(mq, end_ms + 1)
            start = max(low, high - (limit + 1))
            out.extend(f for f in await self._pull(mq, start, high - start)
                       if f.queue_offset < high and begin_ms <= f.store_timestamp <= end_ms)
        out.sort(key=lambda f: (f.store_timestamp, f.msg_id))
        return out[-limit:], len(out) > limit

    async def _pull(self, mq: MessageQueue, offset: int, limit: int) -> list[Found]:
        out: list[Found] = []
        while len(out) < limit:
            result = await self._puller.pull(mq, "*", offset, min(32, limit - len(out)))
            if result.pull_status != PullStatus.FOUND or not result.msgs:
                break
            out.extend(Found.hot(m) for m in result.msgs)
            offset = result.next_begin_offset
        return out

    async def message(self, msg_id: str, topic: str = "", source: str = "hot") -> Found | None:
        """One message by offset message id; ``source`` "lake" skips the hot tier."""
        found = await self.search(topic=topic, msg_id=msg_id, limit=1, hot_tier=source != "lake")
        return found.rows[0] if found.rows else None

    async def trace(self, msg: Found) -> list[Found]:
        """The message's retries and dead letter: records with its unique key in the
        %RETRY%/%DLQ% topics of every group, from both tiers."""
        if not msg.unique_key:
            return []
        rows: dict[str, Found] = {}
        # Asked of each broker directly: a retry or DLQ topic exists on the broker before the
        # name server has its route.
        for addr in (await self.admin.masters()).values():
            for topic in await self.admin.topic_configs(addr):
                if not topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
                    continue
                for m in await self.admin.api.query_message(addr, topic, msg.unique_key, max_num=64, begin_ms=0,
                                                            end_ms=2**63 - 1, unique_key=True):
                    found = Found.hot(m)
                    rows[found.msg_id] = found
        if self.lake is not None:
            for lm in await self.in_thread(search_lake, self.lake, unique_key=msg.unique_key, limit=200):
                if not lm.topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
                    continue
                # A record still hot and already tiered is held by both, as a search shows it.
                held = rows.get(lm.msg_id)
                rows[lm.msg_id] = dataclasses.replace(held, source="hot+lake") if held else Found.lake(lm)
        return sorted(rows.values(), key=lambda f: (f.store_timestamp, f.msg_id))

    # -- dead letters ----------------------------------------------------------------------
    async def dlq_topics(self) -> list[str]:
        return [t for t in await self.admin.list_topics() if t.startswith(DLQ_PREFIX)]

    async def dlq_messages(self, topic: str, limit: int = 50) -> tuple[list[Found], list[str]]:
        """The newest ``limit`` dead letters of ``topic``, newest first, from the queues' hot
        offsets and from the lake (dead letters whose CommitLog files were tiered and deleted
        are below the hot minimum offset; the lake still has them), with notes about a tier
        that could not be read."""
        hot: list[Found] = []
        notes: list[str] = []
        try:
            for mq in await self._puller.fetch_subscribe_message_queues(topic):
                low, high = await self._puller.min_offset(mq), await self._puller.max_offset(mq)
                hot.extend(await self._pull(mq, max(low, high - limit), limit))
        except (LakeMQError, OSError) as exc:
            notes.append(f"hot tier not read: {exc}")
        cold: list[Found] = []
        if self.lake is not None:
            try:
                found = await self.in_thread(search_lake, self.lake, topic=topic, limit=limit, newest=True)
                cold = [Found.lake(m) for m in found]
            except (LakeMQError, OSError) as exc:
                notes.append(f"lake not read: {exc}")
        in_lake = {f.msg_id for f in cold}
        seen = {f.msg_id for f in hot}
        merged = [dataclasses.replace(f, source="hot+lake") if f.msg_id in in_lake else f for f in hot]
        merged += [f for f in cold if f.msg_id not in seen]
        merged.sort(key=lambda f: (-f.store_timestamp, f.msg_id))
        return merged[:limit], notes

    async def resend(self, msg_id: str, topic: str = "") -> tuple[str, str]:
        """Send a dead letter again to the topic it was first sent to; (topic, new msg id). A
        dead letter no longer in the hot tier is read from the lake."""
        try:
            hot = await self.admin.view_message(msg_id)
            body, flag, properties = hot.body, hot.flag, dict(hot.properties)
        except LakeMQError:
            if self.lake is None:
                raise
            found = await self.in_thread(search_lake, self.lake, topic=topic or None, msg_id=msg_id, limit=1)
            if not found:
                raise LakeMQError(f"dead letter {msg_id} is in neither the hot tier nor the lake") from None
            body, flag, properties = found[0].body, 0, dict(found[0].properties)
        target = properties.get(MessageConst.RETRY_TOPIC) or properties.get(MessageConst.REAL_TOPIC)
        if not target:
            raise LakeMQError(f"message {msg_id} carries no original topic (RETRY_TOPIC)")
        props = {k: v for k, v in properties.items() if k not in _BROKER_PROPERTIES}
        props[MessageConst.ORIGIN_MESSAGE_ID] = msg_id
        result = await self._producer.send(Message(target, body, flag, props))
        return target, result.msg_id

    # -- lake ------------------------------------------------------------------------------
    async def tiering(self) -> tuple[list[BrokerTiering], list[DeltaVersion]]:
        if self.lake is None:
            return [], []
        brokers = []
        for row in await self.brokers():
            if row.broker_id != 0:
                continue  # a slave's CommitLog is its master's; the master's is tiered
            store = self.store_dirs.get(row.name) or row.runtime.get("storePathRootDir")
            brokers.append(await self.in_thread(broker_tiering, self.lake, row.name, store))
        return brokers, await self.in_thread(delta_history, self.lake)


# RocketMQ's own consumer groups (MixAll's, and the transaction check's).
_SYSTEM_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "__MONITOR_CONSUMER",
                            "CID_SYS_RMQ_TRANS", "CID_ONS-HTTP-PROXY"})


def is_system_group(group: str) -> bool:
    return group in _SYSTEM_GROUPS or group.startswith(("CID_RMQ_SYS_", "CID_ONSAPI_"))


def _is_system(topic: str) -> bool:
    return topic.startswith(("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC")) or topic in {
        "TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "BenchmarkTest"} or "_REPLY_TOPIC" in topic

