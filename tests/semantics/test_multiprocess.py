"""Broadcasting and orderly consumption with consumers in separate processes
(tests/semantics/consumer_proc.py) against real NameServer and broker processes."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lakemq.client import Message, SyncProducer
from tests.cluster import Cluster

CONSUMER = Path(__file__).with_name("consumer_proc.py")


def events(out: Path, instance: str) -> list[dict]:
    path = out / f"{instance}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextmanager
def consumers(mode: str, ns: str, topic: str, group: str, names: list[str], out: Path,
              delay_ms: int = 0) -> Iterator[dict[str, subprocess.Popen[str]]]:
    procs = {name: subprocess.Popen([sys.executable, str(CONSUMER), mode, ns, topic, group, name, str(out),
                                     str(delay_ms)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
             for name in names}
    try:
        for name, proc in procs.items():
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY", f"{name} did not start"
        yield procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()


def test_broadcast_every_process_gets_every_message(cluster: Cluster, tmp_path: Path) -> None:
    ns, topic, names = cluster.namesrv_addr, "Broadcast", ["b1", "b2", "b3"]
    bodies = [f"m{i}" for i in range(30)]
    with SyncProducer("BroadcastProducer", namesrv_addr=ns) as producer:
        producer.create_topic(topic, 2)
        with consumers("broadcast", ns, topic, "BroadcastGroup", names, tmp_path):
            for body in bodies:
                producer.send(Message(topic, body.encode()))
            wait_until(lambda: all(len(events(tmp_path, n)) >= len(bodies) for n in names), 30,
                       "every process to get every message")
            time.sleep(0.5)  # a second delivery would show now
    for name in names:
        got = sorted(e["body"] for e in events(tmp_path, name))
        assert got == sorted(bodies), f"{name}: {got}"  # all of them, each exactly once
        assert {e["queue"] for e in events(tmp_path, name)} == {0, 1}


def _check_queue_order(name_events: dict[str, list[dict]], queue: int, count: int) -> int:
    """Per queue, in consumption time order: starts at 0, never skips ahead, goes back only
    when the queue changes hands (redelivery from the committed offset), ends at the last
    message. Returns how many were consumed twice."""
    timeline = sorted(((e["at"], name, int(e["body"].split("-")[1])) for name, evs in name_events.items()
                       for e in evs if e["queue"] == queue))
    seqs = [s for _, _, s in timeline]
    assert seqs and seqs[0] == 0 and max(seqs) == count - 1, (queue, seqs)
    for (_, owner, seq), (_, next_owner, next_seq) in itertools.pairwise(timeline):
        assert next_seq <= seq + 1, f"queue {queue} skipped from {seq} to {next_seq}"
        if next_seq <= seq:
            assert next_owner != owner, f"queue {queue} went back from {seq} to {next_seq} within {owner}"
    return len(seqs) - count


def test_orderly_keeps_per_queue_order_across_processes_and_a_rebalance(cluster: Cluster, tmp_path: Path) -> None:
    ns, topic, names = cluster.namesrv_addr, "OrderlyProcs", ["o1", "o2"]
    queues, per_queue = 4, 40
    with SyncProducer("OrderlyProducer", namesrv_addr=ns) as producer:
        producer.create_topic(topic, queues, order=True)
        mqs = sorted(producer.fetch_publish_message_queues(topic), key=lambda q: q.queue_id)

        def send(seqs: range) -> None:
            for seq in seqs:
                for mq in mqs:  # order k goes to queue k, its messages numbered 0, 1, 2 ...
                    producer.send(Message(topic, f"o{mq.queue_id}-{seq}".encode()), mq=mq)

        with consumers("orderly", ns, topic, "OrderlyGroup", names, tmp_path, delay_ms=30) as procs:
            send(range(10))
            wait_until(lambda: all(events(tmp_path, n) for n in names), 30, "both processes consuming")
            send(range(10, per_queue - 5))
            consumed_before_exit = sum(len(events(tmp_path, n)) for n in names)
            procs["o2"].send_signal(signal.SIGTERM)  # mid-stream: its queues move to o1
            assert procs["o2"].wait(30) == 0
            # Every queue gets messages after o2 is gone, so o1 must consume from each queue o2
            # held however far the two had got (on a loaded machine they may have read all).
            send(range(per_queue - 5, per_queue))
            wait_until(lambda: len({e["body"] for n in names for e in events(tmp_path, n)}) == queues * per_queue,
                       60, "every message")
            time.sleep(0.5)
    by_name = {n: events(tmp_path, n) for n in names}
    o2_exit = max(e["at"] for e in by_name["o2"])
    last_owner = {e["queue"]: name for name, evs in by_name.items() for e in sorted(evs, key=lambda e: e["at"])
                  if e["at"] <= o2_exit}
    o2_queues = {q for q, name in last_owner.items() if name == "o2"}  # what o2 held when it exited
    o1_after = {e["queue"] for e in by_name["o1"] if e["at"] > o2_exit}
    duplicates = sum(_check_queue_order(by_name, q, per_queue) for q in range(queues))
    print(f"consumed {consumed_before_exit} of {queues * per_queue} before o2 exited; o2 had queues "
          f"{sorted(o2_queues)}; o1 consumed from {sorted(o1_after)} after; {duplicates} consumed twice")
    assert o2_queues and o2_queues <= o1_after  # the queues o2 held moved to o1
    assert consumed_before_exit < queues * per_queue  # the exit really was mid-stream
    assert duplicates <= 2 * len(o2_queues)  # at most one pull batch (2) per queue handed over
