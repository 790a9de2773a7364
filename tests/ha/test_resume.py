"""A slave stopped or killed while its master takes sends resumes where its CommitLog ends:
no gap, no byte twice (the CommitLogs are compared byte for byte)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from lakemq.client import Message, Producer, SendStatus
from lakemq.client.admin import Admin
from tests.client.client_helpers import unique
from tests.cluster import start_cluster
from tests.ha.ha_helpers import (
    add_pair,
    assert_same_commit_logs,
    commit_log_dir,
    ha_errors,
    max_offset,
    slave_name,
    wait_caught_up,
    wait_for,
)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
async def test_a_restarted_slave_resumes_without_gap_or_duplicate(tmp_path: Path, how: str) -> None:
    # Small files: the stream crosses several CommitLog files and their blank ends.
    small = {"mappedFileSizeCommitLog": str(1 << 20)}
    with start_cluster(tmp_path, brokers=()) as cluster:
        add_pair(cluster, master_conf=small, slave_conf=small)
        ns, topic, slave = cluster.namesrv_addr, unique("Resume"), slave_name("broker-a")
        async with Admin(ns) as admin:
            await admin.create_topic(topic, queue_nums=4)
        sent = 0

        async def produce(producer: Producer) -> None:
            nonlocal sent
            while True:
                result = await producer.send(Message(topic, b"r-%d-" % sent + b"y" * (sent % 3000)))
                assert result.send_status is SendStatus.SEND_OK
                sent += 1

        async with Producer(unique("pg"), namesrv_addr=ns) as producer:
            task = asyncio.create_task(produce(producer))
            try:
                for _ in range(3):
                    before = sent
                    await wait_for(lambda: sent >= before + 300, what="sends")  # noqa: B023
                    at = await max_offset(cluster.broker_addr(slave), ns)
                    if how == "sigkill":
                        cluster.kill_broker(slave)
                    else:
                        assert cluster.stop_broker(slave) == 0
                    before = sent
                    await wait_for(lambda: sent >= before + 300, what="sends while the slave is away")  # noqa: B023
                    cluster.start_broker(slave)
                    await wait_for(lambda: sent >= before + 600, what="sends after the restart")  # noqa: B023
                    assert at > 0
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        end = await wait_caught_up(cluster)
        assert end > 3 << 20  # several files
        cluster.stop_broker("broker-a")
        cluster.stop_broker(slave)
        names = assert_same_commit_logs(commit_log_dir(cluster, "broker-a"), commit_log_dir(cluster, slave))
        assert len(names) >= 4
        assert not ha_errors(cluster, "broker-a", slave)
