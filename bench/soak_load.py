"""The soak's load and its ledger (bench/soak.py runs them): steady producers of plain, delayed
and transactional messages, a group consuming throughout and a group whose consumers come and
go, the tier runs, and the audit that reads every queue back from offset 0 (the hot tier
through the broker, below it the lake's table).

Every message carries its own key (``p{producer}-{seq}``); the ledger keeps the keys the broker
acknowledged (a transactional one once committed), the keys each group consumed (how often),
and the keys the audit found, so bench/soak.py can say which acknowledged message was lost.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakemq.client import (
    ClientConfig,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    LocalTransactionState,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
    TransactionProducer,
)
from lakemq.errors import LakeMQError
from lakemq.launcher import lakemq_command

__all__ = ["CHURN", "STEADY", "TOPIC", "Ledger", "Load", "TierRuns", "audit", "churning_consumers", "produce", "steady_consumer", "tier_runs"]

TOPIC = "soak"
STEADY, CHURN = "soak_steady", "soak_churn"
KIND = "soak_kind"  # property: plain | delayed | tx-commit | tx-rollback
BODY_PAD = b"x" * 1000


@dataclass
class Ledger:
    acked: dict[str, str] = field(default_factory=dict)  # key -> kind, once acknowledged (committed)
    rolled_back: set[str] = field(default_factory=set)
    consumed: dict[str, collections.Counter[str]] = field(
        default_factory=lambda: {STEADY: collections.Counter(), CHURN: collections.Counter()})
    send_failures: int = 0
    latencies_ms: list[float] = field(default_factory=list)  # plain and delayed sends since the last sample
    lock: threading.Lock = field(default_factory=threading.Lock)  # listeners run on worker threads

    def take_latencies(self) -> list[float]:
        with self.lock:
            taken, self.latencies_ms = self.latencies_ms, []
        return taken

    def consumed_by(self, group: str, msgs: list[MessageExt]) -> None:
        with self.lock:
            for msg in msgs:
                if msg.keys:
                    self.consumed[group][msg.keys[0]] += 1


@dataclass(frozen=True)
class Load:
    namesrv: str
    rate: float  # messages per second over all producers
    producers: int
    churn_s: float  # how often the churning group gains or loses a consumer
    tier_interval_s: float
    tier_command: tuple[str, ...]
    tier_log_dir: Path  # the tier runs' LAKEMQ_LOG_DIR


class _Transactions:
    """Commits or rolls back as the message's kind says, then and when checked back."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return self.check_local_transaction(msg)

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        if msg.properties.get(KIND) == "tx-commit":
            return LocalTransactionState.COMMIT_MESSAGE
        return LocalTransactionState.ROLLBACK_MESSAGE


def _kind(seq: int) -> str:
    """One message in ten delayed (level 1: 1 s), one in ten transactional (a quarter rolled back)."""
    slot = seq % 10
    if slot == 3:
        return "delayed"
    if slot == 7:
        return "tx-rollback" if seq % 40 == 7 else "tx-commit"
    return "plain"


async def produce(load: Load, ledger: Ledger, index: int, stop: asyncio.Event) -> None:
    """One producer at ``rate / producers`` messages a second on a fixed schedule (a late send
    does not shift the ones after it), until ``stop``."""
    interval = load.producers / load.rate
    async with Producer(f"soak_p{index}", namesrv_addr=load.namesrv) as plain, \
            TransactionProducer(f"soak_tx{index}", _Transactions(), namesrv_addr=load.namesrv) as tx:
        start = time.monotonic()
        for seq in itertools.count():
            if stop.is_set():
                return
            delay = start + seq * interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            kind, key = _kind(seq), f"p{index}-{seq}"
            msg = Message(TOPIC, key.encode() + b":" + BODY_PAD, properties={KIND: kind})
            msg.keys = key
            try:
                if kind.startswith("tx-"):
                    outcome = await tx.send_message_in_transaction(msg)
                    ok = outcome.send_status is SendStatus.SEND_OK
                    committed = outcome.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
                    with ledger.lock:
                        if ok and committed:
                            ledger.acked[key] = kind
                        elif ok:
                            ledger.rolled_back.add(key)
                    continue
                if kind == "delayed":
                    msg.delay_time_level = 1
                sent = time.monotonic()
                result = await plain.send(msg)
                latency = (time.monotonic() - sent) * 1000
                with ledger.lock:
                    ledger.latencies_ms.append(latency)
                    if result.send_status is SendStatus.SEND_OK:
                        ledger.acked[key] = kind
                    else:
                        ledger.send_failures += 1
            except (LakeMQError, OSError, TimeoutError):  # unacknowledged: counted, never in the ledger
                with ledger.lock:
                    ledger.send_failures += 1


def _consumer(load: Load, ledger: Ledger, group: str, instance: str) -> PushConsumer:
    config = ConsumerConfig(consumer_group=group, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer = PushConsumer(group, config=config,
                            client_config=ClientConfig(namesrv_addr=load.namesrv, instance_name=instance))
    consumer.subscribe(TOPIC, "*")

    def listener(msgs: list[MessageExt], _ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        ledger.consumed_by(group, msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    return consumer


async def steady_consumer(load: Load, ledger: Ledger, stop: asyncio.Event) -> None:
    consumer = _consumer(load, ledger, STEADY, "soak-steady")
    await consumer.start()
    await stop.wait()
    await consumer.shutdown()


async def churning_consumers(load: Load, ledger: Ledger, stop: asyncio.Event) -> int:
    """Between one and three consumers of CHURN: every ``churn_s`` one joins (up to three) or
    the oldest leaves (down to one), so queues move between them; returns the changes made."""
    running: collections.deque[PushConsumer] = collections.deque()
    changes = 0
    for n in itertools.count():
        if len(running) < 3 and (n % 5 < 3 or len(running) < 2):
            consumer = _consumer(load, ledger, CHURN, f"soak-churn-{n}")
            await consumer.start()
            running.append(consumer)
        else:
            await running.popleft().shutdown()
        changes += 1
        try:
            await asyncio.wait_for(stop.wait(), load.churn_s)
        except TimeoutError:
            continue
        break
    for consumer in running:
        await consumer.shutdown()
    return changes


@dataclass
class TierRuns:
    seconds: list[float] = field(default_factory=list)
    failures: int = 0
    last_error: str = ""  # the end of a failed run's output


async def tier_runs(load: Load, runs: TierRuns, stop: asyncio.Event) -> None:
    """``lakemq tier run`` (a process of its own) every ``tier_interval_s`` until ``stop``."""
    while True:
        try:
            await asyncio.wait_for(stop.wait(), load.tier_interval_s)
            return
        except TimeoutError:
            pass
        started = time.monotonic()
        load.tier_log_dir.mkdir(parents=True, exist_ok=True)
        # Its output and progress lines (each step as it begins, timestamped) say where a slow
        # run spent its time; a failed run's last lines are its error.
        record = load.tier_log_dir / "tier-runs.out"
        with record.open("ab") as out:
            began_at = out.tell()
            proc = await asyncio.create_subprocess_exec(
                *lakemq_command(*load.tier_command), stdout=out, stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, "LAKEMQ_LOG_DIR": str(load.tier_log_dir)})
            await proc.wait()
        runs.seconds.append(time.monotonic() - started)
        if proc.returncode != 0:
            runs.failures += 1
            with record.open("rb") as written:
                written.seek(began_at)
                runs.last_error = written.read().decode(errors="replace")[-2000:]


def lake_keys_below(lake: Path, lows: dict[int, int]) -> collections.Counter[str]:
    """The keys of the lake's rows of the topic below each queue's first hot offset, read from
    the Delta table itself (delta-rs): the part of the audit the hot tier no longer holds."""
    from lakemq.tiering.lake_fs import LakeLocation
    from lakemq.tiering.table_files import table_dataset
    from lakemq.tiering.tables import DATA_SCHEMA, MESSAGES_TABLE

    found: collections.Counter[str] = collections.Counter()
    if not lows or max(lows.values()) <= 0:
        return found
    dataset = table_dataset(LakeLocation.of(str(lake)), MESSAGES_TABLE, DATA_SCHEMA,
                            lambda add: add["partition.topic"] == TOPIC)
    if dataset is None:
        return found
    rows = dataset.to_table(columns=["queue_id", "queue_offset", "keys"]).to_pydict()
    for queue_id, offset, keys in zip(rows["queue_id"], rows["queue_offset"], rows["keys"]):
        if keys and offset < lows.get(queue_id, 0):
            found[keys.split()[0]] += 1
    return found


async def audit(namesrv: str, lake: Path) -> tuple[collections.Counter[str], int]:
    """Every key stored in the topic: a new group reads every queue from its first hot offset
    to its end, and the lake's own table gives the rows below it (the broker's cold read of
    1.3 million messages block by block took an hour; reading the table takes seconds). Also
    the lowest first offset of a queue (above 0: retention deleted files the lake now serves)."""
    found: collections.Counter[str] = collections.Counter()
    lows: dict[int, int] = {}
    async with PullConsumer("soak_audit", namesrv_addr=namesrv) as consumer:
        for mq in sorted(await consumer.fetch_subscribe_message_queues(TOPIC)):
            low, high = await consumer.min_offset(mq), await consumer.max_offset(mq)
            lows[mq.queue_id] = low
            offset, stalls = low, 0
            while offset < high:
                result = await consumer.pull(mq, "*", offset, 32)
                if result.pull_status is not PullStatus.FOUND or result.next_begin_offset <= offset:
                    stalls += 1  # a pull that met a file retention just removed: read again
                    if stalls > 50:
                        raise RuntimeError(f"the audit is stuck at {mq} offset {offset}: {result.pull_status}")
                    await asyncio.sleep(0.1)
                    continue
                stalls = 0
                found.update(m.keys[0] for m in result.msgs if m.keys)
                offset = result.next_begin_offset
    found.update(await asyncio.to_thread(lake_keys_below, lake, lows))
    return found, min(lows.values(), default=-1)
