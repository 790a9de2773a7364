"""Apache RocketMQ itself as a peer: its own NameServer and broker run from the Maven jars
(rocketmq-namesrv / rocketmq-broker 4.9.7, the newest on Maven Central; bench/jvm.py), with
RocketMQ's runbroker.sh G1 settings and a 2 GiB heap, and the same broker.conf keys as the
lakemq peer (1 GiB CommitLog files, defaultTopicQueueNums=8, auto-created topics).

Each broker is driven two ways, as lakemq is: by lakemq's Python client (the same client, so
the comparison is the brokers'), and by Apache RocketMQ's Java client 4.9.8 (the Java bench
driver, tests/compat/java Bench; what RocketMQ users run). Durability: ``flushDiskType``
ASYNC_FLUSH or SYNC_FLUSH (RocketMQ's GroupCommitService: a send is answered once flushed).
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.jvm import (
    ROCKETMQ_GC,
    JvmUnavailable,
    ensure_groups,
    java_command,
    rocketmq_broker_port,
    rocketmq_home,
)
from bench.peers.base import Durability, Peer, PeerClient
from bench.peers.lakemq_peer import LakemqAsyncPeer, LakemqSyncPeer, RocketMQProtocolClient
from bench.peers.process import PeerUnavailable, free_port, wait_tcp, wait_until

__all__ = ["LakemqAsyncJavaPeer", "LakemqSyncJavaPeer", "RocketMQAsyncJavaPeer", "RocketMQAsyncPeer",
           "RocketMQSyncJavaPeer", "RocketMQSyncPeer"]

_QUEUES = 8
_BROKER_HEAP = "2g"


class _RocketMQPeer(Peer):
    flush_disk_type = "ASYNC_FLUSH"
    batch_note = "one SEND_BATCH_MESSAGE of 32 (stored together), one wait"

    def __init__(self) -> None:
        super().__init__()
        self.namesrv_addr = ""

    def start(self, workdir: Path) -> None:
        try:
            ensure_groups("rocketmq-server")
        except JvmUnavailable as exc:
            raise PeerUnavailable(str(exc)) from exc
        home = rocketmq_home(workdir / "home", workdir / "logs", "namesrv", "broker")
        env = {**os.environ, "ROCKETMQ_HOME": str(home)}
        namesrv_port, broker_port = free_port(), rocketmq_broker_port()
        self.namesrv_addr = f"127.0.0.1:{namesrv_port}"
        (workdir / "namesrv.conf").write_text(f"listenPort={namesrv_port}\n")
        (workdir / "broker.conf").write_text(
            "brokerClusterName=BenchCluster\n"
            "brokerName=bench-broker\n"
            "brokerId=0\n"
            "brokerIP1=127.0.0.1\n"
            f"listenPort={broker_port}\n"
            f"namesrvAddr={self.namesrv_addr}\n"
            f"storePathRootDir={workdir / 'store'}\n"
            f"storePathCommitLog={workdir / 'store' / 'commitlog'}\n"
            f"flushDiskType={self.flush_disk_type}\n"
            "autoCreateTopicEnable=true\n"
            f"defaultTopicQueueNums={_QUEUES}\n"
        )

        def java(main: str, conf: str, heap: str) -> list[str]:
            return java_command(main, ["-c", str(workdir / conf)], groups=("rocketmq-server",), heap=heap,
                                gc=ROCKETMQ_GC, options=(f"-Duser.home={home}",))

        namesrv = self.spawn("namesrv", java("org.apache.rocketmq.namesrv.NamesrvStartup", "namesrv.conf", "512m"),
                             env=env)
        wait_tcp(namesrv_port, 60, "Apache RocketMQ namesrv", namesrv.alive)
        broker = self.spawn("broker", java("org.apache.rocketmq.broker.BrokerStartup", "broker.conf", _BROKER_HEAP),
                            env=env)
        self.broker = broker
        wait_until(lambda: "boot success" in broker.log_tail(), 90, "Apache RocketMQ broker", broker.alive)

    def client(self) -> PeerClient:
        return RocketMQProtocolClient(self.namesrv_addr)


class RocketMQAsyncPeer(_RocketMQPeer):
    key = "rocketmq-async"
    title = "Apache RocketMQ 4.9.7, ASYNC_FLUSH"
    durability = Durability.ASYNC
    settings = "flushDiskType=ASYNC_FLUSH"
    flush_disk_type = "ASYNC_FLUSH"


class RocketMQSyncPeer(_RocketMQPeer):
    key = "rocketmq-sync"
    title = "Apache RocketMQ 4.9.7, SYNC_FLUSH"
    durability = Durability.SYNC
    settings = "flushDiskType=SYNC_FLUSH (GroupCommitService)"
    flush_disk_type = "SYNC_FLUSH"


class LakemqAsyncJavaPeer(LakemqAsyncPeer):
    key = "lakemq-async-java"
    title = "lakemq, ASYNC_FLUSH (Java client)"
    client_name = "java"


class LakemqSyncJavaPeer(LakemqSyncPeer):
    key = "lakemq-sync-java"
    title = "lakemq, SYNC_FLUSH (Java client)"
    client_name = "java"


class RocketMQAsyncJavaPeer(RocketMQAsyncPeer):
    key = "rocketmq-async-java"
    title = "Apache RocketMQ 4.9.7, ASYNC_FLUSH (Java client)"
    client_name = "java"


class RocketMQSyncJavaPeer(RocketMQSyncPeer):
    key = "rocketmq-sync-java"
    title = "Apache RocketMQ 4.9.7, SYNC_FLUSH (Java client)"
    client_name = "java"
