"""Apache Kafka's own broker as a benchmark peer (bench/peers/kafka_peer.py): one KRaft node from
the jvm/kafka jars, driven by confluent-kafka with acks=all, round-trips messages, runs with the
flush setting its row claims, reads the broker's CPU time, and leaves no process behind."""

from __future__ import annotations

import asyncio
import os

import pytest

from bench.peers.kafka_peer import KafkaFsyncPeer
from bench.peers.process import PeerUnavailable

pytestmark = [pytest.mark.jvm, pytest.mark.slow, pytest.mark.timeout(300)]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] == "Z"


async def _round_trip(peer: KafkaFsyncPeer) -> list[bytes]:
    client = peer.client()
    await client.create_topic("harness")
    producer = await client.producer("harness")
    await producer.send(b"one")
    await producer.send_batch([b"two", b"three"])
    await producer.close()
    bodies: list[bytes] = []
    assert await client.consume("harness", "g1", 3, bodies.append, timeout=60) == 3
    await client.close()
    return bodies


def test_kafka_peer_round_trip_flush_cpu_and_clean_stop() -> None:
    peer = KafkaFsyncPeer()
    try:
        peer.__enter__()
    except PeerUnavailable as exc:
        pytest.skip(f"Apache Kafka needs the jvm/kafka group (scripts/test.sh fetches it with "
                    f"scripts/jvm_deps.sh kafka; Maven and java) and confluent-kafka: {exc}")
    try:
        broker = peer.broker
        assert broker is not None
        # The broker took the fsync-per-append setting the SYNC_FLUSH row is labelled with.
        assert "log.flush.interval.messages = 1" in broker.log_path.read_text(errors="replace")
        before = peer.cpu_seconds()
        assert sorted(asyncio.run(_round_trip(peer))) == [b"one", b"three", b"two"]
        assert peer.cpu_seconds() > before > 0  # the broker JVM's own CPU time
        pids = [p.pid for p in peer.processes]
    finally:
        peer.__exit__(None, None, None)
    assert all(_gone(pid) for pid in pids)
