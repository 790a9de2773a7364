"""A slow disk under SYNC_FLUSH: each fsync takes longer than syncFlushTimeout, so sends
answer FLUSH_DISK_TIMEOUT (the message is stored, its flush was late), and nothing is corrupt:
after a restart on a healthy disk every message is there, intact.

The slow disk is lakemq.common.faults' LAKEMQ_FAULT_FSYNC_DELAY_MS in the broker's environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakemq.client import Message, SendStatus, SyncProducer, SyncPullConsumer
from lakemq.client.config import ClientConfig, ProducerConfig
from tests.cluster import start_cluster

# Kills, restarts or starves real processes, round after round.
pytestmark = pytest.mark.slow

TOPIC = "SlowDisk"


def test_flush_timeouts_are_reported_and_nothing_is_corrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEMQ_FAULT_FSYNC_DELAY_MS", "400")
    conf = {"flushDiskType": "SYNC_FLUSH", "syncFlushTimeout": "150"}
    with start_cluster(tmp_path, broker_conf=conf) as cluster:
        client = ClientConfig(namesrv_addr=cluster.namesrv_addr, instance_name="slowdisk")
        statuses = []
        with SyncProducer("SlowDiskProducer", config=ProducerConfig(send_msg_timeout=5000),
                          client_config=client) as producer:
            producer.create_topic(TOPIC, 1)
            for i in range(8):
                statuses.append(producer.send(Message(TOPIC, f"slow-{i}".encode())).send_status)
        timeouts = statuses.count(SendStatus.FLUSH_DISK_TIMEOUT)
        print(f"injected: fsync delayed 400 ms, syncFlushTimeout 150 ms; measured: {timeouts} of 8 sends "
              f"answered FLUSH_DISK_TIMEOUT, the rest {sorted({s.value for s in statuses} - {'FLUSH_DISK_TIMEOUT'})}")
        assert timeouts >= 1 and set(statuses) <= {SendStatus.FLUSH_DISK_TIMEOUT, SendStatus.SEND_OK}

        monkeypatch.delenv("LAKEMQ_FAULT_FSYNC_DELAY_MS")
        cluster.restart_broker()  # a healthy disk again
        with SyncPullConsumer("SlowDiskReader", namesrv_addr=cluster.namesrv_addr) as reader:
            (mq,) = reader.fetch_subscribe_message_queues(TOPIC)
            result = reader.pull(mq, "*", 0, 32)
        assert [m.body for m in result.msgs] == [f"slow-{i}".encode() for i in range(8)]
