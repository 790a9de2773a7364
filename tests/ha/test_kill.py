"""kill -9 of a master under load from several producers, cycle after cycle: which messages
its producers were told SEND_OK are in the slave's CommitLog at that moment (read from the
slave's files while the master is dead). A SYNC_MASTER loses none; an ASYNC_MASTER's slave
misses what it had not been sent yet (the figures are printed, ``-s``)."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from lakemq.client import Message, Producer, ProducerConfig, SendStatus
from lakemq.client.admin import Admin
from lakemq.errors import LakeMQError
from tests.client.client_helpers import unique
from tests.cluster import Cluster, start_cluster
from tests.ha.ha_helpers import add_pair, commit_log_dir, runtime, slave_name, unique_keys, wait_for

PRODUCERS = 4


@dataclass
class Load:
    acked: set[str] = field(default_factory=set)  # UNIQ_KEYs answered SEND_OK
    failed: int = 0  # sends that raised (the master was down)
    other: dict[str, int] = field(default_factory=dict)  # answers neither SEND_OK nor an error


async def _produce(producer: Producer, topic: str, load: Load, index: int) -> None:
    n = 0
    while True:
        n += 1
        try:
            result = await producer.send(Message(topic, b"p%d-%d-" % (index, n) + b"k" * 300))
        except (LakeMQError, OSError):
            load.failed += 1
            await asyncio.sleep(0.05)
            continue
        if result.send_status is SendStatus.SEND_OK:
            load.acked.add(result.msg_id)
        else:
            load.other[result.send_status.name] = load.other.get(result.send_status.name, 0) + 1


async def _master_has_slave(cluster: Cluster) -> bool:
    with contextlib.suppress(LakeMQError, OSError):
        info = await runtime(cluster.broker_addr("broker-a"), cluster.namesrv_addr)
        return info.get("haConnectedSlaves") == "1"
    return False


async def kill_cycles(root: Path, role: str, cycles: int, per_cycle: int = 150) -> tuple[list[int], list[int], Load]:
    """Run ``cycles`` kill -9 / restart cycles of broker-a under load; per cycle the count of
    SEND_OK messages missing on the slave at the kill, and the count acked by then."""
    missing: list[int] = []
    acked: list[int] = []
    load = Load()
    with start_cluster(root, brokers=()) as cluster:
        add_pair(cluster, role=role)
        ns, topic = cluster.namesrv_addr, unique("Kill")
        async with Admin(ns) as admin:
            await admin.create_topic(topic, queue_nums=4)
        config = ProducerConfig(send_msg_timeout=2000, retry_times_when_send_failed=0)
        producers = [Producer(unique("pg"), namesrv_addr=ns, config=config) for _ in range(PRODUCERS)]
        for p in producers:
            await p.start()
        tasks = [asyncio.create_task(_produce(p, topic, load, i)) for i, p in enumerate(producers)]
        slave_log = commit_log_dir(cluster, slave_name("broker-a"))
        try:
            for _ in range(cycles):
                target = len(load.acked) + per_cycle
                await wait_for(lambda: len(load.acked) >= target, timeout=60, what="sends")  # noqa: B023
                cluster.kill_broker("broker-a")
                await asyncio.sleep(0.3)  # answers already on the wire are read: they were acknowledged
                snapshot = set(load.acked)
                on_slave = set(unique_keys(slave_log))
                missing.append(len(snapshot - on_slave))
                acked.append(len(snapshot))
                cluster.start_broker("broker-a")
                deadline = time.monotonic() + 30
                while not await _master_has_slave(cluster):
                    assert time.monotonic() < deadline, "the slave did not reconnect"
                    await asyncio.sleep(0.1)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for p in producers:
                await p.shutdown()
        # The master lost nothing it acknowledged (kill -9 keeps the page cache); after the
        # last restart its slave has it all.
        await wait_for(lambda: not load.acked - set(unique_keys(slave_log)), timeout=60,
                       what="the slave holding every acknowledged message")
    return missing, acked, load


async def test_async_master_kill_9_what_the_slave_misses(tmp_path: Path) -> None:
    cycles = 5
    missing, acked, load = await kill_cycles(tmp_path, "ASYNC_MASTER", cycles)
    print(f"\nASYNC_MASTER, {cycles} kill -9 cycles, {PRODUCERS} producers: SEND_OK messages missing on the slave "
          f"at each kill: {missing} (mean {statistics.mean(missing):.1f}, max {max(missing)}) of {acked[-1]} "
          f"acknowledged in all; {load.failed} sends failed while the master was down")
    assert len(missing) == cycles and all(m <= a for m, a in zip(missing, acked, strict=True))


async def test_sync_master_kill_9_loses_no_acknowledged_message(tmp_path: Path) -> None:
    cycles = 20
    started = time.monotonic()
    missing, acked, load = await kill_cycles(tmp_path, "SYNC_MASTER", cycles)
    print(f"\nSYNC_MASTER, {cycles} kill -9 cycles in {time.monotonic() - started:.0f} s, {PRODUCERS} producers: "
          f"{acked[-1]} SEND_OK, missing on the slave at the kills: {missing}; other answers {load.other}")
    assert missing == [0] * cycles
