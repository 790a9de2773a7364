"""Honest clean-up in a real broker (issue 37): CommitLog files deleted before their
fileReservedTime because the disk is "nearly full" (here: the ratios set to 1%, so this
machine's disk is over them) are logged at ERROR with the topics and message counts they
removed, counted in the metrics, shown in the runtime info and on the console's cluster page,
and the messages of a topic no group has read count as unconsumed."""

from __future__ import annotations

import asyncio
import os
import time
import urllib.request
from pathlib import Path

import pytest

from lakemq.client import Message, Producer
from lakemq.client.admin import Admin
from tests.client.client_helpers import unique
from tests.cluster import start_cluster
from tests.console.console_env import start_console, stop_console

pytestmark = pytest.mark.timeout(180)

FILE = 1 << 20
FORCING = {
    "mappedFileSizeCommitLog": str(FILE),
    "diskMaxUsedSpaceRatio": "1",
    "diskSpaceCleanForciblyRatio": "1",
    "diskSpaceWarningLevelRatio": "100",  # never "disk full": sends go on
    "cleanResourceInterval": "300",
    "fileReservedTime": "72",
}


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


async def test_forced_deletions_are_loud_counted_and_shown(tmp_path: Path) -> None:
    with start_cluster(tmp_path, broker_conf=FORCING) as cluster:
        ns, topic = cluster.namesrv_addr, unique("Unread")
        addr = cluster.broker_addr("broker-a")
        async with Admin(ns) as admin:
            await admin.create_topic(topic, queue_nums=1)
            async with Producer(unique("pg"), namesrv_addr=ns) as producer:
                for _ in range(700):  # about 2.8 files of 4 KiB (incompressible) messages
                    await producer.send(Message(topic, os.urandom(4000)))
            deadline = time.monotonic() + 30
            while int((info := await admin.broker_runtime_info(addr))["forcedDeletedFiles"]) < 2:
                assert time.monotonic() < deadline, f"no forced deletion: {info}"
                await asyncio.sleep(0.2)
            stats = await admin.topic_stats(topic)
        removed = stats[0].min_offset  # every message below it went with the deleted files
        assert removed > 0
        assert info["forcedDeletedMessages"] == str(removed)
        assert info["unconsumedMessagesDeleted"] == str(removed)  # no group had read the topic
        newest = info["forcedDeletions"].splitlines()
        assert len(newest) == int(info["forcedDeletedFiles"]) and f"of {topic} " in newest[0]

        metrics = _get(f"http://127.0.0.1:{cluster.brokers['broker-a'].port + 2}/metrics")
        assert 'lakemq_broker_commitlog_files_deleted_total{broker="broker-a",reason="forced"} ' \
               f"{float(info['forcedDeletedFiles'])}" in metrics
        assert f'lakemq_broker_forced_deleted_messages_total{{broker="broker-a",topic="{topic}"}} {float(removed)}' \
               in metrics
        assert f'lakemq_broker_unconsumed_messages_deleted_total{{broker="broker-a",topic="{topic}"}} ' \
               f"{float(removed)}" in metrics

        log = "".join(p.read_text() for p in (cluster.root / "broker-a" / "logs").glob("*.log"))
        forced = [line for line in log.splitlines() if " ERROR " in line and "FORCED DELETION" in line]
        assert len(forced) == int(info["forcedDeletedFiles"]) and all(f"messages: {topic} " in f for f in forced)
        assert f"{topic} " in log.split("DELETED UNCONSUMED MESSAGES")[1] and "(no group has read it)" in log
        assert "deleted expired file" not in log  # a forced deletion is not called expired

        process, url = start_console(ns, None, tmp_path)
        try:
            page = _get(url)
        finally:
            stop_console(process)
        assert f"{info['forcedDeletedFiles']} forced deletions</span>" in page
        assert 'id="forced-deletions"' in page and f"of {topic} " in page
