"""Timer message benchmark: how late timer messages are delivered when many fall due in the
same minute.

    .venv/bin/python bench/timer_bench.py [--timers N] [--window S] [--senders T] [--write-md]

A real ``lakemq broker`` process on loopback (lakemq.launcher, ASYNC_FLUSH, a deployment's
1 GiB CommitLog files). T threads of lakemq's sync producer send N messages with
TIMER_DELIVER_MS spread evenly over one window of S seconds (default: 100,000 over 60 s) that
starts once every send is acknowledged, so no message is due while sends are still going.
Then a pull consumer reads the topic until all N are there. A message's lateness is its
delivered copy's store time minus its due time (TIMER_OUT_MS): when the broker's timer put it
back under its topic. Early deliveries (negative lateness) and duplicates are counted; both
must be 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.markdown import replace_section
from lakemq.client import Message, SyncProducer, SyncPullConsumer
from lakemq.client.config import ClientConfig, ProducerConfig
from lakemq.common.message import MessageConst
from lakemq.errors import LakeMQError
from lakemq.launcher import start_cluster

SECTION = "## Timer messages (bench/timer_bench.py)"
TOPIC = "TimerBench"
MIB = 1 << 20


def _send(ns: str, index: int, dues: list[int], failures: list[str]) -> None:
    config = ProducerConfig(retry_times_when_send_failed=0, send_msg_timeout=10_000)
    client = ClientConfig(namesrv_addr=ns, instance_name=f"timer-bench-{index}")
    with SyncProducer(f"TimerBench{index}", config=config, client_config=client) as producer:
        for due in dues:
            msg = Message(TOPIC, b"x" * 64)
            msg.properties[MessageConst.TIMER_DELIVER_MS] = str(due)
            try:
                producer.send(msg)
            except LakeMQError as exc:  # counted: the check below fails the run
                failures.append(repr(exc))


def _percentile(sorted_values: list[int], p: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def run(timers: int, window_s: float, senders: int, lead_s: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lakemq-timer-bench-") as tmp, \
            start_cluster(Path(tmp), broker_conf={"mappedFileSizeCommitLog": str(1024 * MIB)}) as cluster:
        ns = cluster.namesrv_addr
        with SyncProducer("TimerBenchSetup", namesrv_addr=ns) as setup:
            setup.create_topic(TOPIC, 4)
        began = time.time()
        window_start = int((began + lead_s) * 1000)
        dues = [window_start + int(i * window_s * 1000 / timers) for i in range(timers)]
        failures: list[str] = []
        threads = [threading.Thread(target=_send, args=(ns, t, dues[t::senders], failures)) for t in range(senders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        sent_s = time.time() - began
        if failures:
            raise SystemExit(f"{len(failures)} sends failed, e.g. {failures[0]}")
        if time.time() * 1000 >= window_start:
            raise SystemExit(f"sending took {sent_s:.1f} s, past the window's start: raise --lead")
        print(f"sent: {timers} timers in {sent_s:.1f} s ({timers / sent_s:,.0f}/s), due over {window_s:.0f} s "
              f"from {window_start - int(began * 1000)} ms after the start", flush=True)
        lateness: list[int] = []
        seen: set[str] = set()
        duplicates = 0
        deadline = window_start / 1000 + window_s + 120
        with SyncPullConsumer("TimerBenchReader", namesrv_addr=ns) as reader:
            queues = reader.fetch_subscribe_message_queues(TOPIC)
            offsets = {mq: 0 for mq in queues}
            while len(seen) < timers:
                if time.time() > deadline:
                    raise SystemExit(f"only {len(seen)} of {timers} delivered 120 s after the window")
                moved = False
                for mq in queues:
                    result = reader.pull(mq, "*", offsets[mq], 32)
                    for msg in result.msgs:
                        if msg.msg_id in seen:
                            duplicates += 1
                            continue
                        seen.add(msg.msg_id)
                        lateness.append(msg.store_timestamp - int(msg.properties[MessageConst.TIMER_OUT_MS]))
                    moved |= result.next_begin_offset > offsets[mq]
                    offsets[mq] = result.next_begin_offset
                if not moved:
                    time.sleep(0.05)
    lateness.sort()
    return {"timers": timers, "window_s": window_s, "send_rate": timers / sent_s,
            "p50": _percentile(lateness, 0.50), "p99": _percentile(lateness, 0.99), "max": lateness[-1],
            "early": sum(1 for v in lateness if v < 0), "duplicates": duplicates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timers", type=int, default=100_000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds the due times are spread over")
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--lead", type=float, default=None,
                        help="seconds from the start to the window (default: enough to send everything)")
    parser.add_argument("--write-md", action="store_true", help="rewrite this section of BENCHMARKS.md")
    args = parser.parse_args()
    lead = args.lead if args.lead is not None else 5 + args.timers / 1_000
    r = run(args.timers, args.window, args.senders, lead)
    print(f"lateness: p50 {r['p50']} ms, p99 {r['p99']} ms, max {r['max']} ms; early {r['early']}, "
          f"duplicates {r['duplicates']}")
    if r["early"] or r["duplicates"]:
        raise SystemExit("a timer message was delivered early or twice")
    if args.write_md:
        command = " ".join(["bench/timer_bench.py", *sys.argv[1:]])
        replace_section(f"""{SECTION}

{r['timers']:,} timer messages (TIMER_DELIVER_MS) due evenly over one {r['window_s']:.0f} s window, sent
before the window by {args.senders} sync producer threads ({r['send_rate']:,.0f} sends/s), delivered by one
broker (ASYNC_FLUSH) on {platform.machine()} with {os.cpu_count()} cores, {platform.python_version()}.
Lateness = the delivered copy's store time - its due time.

| timers | p50 lateness | p99 lateness | max | early | duplicates |
|---:|---:|---:|---:|---:|---:|
| {r['timers']:,} | {r['p50']} ms | {r['p99']} ms | {r['max']} ms | {r['early']} | {r['duplicates']} |

Command: `.venv/bin/python {command}`
""")


if __name__ == "__main__":
    main()
