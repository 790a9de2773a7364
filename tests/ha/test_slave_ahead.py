"""A slave must never hold CommitLog bytes its master can lose, and one that does is refused,
never cut (docs/REPLICATION.md, "a slave ahead of its master").

- A SYNC_FLUSH master ships only what its group commit synced: with its fdatasyncs slowed
  (the fault tests' LAKEMQ_FAULT_FSYNC_DELAY_MS) its slave gets a message only once the
  master's fsync is done. An ASYNC_FLUSH master ships at once, as RocketMQ's does.
- A slave ahead of its master (the master's store cut back behind what the slave holds, as a
  power cut does to an ASYNC_FLUSH master's unflushed tail) is refused: logged once at ERROR
  with the extra bytes and what to do, its report never acknowledges a SYNC_MASTER's send,
  and its store is left as it was, holding every acknowledged message the master lost.

The power-cut harness (tests/powercut/broker_cuts.py, --slave) checks the whole: after each
cut of both machines the slave resumes by itself and matches the recovered master.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from lakemq.client import Message, Producer, SendStatus
from lakemq.client.admin import Admin
from lakemq.client.config import ProducerConfig
from lakemq.common.record import MESSAGE_MAGIC_CODE
from tests.client.client_helpers import unique
from tests.cluster import Cluster, start_cluster
from tests.ha.ha_helpers import (
    FAST_HA,
    assert_same_commit_logs,
    commit_log_dir,
    max_offset,
    slave_name,
    unique_keys,
    wait_caught_up,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

FSYNC_DELAY_MS = 1500
SLAVE = slave_name("broker-a")


def _start_pair(cluster: Cluster, role: str, flush: str, monkeypatch: pytest.MonkeyPatch | None = None) -> None:
    """The master with its fdatasyncs slowed (when ``monkeypatch`` is given), the slave not."""
    if monkeypatch is not None:
        monkeypatch.setenv("LAKEMQ_FAULT_FSYNC_DELAY_MS", str(FSYNC_DELAY_MS))
    cluster.add_broker("broker-a", {**FAST_HA, "brokerRole": role, "flushDiskType": flush})
    if monkeypatch is not None:
        monkeypatch.delenv("LAKEMQ_FAULT_FSYNC_DELAY_MS")
    cluster.add_broker(SLAVE, {**FAST_HA, "brokerName": "broker-a", "brokerRole": "SLAVE", "brokerId": "1"})


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
async def test_a_sync_flush_master_ships_only_what_it_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: str
) -> None:
    with start_cluster(tmp_path, brokers=()) as cluster:
        _start_pair(cluster, "SYNC_MASTER", flush, monkeypatch)
        ns, topic = cluster.namesrv_addr, unique("Ahead")
        master, slave = cluster.broker_addr("broker-a"), cluster.broker_addr(SLAVE)
        async with Admin(ns) as admin:
            await admin.create_topic(topic, queue_nums=1)
        async with Producer(unique("pg"), namesrv_addr=ns, config=ProducerConfig(send_msg_timeout=10_000)) as producer:
            await producer.send(Message(topic, b"warm-up"))  # routes known, links made
            base = await wait_caught_up(cluster)
            send = asyncio.create_task(producer.send(Message(topic, b"m" * 2000)))
            # Sampled until the slave has the message: when the master appended it, when the slave got it.
            appended = got = 0.0
            deadline = time.monotonic() + 30
            while not got:
                assert time.monotonic() < deadline, "the slave never got the message"
                now = time.monotonic()
                if not appended and await max_offset(master, ns) > base:
                    appended = now
                if await max_offset(slave, ns) > base:
                    got = now
                await asyncio.sleep(0.02)
            result = await send
        assert result.send_status is SendStatus.SEND_OK
        assert appended, "the master's append was not seen before the slave had it"
        if flush == "SYNC_FLUSH":
            # Not before the master's slowed fdatasync made it durable.
            assert got - appended > 0.6 * FSYNC_DELAY_MS / 1000, (appended, got)
        else:
            assert got - appended < 0.5 * FSYNC_DELAY_MS / 1000, (appended, got)
        assert await wait_caught_up(cluster) > base


def _record_starts(commit_log: Path) -> list[int]:
    """The CommitLog offset of every message record (one file: the test writes little)."""
    (path,) = sorted(commit_log.iterdir())
    data, pos, starts = path.read_bytes(), 0, []
    while pos + 8 <= len(data):
        size, magic = int.from_bytes(data[pos:pos + 4], "big"), int.from_bytes(data[pos + 4:pos + 8], "big")
        if magic != MESSAGE_MAGIC_CODE or size <= 0:
            break
        starts.append(int(path.name) + pos)
        pos += size
    return starts


def _cut_back(commit_log: Path, offset: int) -> None:
    """What a power cut does to unflushed bytes: everything from ``offset`` on is zeros."""
    (path,) = sorted(commit_log.iterdir())
    at = offset - int(path.name)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes(path.stat().st_size - at))


def _log(cluster: Cluster, name: str) -> str:
    return "".join(p.read_text(errors="replace") for p in (cluster.root / name / "logs").glob("*.log"))


async def _master_loses_an_acknowledged_tail(cluster: Cluster, queue_nums: int) -> tuple[str, int, list[str], int]:
    """An ASYNC_FLUSH SYNC_MASTER and its slave take 40 sends; the master is stopped and loses
    its last 10 records (acknowledged: under ASYNC_FLUSH a cut may take them). Returns the
    topic, the slave's end, the acknowledged keys and the master's new end."""
    _start_pair(cluster, "SYNC_MASTER", "ASYNC_FLUSH")
    ns, topic = cluster.namesrv_addr, unique("Ahead")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=queue_nums)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(40):
            assert (await producer.send(Message(topic, b"a-%d" % i))).send_status is SendStatus.SEND_OK
    held = await wait_caught_up(cluster)
    acked_keys = list(unique_keys(commit_log_dir(cluster, SLAVE)))
    assert cluster.stop_broker("broker-a") == 0
    end = _record_starts(commit_log_dir(cluster, "broker-a"))[-10]
    _cut_back(commit_log_dir(cluster, "broker-a"), end)
    return topic, held, acked_keys, end


async def test_a_slave_ahead_is_refused_and_keeps_its_bytes(tmp_path: Path) -> None:
    with start_cluster(tmp_path, brokers=()) as cluster:
        ns = cluster.namesrv_addr
        topic, held, acked_keys, end = await _master_loses_an_acknowledged_tail(cluster, 2)
        assert cluster.stop_broker(SLAVE) == 0
        slave_files = {p.name: p.read_bytes() for p in commit_log_dir(cluster, SLAVE).iterdir()}

        cluster.start_broker("broker-a")
        cluster.start_broker(SLAVE)
        master, slave = cluster.broker_addr("broker-a"), cluster.broker_addr(SLAVE)
        assert await max_offset(master, ns) == end
        # The slave connects again every second; its log holds the first run's connection too, so two refusals.
        await wait_for(lambda: _log(cluster, SLAVE).count("HA: connected to master") >= 3, what="reconnects")
        refusals = re.findall(r"ERROR .*HA: slave \S+ holds CommitLog offsets (\d+) to (\d+) \((\d+) bytes\) "
                              r"past this broker's end (\d+).*make that slave the master", _log(cluster, "broker-a"))
        assert refusals == [(str(end), str(held), str(held - end), str(end))], refusals  # once, not per retry
        assert await max_offset(slave, ns) == held
        # Its report is no acknowledgement: the master's next send has no slave to wait for.
        async with Producer(unique("pg"), namesrv_addr=ns) as producer:
            result = await producer.send(Message(topic, b"while refused"))
        assert result.send_status is SendStatus.SLAVE_NOT_AVAILABLE
        assert cluster.stop_broker("broker-a") == 0
        assert cluster.stop_broker(SLAVE) == 0
        assert {p.name: p.read_bytes() for p in commit_log_dir(cluster, SLAVE).iterdir()} == slave_files

        # Nothing acknowledged is lost: the slave holds every message the master's cut took.
        assert list(unique_keys(commit_log_dir(cluster, SLAVE))) == acked_keys
        assert len(list(unique_keys(commit_log_dir(cluster, "broker-a")))) < len(acked_keys)


async def test_a_master_back_from_a_crash_copies_what_its_slave_holds_before_any_put(tmp_path: Path) -> None:
    """The same loss after an abnormal exit (the abort file left, as a power cut leaves it):
    the master holds its puts, copies the 10 records from the slave, then accepts puts at the
    offsets after them; the two CommitLogs end identical with every acknowledged message."""
    with start_cluster(tmp_path, brokers=()) as cluster:
        ns = cluster.namesrv_addr
        topic, held, acked_keys, end = await _master_loses_an_acknowledged_tail(cluster, 1)
        (cluster.root / "broker-a" / "store" / "abort").touch()  # the exit was not clean

        cluster.start_broker("broker-a")  # the slave ran on: it reconnects by itself
        master = cluster.broker_addr("broker-a")
        assert await wait_caught_up(cluster) == held
        await wait_for(lambda: "accepting puts" in _log(cluster, "broker-a"), what="puts resumed")
        # The slave's link was refused while the bytes were copied: it is back within a second.
        await wait_for(lambda: _log(cluster, "broker-a").count("HA: sending to slave") >= 2, what="the slave's link")
        log_text = _log(cluster, "broker-a")
        assert re.search(rf"ERROR .*HA: slave at \S+ holds CommitLog offsets {end} to {held} ", log_text), log_text
        async with Producer(unique("pg"), namesrv_addr=ns, config=ProducerConfig(send_msg_timeout=10_000)) as producer:
            result = await producer.send(Message(topic, b"after"))
        assert result.send_status is SendStatus.SEND_OK
        assert result.queue_offset == 40, "a put reused a queue offset the copied records hold"
        after = await wait_caught_up(cluster)
        assert after > held and await max_offset(master, ns) == after
        keys = list(unique_keys(commit_log_dir(cluster, "broker-a")))
        assert keys[:40] == acked_keys and len(keys) == 41
        assert list(unique_keys(commit_log_dir(cluster, SLAVE))) == keys
        assert cluster.stop_broker("broker-a") == 0
        assert cluster.stop_broker(SLAVE) == 0
        assert_same_commit_logs(commit_log_dir(cluster, "broker-a"), commit_log_dir(cluster, SLAVE))


async def _wait_end(addr: str, ns: str, want: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (have := await max_offset(addr, ns)) != want:
        assert time.monotonic() < deadline, f"{addr} ends at {have}, not {want}, after {timeout}s"
        await asyncio.sleep(0.1)


SECOND = f"{SLAVE}2"


async def _two_slaves_and_a_tail(cluster: Cluster) -> tuple[str, int, int, list[str]]:
    """An ASYNC_FLUSH SYNC_MASTER with two slaves takes 20 sends, the second slave stops, the
    first takes 20 more. Returns the topic, where the second slave ends, where the first does,
    and the 40 acknowledged keys."""
    ns = cluster.namesrv_addr
    _start_pair(cluster, "SYNC_MASTER", "ASYNC_FLUSH")
    cluster.add_broker(SECOND, {**FAST_HA, "brokerName": "broker-a", "brokerRole": "SLAVE", "brokerId": "2"})
    topic = unique("Ahead")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queue_nums=1)
    async with Producer(unique("pg"), namesrv_addr=ns) as producer:
        for i in range(20):
            assert (await producer.send(Message(topic, b"a-%d" % i))).send_status is SendStatus.SEND_OK
        first_half = await wait_caught_up(cluster)
        await _wait_end(cluster.broker_addr(SECOND), ns, first_half)
        assert cluster.stop_broker(SECOND) == 0
        for i in range(20, 40):
            assert (await producer.send(Message(topic, b"a-%d" % i))).send_status is SendStatus.SEND_OK
    held = await wait_caught_up(cluster)
    return topic, first_half, held, list(unique_keys(commit_log_dir(cluster, SLAVE)))


async def _copied_back_from_the_first(cluster: Cluster, topic: str, end: int, held: int, acked_keys: list[str]) -> None:
    """The master, back at ``end``, copied the first slave's bytes up to ``held`` before its
    first put, which takes queue offset 40; all three end with the same CommitLog."""
    ns = cluster.namesrv_addr
    await wait_for(lambda: "accepting puts" in _log(cluster, "broker-a"), timeout=60, what="puts resumed")
    assert re.search(rf"ERROR .*HA: slave at {cluster.broker_addr(SLAVE)} holds CommitLog offsets {end} to "
                     rf"{held} ", _log(cluster, "broker-a"))
    async with Producer(unique("pg"), namesrv_addr=ns, config=ProducerConfig(send_msg_timeout=10_000)) as producer:
        result = await producer.send(Message(topic, b"after"))
    assert result.send_status is SendStatus.SEND_OK
    assert result.queue_offset == 40, "a put reused a queue offset the copied records hold"
    after = await wait_caught_up(cluster)
    keys = list(unique_keys(commit_log_dir(cluster, "broker-a")))
    assert keys[:40] == acked_keys and len(keys) == 41
    await _wait_end(cluster.broker_addr(SECOND), ns, after)
    for name in ("broker-a", SLAVE, SECOND):
        assert cluster.stop_broker(name) == 0
    assert_same_commit_logs(commit_log_dir(cluster, "broker-a"), commit_log_dir(cluster, SLAVE))
    assert_same_commit_logs(commit_log_dir(cluster, "broker-a"), commit_log_dir(cluster, SECOND))


async def test_a_master_back_from_a_crash_waits_for_every_slave_and_copies_from_the_furthest(tmp_path: Path) -> None:
    """Two slaves: the one that reports first ends behind the master's new end; the other
    holds the acknowledged tail the master lost and answers late (stopped with SIGSTOP, so the
    NameServer still lists it, as it lists a slave whose machine is slow or cut off). The
    master's puts stay held until that one has said where it ends; then the master copies from
    it and both slaves end where the master does."""
    with start_cluster(tmp_path, brokers=()) as cluster:
        ns = cluster.namesrv_addr
        topic, first_half, held, acked_keys = await _two_slaves_and_a_tail(cluster)
        os.kill(cluster.brokers[SLAVE].proc.pid, signal.SIGSTOP)
        assert cluster.stop_broker("broker-a") == 0
        end = _record_starts(commit_log_dir(cluster, "broker-a"))[-10]
        assert first_half < end < held
        _cut_back(commit_log_dir(cluster, "broker-a"), end)
        (cluster.root / "broker-a" / "store" / "abort").touch()

        cluster.start_broker(SECOND)
        cluster.start_broker("broker-a")
        # The second slave reports first and is pushed up to the master's end; the listed
        # slave does not answer, so the puts stay held, however long.
        await wait_for(lambda: _log(cluster, "broker-a").count(f"HA: the slave at {cluster.broker_addr(SLAVE)} "
                                                               "did not say where it ends") >= 2,
                       timeout=60, what="the master asking the stopped slave again")
        assert "accepting puts" not in _log(cluster, "broker-a")
        assert await max_offset(cluster.broker_addr("broker-a"), ns) == end
        await _wait_end(cluster.broker_addr(SECOND), ns, end)

        os.kill(cluster.brokers[SLAVE].proc.pid, signal.SIGCONT)
        await _copied_back_from_the_first(cluster, topic, end, held, acked_keys)


async def test_a_master_back_from_a_site_wide_cut_waits_for_a_slave_not_started_again(tmp_path: Path) -> None:
    """Two slaves, and a cut of the whole site: the slave holding the acknowledged tail the
    master lost starts again last, so the NameServers do not list it when the other reports
    (its registration died with its process). The master remembers its slaves (config/
    haSlaves.json) and holds its puts until that one is back; then it copies from it. On the
    code before, it settled with the slave behind and gave the tail's offsets to new messages
    (found by tests/powercut/broker_cuts.py --slaves 2 --flush ASYNC_FLUSH)."""
    with start_cluster(tmp_path, brokers=()) as cluster:
        ns = cluster.namesrv_addr
        topic, first_half, held, acked_keys = await _two_slaves_and_a_tail(cluster)
        recorded = cluster.root / "broker-a" / "store" / "config" / "haSlaves.json"
        assert json.loads(recorded.read_text()) == {"brokerIds": [1, 2]}
        cluster.kill_broker(SLAVE)  # the site's power goes: its registration goes with it
        cluster.kill_broker("broker-a")
        end = _record_starts(commit_log_dir(cluster, "broker-a"))[-10]
        assert first_half < end < held
        _cut_back(commit_log_dir(cluster, "broker-a"), end)

        cluster.start_broker(SECOND)
        cluster.start_broker("broker-a")
        await wait_for(lambda: _log(cluster, "broker-a").count("HA: the slaves with brokerId 1 are not listed") >= 2,
                       timeout=60, what="the master waiting for the slave not started again")
        assert "accepting puts" not in _log(cluster, "broker-a")
        assert await max_offset(cluster.broker_addr("broker-a"), ns) == end

        cluster.start_broker(SLAVE)
        await _copied_back_from_the_first(cluster, topic, end, held, acked_keys)
