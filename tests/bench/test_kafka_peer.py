"""Apache Kafka's own broker as a benchmark peer (bench/peers/kafka_peer.py): one KRaft node from
the jvm/kafka jars, driven by confluent-kafka with acks=all, round-trips messages, runs with the
flush setting its row claims, reads the broker's CPU time, and leaves no process behind."""

from __future__ import annotations

import asyncio

import pytest

from bench.peers.kafka_peer import KafkaFsyncPeer
from bench.peers.process import PeerUnavailable
from tests.bench.peer_checks import gone, round_trip

pytestmark = [pytest.mark.jvm, pytest.mark.slow, pytest.mark.timeout(300)]


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
        assert sorted(asyncio.run(round_trip(peer, timeout=60))) == [b"one", b"three", b"two"]
        assert peer.cpu_seconds() > before > 0  # the broker JVM's own CPU time
        pids = [p.pid for p in peer.processes]
    finally:
        peer.__exit__(None, None, None)
    assert all(gone(pid) for pid in pids)
