"""kill -9 of one of three consumer processes in a clustering group: its queues go to the
others within one rebalance period, and consumption resumes from the committed offsets.

At-least-once: only what the dead consumer took after its last offset commit can come again,
so duplicates are bounded by (offset persist interval + takeover time) x send rate."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lakemq.client import Message, SyncProducer
from tests.cluster import Cluster, start_cluster

# Kills, restarts or starves real processes, round after round.
pytestmark = pytest.mark.slow

CONSUMER = Path(__file__).resolve().parents[1] / "client" / "consumer_proc.py"
REBALANCE_S = 1.0  # consumer_proc.py's rebalance_interval
PERSIST_S = 1.0  # consumer_proc.py's persist_consumer_offset_interval
RATE = 200  # messages per second
QUEUES = {f"broker-a:{i}" for i in range(4)}


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


def _owned(path: Path) -> set[str]:
    return set(filter(None, path.read_text().split("\n"))) if path.exists() else set()


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if condition():
            return time.monotonic() - began
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_queues_move_on_and_duplicates_stay_bounded(tmp_path: Path) -> None:
    with start_cluster(tmp_path / "cluster", broker_conf={"accessMessageInMemoryMaxRatio": "0"}) as cluster:
        _run(cluster, tmp_path)


def _run(cluster: Cluster, out: Path) -> None:
    ns, topic, group = cluster.namesrv_addr, "ConsumerKill", "ConsumerKillGroup"
    with SyncProducer("ConsumerKillProducer", namesrv_addr=ns) as producer:
        producer.create_topic(topic, 4)
        names = ("c1", "c2", "c3")
        procs = {n: subprocess.Popen([sys.executable, str(CONSUMER), ns, topic, group, n, str(out)],
                                     stdout=subprocess.PIPE, text=True) for n in names}
        try:
            for proc in procs.values():
                assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
            _wait(lambda: set().union(*(_owned(out / f"{n}.owned") for n in names)) == QUEUES
                  and _owned(out / "c3.owned"), "all three owning queues")
            sent = 0

            def send_for(seconds: float) -> None:
                nonlocal sent
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    producer.send(Message(topic, f"m{sent}".encode()))
                    sent += 1
                    time.sleep(1 / RATE)

            send_for(2.0)
            victim_had = _owned(out / "c3.owned")
            procs["c3"].kill()  # SIGKILL: no unregister, no final offset commit
            procs["c3"].wait(10)
            takeover = _wait(lambda: _owned(out / "c1.owned") | _owned(out / "c2.owned") == QUEUES,
                             "c1 and c2 owning every queue")
            send_for(2.0)
            _wait(lambda: {f"m{i}" for i in range(sent)} <= set().union(
                *(_lines(out / f"{n}.msgs") for n in names)), "every message consumed")
            time.sleep(0.5)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)
                if proc.stdout is not None:
                    proc.stdout.close()
    consumed = [line for n in names for line in _lines(out / f"{n}.msgs")]
    duplicates = len(consumed) - len(set(consumed))
    bound = int((PERSIST_S + REBALANCE_S + 1.0) * RATE)
    print(f"injected: SIGKILL of consumer c3 (owned {sorted(victim_had)}) under {RATE} msg/s; measured: queues "
          f"taken over in {takeover:.2f} s, {len(set(consumed))} of {sent} consumed, {duplicates} duplicates "
          f"(bound {bound})")
    assert takeover <= REBALANCE_S + 2.0, f"takeover took {takeover:.2f} s"
    assert set(consumed) == {f"m{i}" for i in range(sent)}
    redelivered = {m for m in consumed if consumed.count(m) > 1}
    assert redelivered <= set(_lines(out / "c3.msgs")), "only what the dead consumer took may come again"
    assert duplicates <= bound
