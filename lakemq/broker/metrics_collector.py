"""BrokerStateCollector: the broker's state gauges, computed when Prometheus scrapes.

Nothing here runs on the hot path: each scrape reads the store's in-memory tables (the
CommitLog's mapped files, the ConsumeQueue offsets, the committed consumer offsets, the
delay levels' progress, the held pulls). Scrapes run on the metrics HTTP thread, never on
the broker's event loop. With a ``lakeUri`` the tiering lag comes from the lake's manifest,
cached for a few seconds (:class:`lakemq.broker.tiering_lag.TieringLagProbe`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lakemq.broker.business_pool import BusinessPool
from lakemq.broker.consumer_offset_manager import TOPIC_GROUP_SEPARATOR, ConsumerOffsetManager
from lakemq.store.delay_levels import SCHEDULE_TOPIC
from lakemq.store.health import REFUSAL_REASONS
from lakemq.store.message_store import MessageStore

if TYPE_CHECKING:  # the tiering code (Delta, pyarrow) is imported only by brokers with a lakeUri
    from lakemq.broker.ha.progress import ReplicationProgress
    from lakemq.broker.ha.slave import HaClient
    from lakemq.broker.tiering_lag import TieringLag

__all__ = ["BrokerState", "BrokerStateCollector"]


@dataclass(frozen=True)
class BrokerState:
    """What the collector reads; ``store`` and ``held_pulls`` exist once the broker started."""

    broker: str
    store: Callable[[], MessageStore | None]
    offsets: ConsumerOffsetManager
    held_pulls: Callable[[], int]
    pools: tuple[BusinessPool, ...]
    transaction_checks: Callable[[], int]
    tiering_lag: Callable[[], TieringLag | None] | None = None  # None: no lakeUri configured
    replication: ReplicationProgress | None = None  # the slaves this broker feeds
    ha_client: Callable[[], HaClient | None] | None = None  # a slave's link to its master


class BrokerStateCollector(Collector):
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        s = self._state
        b = s.broker
        pools = CounterMetricFamily(
            "lakemq_broker_pool_rejections",
            "Requests refused with SYSTEM_BUSY by a business pool (queue full or waited too long).",
            labels=["broker", "pool"])
        for pool in s.pools:
            pools.add_metric([b, pool.name], pool.rejected)
        yield pools
        checks = CounterMetricFamily("lakemq_broker_transaction_checks",
                                     "CHECK_TRANSACTION_STATE requests sent to producers.", labels=["broker"])
        checks.add_metric([b], s.transaction_checks())
        yield checks
        held = GaugeMetricFamily("lakemq_broker_long_polling_holds", "Pull requests held by long polling.",
                                 labels=["broker"])
        held.add_metric([b], s.held_pulls())
        yield held
        store = s.store()
        if store is None:
            return
        yield from self._commit_log(b, store)
        yield from self._health(b, store)
        yield from self._queues(b, store)
        yield from self._replication(b)
        lag = s.tiering_lag() if s.tiering_lag is not None else None
        if lag is not None:
            for name, text, value in (
                ("lakemq_broker_tiering_lag_bytes", "CommitLog bytes not yet committed to the lake.", lag.lag_bytes),
                ("lakemq_broker_tiering_lag_seconds",
                 "Age of the oldest CommitLog message not yet committed to the lake (0 when none).",
                 lag.oldest_age_seconds),
                ("lakemq_broker_tiering_committed_offset_bytes",
                 "CommitLog offset up to which the lake holds every byte (the manifest's committed end).",
                 lag.committed_end),
            ):
                g = GaugeMetricFamily(name, text, labels=["broker"])
                g.add_metric([b], value)
                yield g

    def _replication(self, b: str) -> Iterator[Metric]:
        s = self._state
        if s.replication is not None:
            links = s.replication.snapshot()
            connected = GaugeMetricFamily("lakemq_broker_replication_slaves",
                                          "Slaves connected to this broker's HA listener.", labels=["broker"])
            connected.add_metric([b], len(links))
            yield connected
            families = (
                GaugeMetricFamily("lakemq_broker_replication_lag_bytes",
                                  "CommitLog bytes a slave has not acknowledged (max offset - its offset).",
                                  labels=["broker", "slave"]),
                GaugeMetricFamily("lakemq_broker_replication_lag_seconds",
                                  "Age of the oldest CommitLog byte a slave has not acknowledged (0: none).",
                                  labels=["broker", "slave"]),
                GaugeMetricFamily("lakemq_broker_replication_acked_offset_bytes",
                                  "The CommitLog offset a slave last acknowledged.", labels=["broker", "slave"]),
            )
            for link, lag_bytes, lag_seconds in links:
                for family, value in zip(families, (lag_bytes, lag_seconds, link.ack_offset), strict=True):
                    family.add_metric([b, link.addr], value)
            yield from families
        client = s.ha_client() if s.ha_client is not None else None
        if client is not None:
            up = GaugeMetricFamily("lakemq_broker_ha_master_connected",
                                   "1 while this slave's link to its master is open.", labels=["broker", "master"])
            up.add_metric([b, client.master_address], 1 if client.connected else 0)
            yield up
            received = CounterMetricFamily("lakemq_broker_ha_received_bytes",
                                           "CommitLog bytes this slave took from its master.", labels=["broker"])
            received.add_metric([b], client.received_bytes)
            yield received

    @staticmethod
    def _commit_log(b: str, store: MessageStore) -> Iterator[Metric]:
        files = store.commit_log.mapped_file_queue.mapped_files
        min_offset, max_offset = store.get_min_phy_offset(), store.get_max_phy_offset()
        for name, text, value in (
            ("lakemq_broker_commitlog_files", "CommitLog files on disk.", len(files)),
            ("lakemq_broker_commitlog_bytes", "CommitLog bytes between the min and max offsets.",
             max_offset - min_offset),
            ("lakemq_broker_commitlog_max_offset_bytes", "CommitLog max physical offset.", max_offset),
            ("lakemq_broker_dispatch_lag_bytes",
             "CommitLog bytes not yet dispatched to ConsumeQueues and indexes (max offset - reput offset).",
             store.dispatch_behind_bytes()),
            ("lakemq_broker_unflushed_bytes", "CommitLog bytes written but not yet flushed to disk.",
             store.commit_log.mapped_file_queue.remain_how_many_data_to_flush()),
        ):
            g = GaugeMetricFamily(name, text, labels=["broker"])
            g.add_metric([b], value)
            yield g

    @staticmethod
    def _health(b: str, store: MessageStore) -> Iterator[Metric]:
        health, clean = store.health, store.clean_service
        refusal = health.refusal
        for name, text, value in (
            ("lakemq_broker_disk_used_ratio", "Percent of the store's file system in use.", health.disk_used_ratio),
            ("lakemq_broker_disk_full", "1 while the disk is used above diskSpaceWarningLevelRatio (sends refused).",
             int(health.disk_full)),
            ("lakemq_broker_dispatch_failing", "1 while dispatch (ConsumeQueue and index building) fails.",
             int(health.dispatch_failure is not None)),
            ("lakemq_broker_sends_refused", "1 while the store refuses puts (disk full, dispatch failing or behind).",
             int(refusal is not None)),
        ):
            g = GaugeMetricFamily(name, text, labels=["broker"])
            g.add_metric([b], value)
            yield g
        failures = CounterMetricFamily("lakemq_broker_dispatch_failures", "Dispatch passes that failed.",
                                       labels=["broker"])
        failures.add_metric([b], health.dispatch_failures)
        yield failures
        refused = CounterMetricFamily("lakemq_broker_put_refusals",
                                      "Puts the store refused, by reason (disk_full, dispatch_failed, "
                                      "dispatch_behind).", labels=["broker", "reason"])
        for reason in REFUSAL_REASONS:
            refused.add_metric([b, reason], health.refused_puts[reason])
        yield refused
        deleted = CounterMetricFamily("lakemq_broker_commitlog_files_deleted",
                                      "CommitLog files deleted by the store's expiry, by reason (expired; forced: "
                                      "before fileReservedTime, on a nearly full disk or by hand).",
                                      labels=["broker", "reason"])
        for reason in ("expired", "forced"):
            deleted.add_metric([b, reason], clean.deleted_files[reason])
        yield deleted
        unconsumed = CounterMetricFamily("lakemq_broker_unconsumed_files_deleted",
                                         "CommitLog files deleted although they held messages a consumer group "
                                         "had not consumed.", labels=["broker"])
        unconsumed.add_metric([b], clean.unconsumed_files_deleted)
        yield unconsumed
        forced = CounterMetricFamily("lakemq_broker_forced_deleted_messages",
                                     "Messages in CommitLog files deleted before their fileReservedTime, by topic.",
                                     labels=["broker", "topic"])
        for topic, n in sorted(clean.forced_messages_deleted.items()):
            forced.add_metric([b, topic], n)
        yield forced
        lost = CounterMetricFamily("lakemq_broker_unconsumed_messages_deleted",
                                   "Messages deleted before a consumer group read them (after a forced deletion "
                                   "also those of topics no group has read), by topic.", labels=["broker", "topic"])
        for topic, n in sorted(clean.unconsumed_messages_deleted.items()):
            lost.add_metric([b, topic], n)
        yield lost

    def _queues(self, b: str, store: MessageStore) -> Iterator[Metric]:
        sizes = GaugeMetricFamily("lakemq_broker_consumequeue_messages",
                                  "Messages in a ConsumeQueue (max offset - min offset).",
                                  labels=["broker", "topic", "queue_id"])
        max_offsets: dict[tuple[str, int], int] = {}
        backlog = GaugeMetricFamily("lakemq_broker_delayed_backlog_messages",
                                    "Delayed messages not yet delivered, per delay level.",
                                    labels=["broker", "level"])
        delivered = store.schedule.offset_table
        for cq in store.consume_queues.all():
            lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
            max_offsets[(cq.topic, cq.queue_id)] = hi
            if cq.topic == SCHEDULE_TOPIC:
                level = cq.queue_id + 1
                backlog.add_metric([b, str(level)], max(0, hi - max(lo, delivered.get(level, 0))))
            else:
                sizes.add_metric([b, cq.topic, str(cq.queue_id)], hi - lo)
        yield sizes
        yield backlog
        timers = GaugeMetricFamily("lakemq_broker_timer_waiting_messages",
                                   "Timer messages waiting for their delivery time (docs/TIMER.md).",
                                   labels=["broker"])
        timers.add_metric([b], store.timer.waiting)
        yield timers
        lag = GaugeMetricFamily("lakemq_broker_consumer_lag_messages",
                                "Messages a group has not consumed (queue max offset - committed offset).",
                                labels=["broker", "group", "topic", "queue_id"])
        for key, queues in self._state.offsets.encode()["offsetTable"].items():
            topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            for queue_id, offset in queues.items():
                max_offset = max_offsets.get((topic, int(queue_id)))
                if max_offset is not None:
                    lag.add_metric([b, group, topic, str(queue_id)], max(0, max_offset - offset))
        yield lag
