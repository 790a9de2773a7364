"""The main job end to end on embedded defaults.

It starts a NameServer and a broker, produces and consumes, tiers the CommitLog into a local
Delta lake and queries it with Spark SQL. ``lakemq demo`` (scripts/demo.sh) runs it. Each
step checks its own outcome: a message lost anywhere fails the demo.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    SyncProducer,
    SyncPushConsumer,
)
from lakemq.errors import DemoError
from lakemq.launcher import start_cluster

__all__ = ["DEMO_GROUP", "DEMO_TOPIC", "DemoResult", "run_demo"]

DEMO_TOPIC = "DemoTopic"
DEMO_GROUP = "DemoConsumerGroup"
TAGS = ("TagA", "TagB", "TagC")
# Small CommitLog files so a few thousand messages fill and seal several segments.
DEMO_BROKER_CONF = {"mappedFileSizeCommitLog": str(1 << 20)}

Progress = Callable[[str, int, int], None]


@dataclass
class DemoResult:
    produced: int = 0
    consumed: int = 0
    lake_rows: int = 0
    queries: list[tuple[str, str, list[str], list[tuple[Any, ...]]]] = field(default_factory=list)


def _produce(namesrv: str, count: int, body_size: int, progress: Progress) -> None:
    with SyncProducer("DemoProducerGroup", namesrv_addr=namesrv) as producer:
        producer.create_topic(DEMO_TOPIC, 4)
        body = b"x" * body_size
        batch = 32
        for start in range(0, count, batch):
            msgs = []
            for i in range(start, min(start + batch, count)):
                msg = Message(DEMO_TOPIC, body)
                msg.keys = [f"order-{i}"]
                msg.tags = TAGS[i % len(TAGS)]
                msgs.append(msg)
            producer.send_batch(msgs)
            progress("produce", min(start + batch, count), count)


def _consume(namesrv: str, count: int, timeout_s: float, progress: Progress) -> int:
    seen: set[str] = set()
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs: list[Any], _context: Any) -> ConsumeConcurrentlyStatus:
        with lock:
            seen.update(m.keys[0] for m in msgs)
            if len(seen) >= count:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    config = ConsumerConfig(consumer_group=DEMO_GROUP,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer = SyncPushConsumer(DEMO_GROUP, namesrv_addr=namesrv, config=config)
    consumer.subscribe(DEMO_TOPIC, "*")
    consumer.register_message_listener_concurrently(listener)
    with consumer:
        deadline = time.monotonic() + timeout_s
        while not done.wait(0.2):
            progress("consume", len(seen), count)
            if time.monotonic() > deadline:
                break
    progress("consume", len(seen), count)
    return len(seen)


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Spark's JVM inherits this process's stderr when it starts. Pointed at ``path``
    meanwhile, what the JVM prints for its operator (log4j's WARN lines, its own notices)
    goes to the demo's log instead of between the demo's progress bars."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with path.open("ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def run_demo(work_dir: Path, *, messages: int = 5000, body_size: int = 1024, progress: Progress,
             master: str | None = None) -> DemoResult:
    from lakemq.jobs.session import build_session
    from lakemq.jobs.sql import run_sql
    from lakemq.jobs.tier_run import tier_run
    from lakemq.tiering.config import TieringConfig

    result = DemoResult(produced=messages)
    cluster_dir = work_dir / "cluster"
    with start_cluster(cluster_dir, broker_conf=DEMO_BROKER_CONF) as cluster:
        _produce(cluster.namesrv_addr, messages, body_size, progress)
        result.consumed = _consume(cluster.namesrv_addr, messages, 120.0, progress)
    if result.consumed != messages:
        raise DemoError(f"consumed {result.consumed} distinct messages of {messages}")

    lake = str(work_dir / "lake")
    # The broker has stopped, so its last file is idle: seal it at once.
    tiering = TieringConfig(lake_uri=lake, tier_seal_idle_ms=1, tier_boundary_stride=256 << 10)
    spark_log = work_dir / "logs" / "spark.log"
    spark_log.parent.mkdir(parents=True, exist_ok=True)
    with _stderr_to(spark_log):
        spark = build_session(master=master, app_name="lakemq-demo")
    try:
        tier_run(spark, store_dir=cluster_dir / "broker-a" / "store", broker_name="broker-a",
                 config=tiering, progress=progress)
        queries = [
            ("messages per tag", (f"SELECT tags, count(*) AS messages, sum(length(body)) AS body_bytes FROM messages "
                                  f"WHERE topic = '{DEMO_TOPIC}' GROUP BY tags ORDER BY tags")),
            ("look-up by key", (f"SELECT topic, queue_id, queue_offset, tags, keys, msg_id FROM messages "
                                f"WHERE topic = '{DEMO_TOPIC}' AND keys = 'order-42'")),
        ]
        for title, query in queries:
            df = run_sql(spark, lake, query)
            result.queries.append((title, query, df.columns, [tuple(r) for r in df.collect()]))
        result.lake_rows = run_sql(
            spark, lake, f"SELECT count(*) FROM messages WHERE topic = '{DEMO_TOPIC}'").collect()[0][0]
    finally:
        spark.stop()
    if result.lake_rows != messages:
        raise DemoError(f"the lake holds {result.lake_rows} rows of {DEMO_TOPIC}, expected {messages}")
    per_tag = {row[0]: row[1] for row in result.queries[0][3]}
    expected = {tag: len(range(i, messages, len(TAGS))) for i, tag in enumerate(TAGS)}
    if per_tag != expected:
        raise DemoError(f"messages per tag in the lake {per_tag}, expected {expected}")
    return result
