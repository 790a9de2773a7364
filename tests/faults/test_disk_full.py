"""Disk full: the broker's store on a small file system (a tmpfs, else an ext4 loop file).
When the next CommitLog file cannot get its blocks, sends fail with a clear error (logged by
the broker too) while the broker stays up and serves what it stored; once space returns, sends
succeed again; nothing stored before is damaged. Above diskSpaceWarningLevelRatio (90%) the
disk is full: sends are refused with that reason and everything acknowledged stays readable.
With the disk full to the last block (and the ratio check off), the broker still does not die
(files it maps get their blocks up front, so no SIGBUS): sends are refused as soon as dispatch
cannot create a ConsumeQueue file, and what was acknowledged becomes readable once space
returns."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.client import Message, SyncProducer, SyncPullConsumer
from lakemq.client.config import ClientConfig, ProducerConfig
from lakemq.errors import LakeMQError
from tests.cluster import start_cluster
from tests.console.console_env import start_console, stop_console
from tests.faults.small_fs import fill_to, small_fs
from tests.metrics.metrics_scrape import metrics_url, scrape, value

# Kills, restarts or starves real processes, round after round.
pytestmark = pytest.mark.slow

TOPIC = "DiskFull"
BODY = 1000
INDEX_ENTRIES = 2000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB file system for the broker's store: a tmpfs, else an ext4 loop file."""
    with small_fs(tmp_path / "broker-a" / "store", 24) as store:
        yield store


def _body(i: int) -> bytes:
    return f"{i:08d}".encode() * (BODY // 8)


def test_full_disk_refuses_sends_keeps_serving_and_recovers(tmp_path: Path, small_disk: Path) -> None:
    with start_cluster(tmp_path) as cluster:  # 8 MiB CommitLog files (tests/cluster SMALL_STORE)
        config = ProducerConfig(retry_times_when_send_failed=0)
        client = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name="diskfull")
        stored: list[int] = []
        with SyncProducer("DiskFullProducer", config=config, client_config=client) as producer:
            producer.create_topic(TOPIC, 1)
            producer.send_batch([Message(TOPIC, _body(n)) for n in range(32)])  # the first CommitLog file exists
            stored += range(32)
            filler = small_disk / "filler"
            # Leave less than one CommitLog file free; the current one already has its blocks.
            free = int(subprocess.run(["df", "--output=avail", "-B1", str(small_disk)], capture_output=True,
                                      text=True, check=True).stdout.split()[-1])
            filler.write_bytes(b"\0" * (free - (6 << 20)))
            error: LakeMQError | None = None
            i = 32
            while i < 20_000:
                try:
                    producer.send_batch([Message(TOPIC, _body(n)) for n in range(i, i + 32)])
                except LakeMQError as exc:
                    error = exc
                    break
                stored += range(i, i + 32)
                i += 32
            assert error is not None, "the disk never filled"
            print(f"injected: a 24 MiB file system with {free >> 20} MiB free filled to 6 MiB free; measured: "
                  f"{len(stored)} messages stored, then: {error}")
            assert "cannot create a CommitLog file" in str(error) and "No space left on device" in str(error)
            assert cluster.brokers["broker-a"].running
            assert "No space left on device" in cluster.brokers["broker-a"].logs(tail=1000)

            _check_stored(cluster.namesrv_addr, stored)  # still served while the disk is full

            filler.unlink()  # space returns
            producer.send_batch([Message(TOPIC, _body(n)) for n in range(i, i + 32)])
            stored += range(i, i + 32)
        _check_stored(cluster.namesrv_addr, stored)
        cluster.restart_broker()
        _check_stored(cluster.namesrv_addr, stored)


def test_a_disk_above_the_warning_ratio_refuses_sends_and_loses_nothing(tmp_path: Path, small_disk: Path) -> None:
    with start_cluster(tmp_path) as cluster:
        config = ProducerConfig(retry_times_when_send_failed=0)
        client = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name="diskwarn")
        acked: list[int] = []
        with SyncProducer("DiskWarnProducer", config=config, client_config=client) as producer:
            producer.create_topic(TOPIC, 1)
            producer.send_batch([Message(TOPIC, _body(n)) for n in range(32)])
            acked += range(32)
            filler = small_disk / "filler"
            fill_to(filler, 95)  # room left for ConsumeQueue and index files, but above 90%
            error: LakeMQError | None = None
            while error is None and len(acked) < 20_000:
                batch = range(len(acked), len(acked) + 32)
                try:
                    producer.send_batch([Message(TOPIC, _body(n)) for n in batch])
                    acked += batch
                except LakeMQError as exc:
                    error = exc
            assert error is not None and "disk full" in str(error), error
            assert "diskSpaceWarningLevelRatio 90%" in str(error)
            with pytest.raises(LakeMQError, match="disk full"):  # refused for as long as it is full
                producer.send(Message(TOPIC, b"refused"))
            samples = scrape(metrics_url(cluster.brokers["broker-a"]))
            assert value(samples, "lakemq_broker_disk_full") == 1 and value(samples, "lakemq_broker_sends_refused") == 1
            assert value(samples, "lakemq_broker_put_refusals_total", reason="disk_full") >= 2
            assert value(samples, "lakemq_broker_disk_used_ratio") > 90
            deadline = time.monotonic() + 15
            while len(_stored(cluster.namesrv_addr)) < len(acked):  # dispatch catches up: nothing lost
                assert time.monotonic() < deadline, "acknowledged messages are not readable while the disk is full"
                time.sleep(0.2)
            print(f"injected: a 24 MiB file system filled to 95%; measured: {len(acked) - 32} sends acknowledged "
                  f"before the refusal ({error}); all {len(acked)} readable while full")
            filler.unlink()
            deadline = time.monotonic() + 5
            while True:  # the broker measures the disk every 100 ms
                try:
                    producer.send_batch([Message(TOPIC, _body(n)) for n in range(len(acked), len(acked) + 32)])
                    break
                except LakeMQError:
                    assert time.monotonic() < deadline, "sends still refused once the disk had room again"
                    time.sleep(0.05)
            acked += range(len(acked), len(acked) + 32)
        _check_stored(cluster.namesrv_addr, acked)


def test_a_disk_full_to_the_last_block_kills_nothing(tmp_path: Path, small_disk: Path) -> None:
    # Index files of 2,000 entries: the next one is due while the disk is full. The disk-full
    # ratio is off, so the full disk is met by the file creations themselves.
    conf = {"maxIndexNum": str(INDEX_ENTRIES), "maxHashSlotNum": "500", "diskSpaceWarningLevelRatio": "100"}
    with start_cluster(tmp_path, broker_conf=conf) as cluster:
        config = ProducerConfig(retry_times_when_send_failed=0)
        client = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name="diskfull0")
        acked: list[int] = []
        with SyncProducer("DiskFull0Producer", config=config, client_config=client) as producer:
            producer.create_topic(TOPIC, 1)
            producer.send_batch([Message(TOPIC, _body(n)) for n in range(32)])
            acked += range(32)
            filler = small_disk / "filler"
            with open(filler, "wb", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 4096)
                except OSError:
                    pass  # ENOSPC: not one block left
            error: LakeMQError | None = None
            while error is None and len(acked) < 20_000:
                batch = range(len(acked), len(acked) + 32)
                try:
                    producer.send_batch([Message(TOPIC, _body(n)) for n in batch])
                    acked += batch
                except LakeMQError as exc:
                    error = exc
            # The ConsumeQueue file (6,000 entries) fills before the CommitLog file (8 MiB): the
            # reput cannot go on, and sends are refused from then on.
            assert error is not None and "dispatch failed" in str(error), error
            assert "No space left on device" in str(error)
            with pytest.raises(LakeMQError, match="dispatch failed"):
                producer.send(Message(TOPIC, b"refused"))
            samples = scrape(metrics_url(cluster.brokers["broker-a"]))
            assert value(samples, "lakemq_broker_dispatch_failing") == 1
            assert value(samples, "lakemq_broker_dispatch_failures_total") >= 1
            assert value(samples, "lakemq_broker_put_refusals_total", reason="dispatch_failed") >= 2
            console, url = start_console(cluster.namesrv_addr, None, tmp_path)
            try:
                with urllib.request.urlopen(url, timeout=30) as response:
                    page = response.read().decode()
            finally:
                stop_console(console)
            assert "sends refused" in page and "dispatch failed at CommitLog offset" in page
            acked_while_full = len(acked) - 32
            broker = cluster.brokers["broker-a"]
            assert broker.running, broker.logs()
            readable_while_full: list[bytes] = []
            while not readable_while_full or len(readable_while_full) < len(_stored(cluster.namesrv_addr)):
                readable_while_full = _stored(cluster.namesrv_addr)  # until dispatch gets no further
                time.sleep(0.5)
            assert readable_while_full, "nothing served while the disk is full"
            assert readable_while_full == [_body(n) for n in acked[: len(readable_while_full)]]
            # Keys that find no index file are dropped (and logged): the ConsumeQueue goes on.
            assert len(readable_while_full) > INDEX_ENTRIES and "indexing stopped" in broker.logs(tail=1000)

            filler.unlink()
            deadline = time.monotonic() + 15
            while len(_stored(cluster.namesrv_addr)) < len(acked):
                assert time.monotonic() < deadline, "acknowledged messages never became readable"
                time.sleep(0.2)
            producer.send_batch([Message(TOPIC, _body(n)) for n in range(len(acked), len(acked) + 32)])
            acked += range(len(acked), len(acked) + 32)
        resumed = [line for line in broker.logs(tail=1000).splitlines() if "indexing resumed" in line]
        assert resumed, "indexing never resumed"
        print(f"injected: a 24 MiB file system filled to the last block; measured: {acked_while_full} messages "
              f"acknowledged, then: {error}; {len(readable_while_full)} readable while full (the next "
              f"ConsumeQueue file has no room), all {len(acked)} once space returned; "
              f"{resumed[0].split(';')[-1].strip()}")
        _check_stored(cluster.namesrv_addr, acked)
        cluster.restart_broker()
        _check_stored(cluster.namesrv_addr, acked)


def _stored(namesrv: str) -> list[bytes]:
    with SyncPullConsumer("DiskFullReader", namesrv_addr=namesrv) as reader:
        (mq,) = reader.fetch_subscribe_message_queues(TOPIC)
        offset, end, bodies = reader.min_offset(mq), reader.max_offset(mq), []
        while offset < end:
            result = reader.pull(mq, "*", offset, 32)
            bodies += [m.body for m in result.msgs]
            offset = result.next_begin_offset
    return bodies


def _check_stored(namesrv: str, expected: list[int]) -> None:
    assert _stored(namesrv) == [_body(n) for n in expected]
