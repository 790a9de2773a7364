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
  its queue's end (SYNC_FLUSH);
- with a SYNC_MASTER and its slaves (``--slaves 1|2``, each on a mount of its own): every slave
  converges to the recovered master's CommitLog (the same bytes up to the master's end) within
  a bounded wait, no queue offset is held by two records of the master's CommitLog (given out
  twice), and a message at a queue offset on a slave is the master's. The cut takes the whole
  site (``--cut all``), the master's machine alone (``--cut master``: no acknowledged message
  may be lost, whatever the flush mode: a slave has it) or one slave's, at random
  (``--cut slave``: the master runs on and loses nothing).

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
from tests.powercut.replicas import QueueSlot, read_range, records

__all__ = ["CutReport", "run_power_cuts"]

BROKER = "broker-a"
SLAVES = ("broker-a-s", "broker-a-s2")  # brokerId 1 and 2
CUT_MODES = ("all", "master", "slave")
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
    slave_checks: int = 0  # slaves found caught up and matching the master, all cuts
    slave_ahead: int = 0  # slaves found holding more than the recovered master, all cuts
    records_checked: int = 0  # the master's CommitLog records checked for queue offsets given out twice
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return json.dumps({k: v for k, v in self.__dict__.items() if k != "failures"}
                          | {"failures": len(self.failures)})


class PowerCutRun:
    def __init__(self, root: Path, flush: str, seed: int, log: Callable[[str], None], *, slaves: int = 0,
                 cut: str = "all") -> None:
        self.root, self.flush, self.log = root, flush, log
        # "all": the cut takes every machine; "master": the master's alone, its slaves run on;
        # "slave": one slave's, the master and the other slave run on.
        if cut not in CUT_MODES or not 0 <= slaves <= len(SLAVES):
            raise ValueError(f"cut {cut!r} with {slaves} slaves")
        self.cut = cut
        slaves = max(slaves, 1) if cut != "all" else slaves
        self.rng = random.Random(seed)
        self.mount = LazyMount(root / "backing", root / "mnt", root / "lazyfs.log")
        # A SYNC_MASTER's slaves, each on a mount of its own (a machine of its own).
        self.slave_mounts = {name: LazyMount(root / f"backing-{name[len(BROKER) + 1:]}",
                                             root / f"mnt-{name[len(BROKER) + 1:]}",
                                             root / f"lazyfs-{name[len(BROKER) + 1:]}.log")
                             for name in SLAVES[:slaves]}
        self.cluster = Cluster(root / "cluster")
        self.ledger: dict[int, dict[int, Acked]] = {q: {} for q in range(QUEUES)}  # queue -> offset -> sent
        self.topics: list[str] = []
        self.groups_known: set[str] = set()
        self.offsets: dict[tuple[str, int], int] = {}
        self.verified_end = dict.fromkeys(range(QUEUES), 0)  # each queue read and checked below this
        # The master's CommitLog: checked below this offset, and the record found at each queue
        # slot there (its physical offset and body).
        self.log_verified = 0
        self.slots: dict[QueueSlot, tuple[int, bytes]] = {}
        self.report = CutReport()

    # -- the cluster ----------------------------------------------------------------------------

    def _mounts(self) -> list[tuple[str, LazyMount]]:
        return [(BROKER, self.mount), *self.slave_mounts.items()]

    def start(self) -> None:
        for name, mount in self._mounts():
            mount.mount()
            store = self.root / "cluster" / name / "store"
            store.parent.mkdir(parents=True, exist_ok=True)
            store.symlink_to(mount.mountpoint)
        self.cluster.start_namesrv()
        if not self.slave_mounts:
            self.cluster.add_broker(BROKER, broker_conf(self.flush))
            return
        self.cluster.add_broker(BROKER, {**broker_conf(self.flush), **FAST_HA, "brokerRole": "SYNC_MASTER"})
        for broker_id, name in enumerate(self.slave_mounts, start=1):
            self.cluster.add_broker(name, {**broker_conf(self.flush), **FAST_HA, "brokerName": BROKER,
                                           "brokerRole": "SLAVE", "brokerId": str(broker_id)})

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
        victims = self._mounts()
        if self.cut == "master":
            victims = victims[:1]
        elif self.cut == "slave":
            victims = [self.rng.choice(victims[1:])]
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
        # The power comes back on the machines in any order (with two slaves, the first to
        # report to a master back from a cut may be the one behind).
        self.rng.shuffle(victims)
        for _, mount in victims:
            mount.mount()
        for name, _ in victims:
            self.cluster.start_broker(name)
        # A master back from a cut takes what it lost from its slaves before it accepts a put,
        # so it is read once every slave matches it.
        await self._check_replicas(round_id, full)
        await self._check(round_id, sent, kill_at, full)

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
                except (LakeMQError, OSError, TimeoutError):
                    # Not acknowledged: the broker is gone (the cut), or a master back from a
                    # cut still holds its puts until it heard from its slaves. Again, until the cut.
                    await asyncio.sleep(0.1)
                    continue
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
            earlier = self.ledger[a.queue_id].get(a.queue_offset)
            if earlier is not None and earlier.body != a.body:
                self._fail(f"cut {round_id}: queue {a.queue_id} offset {a.queue_offset} acknowledged twice, "
                           f"for two messages")
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
        # A SYNC_MASTER's acknowledged sends are on a slave: with the slaves running on, the
        # master loses none, whatever its flush mode; a slave's cut takes nothing of the master's.
        if lost and (self.flush == "SYNC_FLUSH" or self.cut != "all"):
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

    async def _runtime_offset(self, admin: Admin, name: str) -> int:
        return int((await admin.broker_runtime_info(self.cluster.broker_addr(name)))["commitLogMaxOffset"])

    async def _check_replicas(self, round_id: int, full: bool) -> None:
        """Every slave catches up with the recovered master by itself, and then holds its
        CommitLog byte for byte (so every acknowledged message too); no queue offset is held
        by two records of the master's CommitLog. A slave ahead of its master (it holds bytes
        the master lost) fails the run under SYNC_FLUSH, where the master ships only what it
        synced, and after a slave's cut, where the master lost nothing; after an ASYNC_FLUSH
        master's cut, the master takes such a tail from the furthest slave before its first put
        (counted in ``slave_ahead``): the two must then match (docs/REPLICATION.md). The master
        is read only then."""
        caught_up = [name for name in self.slave_mounts if await self._wait_slave(round_id, name)]
        async with Admin(self.cluster.namesrv_addr) as admin:
            end = await self._runtime_offset(admin, BROKER)
        start = 0 if full else min(self.log_verified, end)
        master_dir = self.mount.mountpoint / "commitlog"
        self.slots = {slot: at for slot, at in self.slots.items() if at[0] < start}
        for phys, slot, body in records(master_dir, start, end):
            self.report.records_checked += 1
            earlier = self.slots.get(slot)
            if earlier is not None:
                self._fail(f"cut {round_id}: {slot[0]} queue {slot[1]} offset {slot[2]} given out twice: the "
                           f"master's CommitLog holds it at {earlier[0]} and at {phys}")
            self.slots[slot] = (phys, body)
        for name in caught_up:
            slave_dir = self.slave_mounts[name].mountpoint / "commitlog"
            same, where = await self._same_bytes(master_dir, slave_dir, start, end)
            if same:
                self.report.slave_checks += 1
                if where:
                    self.log(f"cut {round_id}: {name} matched the master on read {where}")
                continue
            # Say which message differs, if a whole one does.
            for phys, slot, body in records(slave_dir, start, end):
                if self.slots.get(slot) != (phys, body):
                    self._fail(f"cut {round_id}: {name} holds {slot[0]} queue {slot[1]} offset {slot[2]} at "
                               f"{phys}, not the master's message ({self.slots.get(slot, (None,))[0]})")
                    break
            else:
                self._fail(f"cut {round_id}: {name}'s CommitLog differs from the master's in [{start}, {end}), "
                           f"first at {where}")
        self.log_verified = end

    @staticmethod
    async def _same_bytes(master_dir: Path, slave_dir: Path, start: int, end: int) -> tuple[bool, int]:
        """Whether the two CommitLogs hold the same bytes in [start, end), read through their
        mounts, and on which read they did (0: the first). Both brokers write through shared
        mappings: a page the kernel is still writing back to the FUSE daemon can be read from
        the daemon's file as it was, so a difference must last 5 s of reads to count; the
        bytes below a broker's max offset never change while it runs. Not the same: the first
        offset where the last reads differ."""
        for attempt in range(11):
            expected, held = read_range(master_dir, start, end), read_range(slave_dir, start, end)
            if held == expected:
                return True, attempt
            await asyncio.sleep(0.5)
        first = next((i for i, (a, b) in enumerate(zip(expected, held, strict=False)) if a != b),
                     min(len(expected), len(held)))
        return False, start + first

    async def _wait_slave(self, round_id: int, name: str) -> bool:
        """Until ``name``'s CommitLog ends where the master's does (90 s at most)."""
        may_be_ahead = self.flush == "ASYNC_FLUSH" and self.cut != "slave"
        async with Admin(self.cluster.namesrv_addr) as admin:
            deadline = time.monotonic() + 90
            seen_ahead = False
            while True:
                master = await self._runtime_offset(admin, BROKER)
                slave = await self._runtime_offset(admin, name)
                if slave == master:
                    return True
                if slave > master and not seen_ahead:
                    seen_ahead = True
                    self.report.slave_ahead += 1
                    if not may_be_ahead:
                        self._fail(f"cut {round_id}: {name} is ahead of the master ({slave} > {master}): "
                                   "it holds bytes the master lost")
                        return False
                    self.log(f"cut {round_id}: {name} is {slave - master} bytes ahead of the recovered master")
                if time.monotonic() > deadline:
                    self._fail(f"cut {round_id}: {name}'s CommitLog ends at {slave}, the master's at {master}")
                    return False
                await asyncio.sleep(0.2)

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


def run_power_cuts(root: Path, cuts: int, *, flush: str = "SYNC_FLUSH", seed: int = 1, slaves: int = 0,
                   cut: str = "all", log: Callable[[str], None] = print) -> CutReport:
    run = PowerCutRun(root, flush, seed, log, slaves=slaves, cut=cut)
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
    parser.add_argument("--slaves", type=int, choices=(1, 2),
                        help="a SYNC_MASTER with this many slaves, each on a mount of its own")
    parser.add_argument("--cut", choices=CUT_MODES, default="all",
                        help="all: every machine; master: the SYNC_MASTER's machine alone, its slaves run on; "
                             "slave: one slave's, at random (master and slave cuts imply one slave at least)")
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the clients' warnings about the killed broker are expected
    # A SIGTERM stops the run through its clean-up (brokers killed, mounts unmounted).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    slaves = args.slaves if args.slaves is not None else int(args.slave)
    report = run_power_cuts(args.root, args.cuts, flush=args.flush, seed=args.seed, slaves=slaves,
                            cut=args.cut, log=lambda line: print(line, flush=True))
    print("\n".join(report.failures) or "no failures")
    print(report.summary())
    raise SystemExit(1 if report.failures else 0)


if __name__ == "__main__":
    main()
