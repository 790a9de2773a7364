"""Power cuts under a real broker: its store on a lazyfs mount, 4 producers and 2 consumer
groups on loopback; at a random moment the broker is killed with SIGKILL and the power cut
(tests/powercut/lazyfs.py), then the broker restarts on what the disk held and the checks run.

After every cut (docs/DURABILITY.md):

- every acknowledged message is read back intact at its queue offset (SYNC_FLUSH); under
  ASYNC_FLUSH the acknowledged messages lost are only a tail of the CommitLog, sent within
  the flush settings' window before the kill, never one in the middle;
- every message a queue holds is one a producer sent, whole (no record half visible), and its
  queue offsets run without a hole;
- every topic whose creation was acknowledged exists, and every consumer group a pull was
  answered for (the broker persists an auto-created group before it answers);
- no consumer offset runs backwards from what an earlier recovery found, and none points past
  its queue's end (SYNC_FLUSH).

``python -m tests.powercut.broker_cuts --cuts 100`` (scripts/powercut.sh) runs the long
version; tests/powercut/test_broker_power_cut.py a smoke of a few cuts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lakemq.client import ClientConfig
from lakemq.client.admin import Admin
from lakemq.client.producer import Producer
from lakemq.client.pull_consumer import PullConsumer
from lakemq.client.results import PullStatus, SendStatus
from lakemq.common.message import Message
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import LakeMQError
from lakemq.launcher import Cluster
from tests.powercut.mount import LazyMount

__all__ = ["CutReport", "run_power_cuts"]

BROKER = "broker-a"
SLAVE = "broker-a-s"
FAST_HA = {"haSendHeartbeatInterval": "1000", "haHousekeepingInterval": "4000", "registerNameServerPeriod": "2000"}
TOPIC = "PowerCut"
QUEUES = 4
PRODUCERS = 4
GROUPS = ("PowerCutG1", "PowerCutG2")
FLUSH_INTERVAL_MS = 200  # ASYNC_FLUSH's flushIntervalCommitLog here
THOROUGH_MS = 2000  # flushCommitLogThoroughInterval: everything is flushed at least this often


def broker_conf(flush: str) -> dict[str, str]:
    """Small files so that cuts land during CommitLog and ConsumeQueue rolls as well."""
    return {
        "flushDiskType": flush,
        "mappedFileSizeCommitLog": str(256 << 10),
        "mappedFileSizeConsumeQueue": str(300 * 20),
        "maxHashSlotNum": "500",
        "maxIndexNum": "2000",
        "flushIntervalCommitLog": str(FLUSH_INTERVAL_MS),
        "flushCommitLogThoroughInterval": str(THOROUGH_MS),
        "flushConsumerOffsetInterval": "200",
        "autoCreateTopicEnable": "false",
    }


def body_for(round_id: int, producer: int, seq: int) -> bytes:
    head = f"{round_id}:{producer}:{seq}:".encode()
    return head + bytes([(round_id * 7 + producer * 31 + seq) % 251]) * ((seq * 7919) % 900)


def _parse_body(body: bytes) -> tuple[int, int, int] | None:
    parts = body.split(b":", 3)
    if len(parts) != 4:
        return None
    try:
        return int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError:
        return None


@dataclass(slots=True)
class Acked:
    queue_id: int
    queue_offset: int
    body: bytes
    acked_at: float  # monotonic


@dataclass
class CutReport:
    cuts: int = 0
    acked: int = 0  # acknowledged sends, all cuts
    lost_async: int = 0  # acknowledged, lost under ASYNC_FLUSH (within its window)
    messages_checked: int = 0
    topics_created: int = 0
    pending_files_dropped: int = 0
    torn_bytes: int = 0
    offsets_checked: int = 0
    slave_checks: int = 0  # cuts after which the slave caught up and matched the master
    slave_ahead: int = 0  # cuts after which the slave held more than the recovered master
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return json.dumps({k: v for k, v in self.__dict__.items() if k != "failures"}
                          | {"failures": len(self.failures)})


class PowerCutRun:
    def __init__(self, root: Path, flush: str, seed: int, log: Callable[[str], None], *, slave: bool = False,
                 cut: str = "all") -> None:
        self.root, self.flush, self.log = root, flush, log
        # "all": the cut takes every machine; "master": the master's alone, its slave runs on.
        self.cut = cut
        slave = slave or cut == "master"
        self.rng = random.Random(seed)
        self.mount = LazyMount(root / "backing", root / "mnt", root / "lazyfs.log")
        # A SYNC_MASTER's slave on a second mount (a second machine): the cut takes both.
        self.slave_mount = LazyMount(root / "backing-s", root / "mnt-s", root / "lazyfs-s.log") if slave else None
        self.cluster = Cluster(root / "cluster")
        self.ledger: dict[int, dict[int, Acked]] = {q: {} for q in range(QUEUES)}  # queue -> offset -> sent
        self.topics: list[str] = []
        self.groups_known: set[str] = set()
        self.offsets: dict[tuple[str, int], int] = {}
        self.verified_end = dict.fromkeys(range(QUEUES), 0)  # each queue read and checked below this
        self.report = CutReport()

    # -- the cluster ----------------------------------------------------------------------------

    def _mounts(self) -> list[tuple[str, LazyMount]]:
        pair = [(SLAVE, self.slave_mount)] if self.slave_mount is not None else []
        return [(BROKER, self.mount), *pair]

    def start(self) -> None:
        for name, mount in self._mounts():
            mount.mount()
            store = self.root / "cluster" / name / "store"
            store.parent.mkdir(parents=True, exist_ok=True)
            store.symlink_to(mount.mountpoint)
        self.cluster.start_namesrv()
        if self.slave_mount is None:
            self.cluster.add_broker(BROKER, broker_conf(self.flush))
            return
        self.cluster.add_broker(BROKER, {**broker_conf(self.flush), **FAST_HA, "brokerRole": "SYNC_MASTER"})
        self.cluster.add_broker(SLAVE, {**broker_conf(self.flush), **FAST_HA, "brokerName": BROKER,
                                        "brokerRole": "SLAVE", "brokerId": "1"})

    def close(self) -> None:
        for name, mount in self._mounts():
            with contextlib.suppress(Exception):
                self.cluster.kill_broker(name)
            mount.unmount()
        with contextlib.suppress(Exception):
            self.cluster.close()

    def _client(self, name: str) -> ClientConfig:
        return ClientConfig(namesrv_addr=self.cluster.namesrv_addr, instance_name=name,
                            rebalance_interval=1000, persist_consumer_offset_interval=200)

    # -- one cut --------------------------------------------------------------------------------

    async def one_cut(self, round_id: int, full: bool) -> None:
        async with Admin(self.cluster.namesrv_addr) as admin:
            if round_id == 0:
                await self._create_topic(admin, TOPIC)
            await self._create_topic(admin, f"{TOPIC}_{round_id}")
        stop = asyncio.Event()
        sent: list[Acked] = []
        workers = [asyncio.create_task(self._produce(round_id, p, stop, sent)) for p in range(PRODUCERS)]
        workers += [asyncio.create_task(self._consume(g, stop)) for g in GROUPS]
        # The random moment counts from the first acknowledgement (clients find the route first).
        deadline = time.monotonic() + 30
        while not sent and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(self.rng.uniform(0.1, 2.5))
        kill_at = time.monotonic()
        victims = self._mounts()[:1] if self.cut == "master" else self._mounts()
        for name, _ in victims:
            self.cluster.kill_broker(name)
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
        for _, mount in victims:
            mode = self.rng.randrange(3)  # plain, a torn page, or metadata kept and data lost
            counts = mount.power_cut(tear=mode == 1, keep_names=mode == 2)
            self.report.pending_files_dropped += counts["pending_files"]
            self.report.torn_bytes += counts["torn_bytes"]
        self.report.cuts += 1
        for name, mount in victims:
            mount.mount()
            self.cluster.start_broker(name)
        if self.cut == "master":
            # The slave kept every acknowledged message: the master takes what it lost from
            # the slave before it accepts a put, so it is read only once the two match.
            await self._check_slave(round_id)
            await self._check(round_id, sent, kill_at, full)
            return
        await self._check(round_id, sent, kill_at, full)
        if self.slave_mount is not None:
            await self._check_slave(round_id)

    async def _create_topic(self, admin: Admin, topic: str) -> None:
        await admin.create_topic(topic, queue_nums=QUEUES)
        self.topics.append(topic)
        self.report.topics_created += 1

    async def _produce(self, round_id: int, p: int, stop: asyncio.Event, sent: list[Acked]) -> None:
        producer = Producer(f"PowerCutP{p}", client_config=self._client(f"p{p}-{round_id}"))
        await producer.start()
        try:
            seq = 0
            while not stop.is_set():
                body = body_for(round_id, p, seq)
                msg = Message(TOPIC, body)
                msg.keys = f"k{round_id}-{p}-{seq}"
                seq += 1
                try:
                    result = await producer.send(msg, mq=MessageQueue(TOPIC, BROKER, p % QUEUES), timeout_ms=3000)
                except (LakeMQError, OSError, TimeoutError):  # the broker is gone: nothing more is acknowledged
                    return
                if result.send_status is SendStatus.SEND_OK:
                    sent.append(Acked(p % QUEUES, result.queue_offset, body, time.monotonic()))
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.shutdown(), 5)

    async def _consume(self, group: str, stop: asyncio.Event) -> None:
        consumer = PullConsumer(group, client_config=self._client(f"{group}-c"))
        await consumer.start()
        try:
            while not stop.is_set():
                for q in range(QUEUES):
                    mq = MessageQueue(TOPIC, BROKER, q)
                    try:
                        offset = max(await consumer.fetch_consume_offset(mq), 0)
                        result = await consumer.pull(mq, "*", offset, 16, timeout_ms=3000)
                    except (LakeMQError, OSError, TimeoutError):
                        return
                    # Answered: the broker found (or auto-created and persisted) the group first.
                    self.groups_known.add(group)
                    if result.pull_status is PullStatus.FOUND:
                        consumer.update_consume_offset(mq, result.next_begin_offset)
                with contextlib.suppress(Exception):
                    await consumer.persist_offsets()
                await asyncio.sleep(0.05)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.shutdown(), 5)

    # -- the checks --------------------------------------------------------------------------------

    def _fail(self, what: str) -> None:
        self.report.failures.append(what)
        self.log(f"FAIL {what}")

    async def _check(self, round_id: int, sent: list[Acked], kill_at: float, full: bool) -> None:
        addr = self.cluster.broker_addr(BROKER)
        async with Admin(self.cluster.namesrv_addr) as admin:
            configs = await admin.topic_configs(addr)
            for topic in self.topics:
                if topic not in configs:
                    self._fail(f"cut {round_id}: topic {topic} was acknowledged and is gone")
            groups = set(await admin.subscription_groups(addr))
            for group in self.groups_known - groups:
                self._fail(f"cut {round_id}: consumer group {group} is gone")
        for a in sent:
            self.ledger[a.queue_id][a.queue_offset] = a
        self.report.acked += len(sent)
        consumer = PullConsumer("PowerCutChecker", client_config=self._client(f"check-{round_id}"))
        await consumer.start()
        try:
            ends = {q: await self._check_queue(consumer, round_id, q, kill_at, full) for q in range(QUEUES)}
            await self._check_offsets(round_id, ends)
        except (LakeMQError, OSError, TimeoutError) as exc:  # the topic gone, a read refused: the store lost something
            self._fail(f"cut {round_id}: reading the recovered broker failed: {exc!r}")
        finally:
            await consumer.core.close()

    async def _check_queue(self, consumer: PullConsumer, round_id: int, q: int, kill_at: float, full: bool) -> int:
        """The messages of queue ``q`` (all of them when ``full``, else those from where the
        last check ended) against what was acknowledged; returns the queue's end."""
        mq = MessageQueue(TOPIC, BROKER, q)
        held: dict[int, bytes] = {}
        start = await consumer.min_offset(mq)
        if not full:
            start = max(start, self.verified_end[q])
        offset = start
        end = await consumer.max_offset(mq)
        while offset < end:
            result = await consumer.pull(mq, "*", offset, 32)
            if result.pull_status is not PullStatus.FOUND or not result.msgs:
                self._fail(f"cut {round_id}: queue {q} offset {offset} below its end {end}: "
                           f"{result.pull_status} with {len(result.msgs)} messages")
                break
            for msg in result.msgs:
                if msg.queue_offset != offset:
                    self._fail(f"cut {round_id}: queue {q}: expected offset {offset}, got {msg.queue_offset}")
                held[msg.queue_offset] = msg.body
                offset = msg.queue_offset + 1
        self.report.messages_checked += len(held)
        for off, body in held.items():
            parsed = _parse_body(body)
            if parsed is None or body != body_for(*parsed):
                self._fail(f"cut {round_id}: queue {q} offset {off} holds a message nobody sent whole")
        lost = sorted(off for off, a in self.ledger[q].items() if off >= start and held.get(off) != a.body)
        # A SYNC_MASTER's acknowledged sends are on its slave: with the slave running on, the
        # master loses none, whatever its flush mode.
        if lost and (self.flush == "SYNC_FLUSH" or self.cut == "master"):
            self._fail(f"cut {round_id}: queue {q}: {len(lost)} acknowledged messages lost, first at {lost[0]}")
        elif lost:
            kept_after = [off for off in self.ledger[q] if off > lost[0] and held.get(off) == self.ledger[q][off].body]
            if kept_after:
                self._fail(f"cut {round_id}: queue {q}: acknowledged {lost[0]} lost but {kept_after[0]} after it kept")
            window = (FLUSH_INTERVAL_MS + THOROUGH_MS) / 1000 + 1.0
            early = [off for off in lost if self.ledger[q][off].acked_at < kill_at - window]
            if early:
                self._fail(f"cut {round_id}: queue {q}: acknowledged {early[0]} lost, sent {window:.1f}s+ before the cut")
            self.report.lost_async += len(lost)
            for off in lost:  # gone as the mode allows: the offsets are given out again
                del self.ledger[q][off]
        self.verified_end[q] = end
        return end

    async def _check_slave(self, round_id: int) -> None:
        """The slave catches up with the recovered master by itself, and then holds its
        CommitLog byte for byte (so every acknowledged message too). After a cut of both, a
        slave ahead of its master (it holds bytes the master lost) fails the run: the master
        refuses such a slave and replication would stop until an operator steps in. After a
        cut of the master alone, an ASYNC_FLUSH master that lost a tail its slave holds takes
        it from the slave (counted in ``slave_ahead``): the two must then match
        (docs/REPLICATION.md)."""
        async with Admin(self.cluster.namesrv_addr) as admin:
            deadline = time.monotonic() + 90
            seen_ahead = False
            while True:
                master = int((await admin.broker_runtime_info(self.cluster.broker_addr(BROKER)))["commitLogMaxOffset"])
                slave = int((await admin.broker_runtime_info(self.cluster.broker_addr(SLAVE)))["commitLogMaxOffset"])
                if slave == master:
                    break
                if slave > master and self.cut == "master":
                    if not seen_ahead:
                        seen_ahead = True
                        self.report.slave_ahead += 1
                        self.log(f"cut {round_id}: the slave is {slave - master} bytes ahead of the recovered master")
                elif slave > master:
                    self.report.slave_ahead += 1
                    self._fail(f"cut {round_id}: the slave is ahead of the recovered master ({slave} > {master}): "
                               "it holds bytes the master lost")
                    return
                if time.monotonic() > deadline:
                    self._fail(f"cut {round_id}: the slave's CommitLog ends at {slave}, the master's at {master}")
                    return
                await asyncio.sleep(0.2)
        master_dir, slave_dir = self.mount.mountpoint / "commitlog", self.slave_mount.mountpoint / "commitlog"  # type: ignore[union-attr]
        for path in sorted(slave_dir.iterdir()):
            if path.read_bytes() != (master_dir / path.name).read_bytes():
                self._fail(f"cut {round_id}: CommitLog file {path.name} differs between master and slave")
        self.report.slave_checks += 1

    async def _check_offsets(self, round_id: int, ends: dict[int, int]) -> None:
        for group in GROUPS:
            reader = PullConsumer(group, client_config=self._client(f"{group}-check-{round_id}"))
            await reader.start()
            try:
                for q in range(QUEUES):
                    got = await reader.fetch_consume_offset(MessageQueue(TOPIC, BROKER, q), from_store=True)
                    before = self.offsets.get((group, q), -1)
                    self.report.offsets_checked += 1
                    if got < before:
                        self._fail(f"cut {round_id}: {group} queue {q}: offset ran back from {before} to {got}")
                    if self.flush == "SYNC_FLUSH" and got > ends[q]:
                        self._fail(f"cut {round_id}: {group} queue {q}: offset {got} is past the queue's end {ends[q]}")
                    self.offsets[(group, q)] = max(got, before)
            finally:
                # Leave without writing anything: this reader committed nothing.
                await reader.core.close()


def run_power_cuts(root: Path, cuts: int, *, flush: str = "SYNC_FLUSH", seed: int = 1, slave: bool = False,
                   cut: str = "all", log: Callable[[str], None] = print) -> CutReport:
    run = PowerCutRun(root, flush, seed, log, slave=slave, cut=cut)
    run.start()
    try:
        for round_id in range(cuts):
            t0 = time.monotonic()
            # Every 10th cut, and the last, reads each queue whole; the others from where the
            # previous check ended (what that one read is re-read at the next full check).
            asyncio.run(run.one_cut(round_id, full=round_id % 10 == 9 or round_id == cuts - 1))
            log(f"cut {round_id + 1}/{cuts} ({time.monotonic() - t0:.1f}s): {run.report.summary()}")
            if run.report.failures:
                break  # what follows a loss would only repeat it
    finally:
        run.close()
    return run.report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuts", type=int, default=100)
    parser.add_argument("--flush", choices=("SYNC_FLUSH", "ASYNC_FLUSH"), default="SYNC_FLUSH")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slave", action="store_true", help="a SYNC_MASTER with its slave on a second mount")
    parser.add_argument("--cut", choices=("all", "master"), default="all",
                        help="master: cut the SYNC_MASTER's machine alone, its slave (implied) runs on")
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the clients' warnings about the killed broker are expected
    # A SIGTERM stops the run through its clean-up (brokers killed, mounts unmounted).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = run_power_cuts(args.root, args.cuts, flush=args.flush, seed=args.seed, slave=args.slave,
                            cut=args.cut, log=lambda line: print(line, flush=True))
    print("\n".join(report.failures) or "no failures")
    print(report.summary())
    raise SystemExit(1 if report.failures else 0)


if __name__ == "__main__":
    main()
