"""RocketMQ 5's clients (gRPC) beside the 4.x remoting clients, against one lakemq broker.

    .venv/bin/python bench/rmq5_bench.py [--messages N] [--clients a,b] [--write]

One `lakemq namesrv` and one `lakemq broker` (gRPC front door on, permissive TLS: plaintext
and TLS on one port) run on loopback for the whole run; each client gets a topic of 8 queues
of its own and, in turn (never two at once):

- ``lakemq-py`` (remoting), lakemq's asyncio client in this process: ``send_batch`` of 32
  messages from 4 tasks on one Producer; then, once the ConsumeQueues hold every message sent,
  a PullConsumer pulls 32 at a time, every queue to its end in its own task (as RocketMQ's
  LitePullConsumer pulls its queues);
- ``java-4x`` (remoting), Apache RocketMQ's 4.9 Java client (tests/compat/java's Bench, the
  peer benchmark's driver): its fastest send shape, 16 producer threads each sending batches
  of 32, for a fixed time; then one PushConsumer (batches of 32) reads the topic;
- ``python-5x`` (gRPC, plaintext), rocketmq-python-client 5.1.2 in .venv-rmq5
  (bench/rmq5_client.py): ``send_async`` with IN_FLIGHT outstanding, then a PushConsumer on
  its defaults (receive batches of 32, 20 consumption threads);
- ``java-5x`` (gRPC over TLS, the client's default), rocketmq-client-java 5.2.0
  (tests/rmq5/java's Rmq5Bench): the same as python-5x.

A 5.x client sends one message per SendMessage (neither offers batches); the 4.x ones batch.
Each phase reports messages/s and the broker's CPU per message (utime + stime of the broker
process from /proc/PID/stat, read around the phase). Rates move with whatever else the
machine runs: compare the clients within one run (the 4.9 Java client's one-message sends are
reported too, the like-for-like figure). ``--write`` replaces the "## RocketMQ 5 clients"
section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `bench` and `lakemq` importable
    sys.path.insert(0, str(ROOT))

from bench.jvm import java_command
from bench.markdown import replace_section
from bench.peers.cpu import process_cpu_seconds
from lakemq.client import Message, Producer, PullConsumer, PullStatus, SyncProducer
from lakemq.client.config import ClientConfig
from lakemq.common.message_queue import MessageQueue
from lakemq.launcher import reserved_port, start_cluster

CLIENTS = ("lakemq-py", "java-4x", "python-5x", "java-5x")
TITLES = {"lakemq-py": "lakemq's Python client (remoting)", "java-4x": "RocketMQ Java client 4.9 (remoting)",
          "python-5x": "rocketmq-python-client 5.1.2 (gRPC)", "java-5x": "rocketmq-client-java 5.2.0 (gRPC, TLS)"}
HOW = {"lakemq-py": "send_batch of 32 from 4 tasks; PullConsumer, pull(32) per queue task",
       "java-4x": "16 threads sending batches of 32; PushConsumer, batches of 32",
       "python-5x": "send_async, {in_flight} in flight; PushConsumer defaults",
       "java-5x": "sendAsync, {in_flight} in flight; PushConsumer defaults"}
BATCH = 32
SENDERS = 4


@dataclass
class Phase:
    messages: int
    seconds: float
    cpu_seconds: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us(self) -> float:
        return self.cpu_seconds / max(self.messages, 1) * 1e6


@dataclass
class Result:
    client: str
    send: Phase
    receive: Phase
    single: Phase | None = None  # java-4x: one message a send, the 5.x clients' only way


def _create_topic(namesrv: str, topic: str) -> None:
    with SyncProducer("rmq5-bench-admin", namesrv_addr=namesrv) as admin:
        admin.create_topic(topic, 8)
        deadline = time.monotonic() + 30
        while not admin.fetch_publish_message_queues(topic):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no route to {topic}")
            time.sleep(0.2)


async def _lakemq_py(namesrv: str, topic: str, count: int, size: int, pid: int) -> Result:
    body = bytes(size)
    config = ClientConfig(namesrv_addr=namesrv, instance_name="rmq5-bench")
    producer = Producer("rmq5-bench-pg", client_config=config)
    await producer.start()

    async def sender(batches: int) -> None:
        for _ in range(batches):
            await producer.send_batch([Message(topic, body) for _ in range(BATCH)])

    try:
        await sender(4)  # warm: route, connection
        batches = -(-count // (BATCH * SENDERS))  # at least ``count``, in whole batches from each task
        cpu, start = process_cpu_seconds([pid]), time.monotonic()
        await asyncio.gather(*(sender(batches) for _ in range(SENDERS)))
        send = Phase(batches * BATCH * SENDERS, time.monotonic() - start, process_cpu_seconds([pid]) - cpu)
    finally:
        await producer.shutdown()
    consumer = PullConsumer("rmq5-bench-pull", client_config=config)
    await consumer.start()
    try:
        queues = await consumer.fetch_subscribe_message_queues(topic)
        # A send's answer does not wait for the ConsumeQueue: read to the ends it has once it
        # holds every message sent (the warm batches too), not to the first empty pull.
        sent_in_all = (4 + SENDERS * batches) * BATCH
        deadline = time.monotonic() + 60
        while sum(ends := await asyncio.gather(*(consumer.max_offset(mq) for mq in queues))) < sent_in_all:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the ConsumeQueues of {topic} never held all {sent_in_all} messages")
            await asyncio.sleep(0.1)
        received = 0

        async def read(mq: MessageQueue, end: int) -> None:
            nonlocal received
            offset = 0
            while offset < end:
                result = await consumer.pull(mq, "*", offset, BATCH)
                if result.pull_status is not PullStatus.FOUND:
                    raise RuntimeError(f"pull of {mq} at {offset} found {result.pull_status.name} below {end}")
                received += len(result.msgs)
                offset = result.next_begin_offset

        cpu, start = process_cpu_seconds([pid]), time.monotonic()
        await asyncio.gather(*(read(mq, end) for mq, end in zip(queues, ends, strict=True)))
        receive = Phase(received, time.monotonic() - start, process_cpu_seconds([pid]) - cpu)
    finally:
        await consumer.shutdown()
    return Result("lakemq-py", send, receive)


def _lines(argv: list[str], cwd: Path, timeout: float) -> list[dict[str, object]]:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv[:3])} ... exited {done.returncode}: {done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _phase(line: dict[str, object]) -> Phase:
    return Phase(int(str(line["messages"])), float(str(line["seconds"])), float(str(line["cpu_seconds"])))


def _java_4x(namesrv: str, count: int, size: int, pid: int, work: Path) -> Result:
    """Bench runs its send shapes for a time each (the last, 16 threads of batches, is the one
    reported), then its consume phase, then latency phases (not reported). Its own CPU reading
    takes a session id, and the broker shares this process's session: the broker's CPU is read
    here as each phase's line arrives (phases follow one another at once)."""
    seconds = max(count / 10_000, 1.0)
    args = {"namesrv": namesrv, "body-size": size, "phase-seconds": seconds, "producers": 16, "batch": BATCH,
            "consume-timeout": 300, "rates": 200, "latency-seconds": 1, "drain-timeout": 5, "max-in-flight": 64,
            "queues": 8, "warmup-seconds": 2}
    argv = java_command("org.lakemq.compat.Bench", [x for k, v in args.items() for x in (f"--{k}", str(v))],
                        heap="1g", options=(f"-Duser.home={work}", f"-Drocketmq.client.logRoot={work / 'logs'}"))
    lines: list[tuple[dict[str, object], float]] = []
    with subprocess.Popen(argv, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as proc:
        assert proc.stdout is not None
        for text in proc.stdout:
            if text.startswith("{"):
                lines.append((json.loads(text), process_cpu_seconds([pid])))
        proc.wait(900)
    errors = [line for line, _ in lines if line.get("phase") == "error"]
    if errors or proc.returncode != 0:
        raise RuntimeError(f"the Java 4.x bench failed ({proc.returncode}): {errors[:1]}")
    at = next(i for i, (line, _) in enumerate(lines) if line.get("kind") == "produce" and line.get("batch") == BATCH)
    consumed = next(i for i, (line, _) in enumerate(lines) if line.get("kind") == "consume")
    single = next(i for i, (line, _) in enumerate(lines) if line.get("kind") == "produce" and line.get("batch") == 1
                  and line.get("producers") == 16)

    def phase(i: int, since: int) -> Phase:
        line = lines[i][0]
        return Phase(int(str(line["messages"])), float(str(line["seconds"])), lines[i][1] - lines[since][1])

    return Result("java-4x", phase(at, at - 1), phase(consumed, at), phase(single, single - 1))


def _five(client: str, endpoint: str, topic: str, count: int, size: int, in_flight: int, pid: int,
          work: Path) -> Result:
    args = [endpoint, topic, f"{topic}-group", str(count), str(size), str(in_flight), str(pid)]
    if client == "python-5x":
        python = subprocess.run(["bash", str(ROOT / "scripts" / "rmq5_env.sh")], capture_output=True, text=True,
                                timeout=600, check=True).stdout.strip().splitlines()[-1]
        argv = [python, str(ROOT / "bench" / "rmq5_client.py"), *args]
    else:
        argv = java_command("org.lakemq.rmq5.Rmq5Bench", args, groups=("rmq5-driver",), heap="1g",
                            options=(f"-Duser.home={work}",))
    lines = {str(line["phase"]): _phase(line) for line in _lines(argv, work, 900)}
    return Result(client, lines["send"], lines["receive"])


def run(clients: list[str], count: int, size: int, in_flight: int) -> tuple[list[Result], tuple[float, float]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="rmq5-bench-") as tmp:
        root = Path(tmp)
        grpc_port = reserved_port()
        # autoCreateTopicEnable: the 4.x Java Bench creates its topics through TBW102's route.
        conf = {"grpcListenPort": str(grpc_port), "autoCreateTopicEnable": "true"}
        with start_cluster(root, broker_conf=conf) as cluster:
            pid = cluster.brokers["broker-a"].proc.pid
            namesrv = cluster.namesrv_addr
            load_before = os.getloadavg()[0]
            for client in clients:
                work = root / client
                work.mkdir()
                topic = f"rmq5bench_{client.replace('-', '_')}"
                _create_topic(namesrv, topic)
                print(f"{TITLES[client]} ...", flush=True)
                if client == "lakemq-py":
                    result = asyncio.run(_lakemq_py(namesrv, topic, count, size, pid))
                elif client == "java-4x":
                    try:
                        result = _java_4x(namesrv, count, size, pid, work)
                    except RuntimeError as exc:
                        # The 4.9 client gives the NameServer 3 s per call (mqClientApiTimeout): on a
                        # machine loaded past 20 its first route look-up can miss that. Once more.
                        print(f"  again after: {exc}", flush=True)
                        result = _java_4x(namesrv, count, size, pid, work)
                else:
                    result = _five(client, f"127.0.0.1:{grpc_port}", topic, count, size, in_flight, pid, work)
                results.append(result)
                print(f"  send {result.send.messages:,} msgs {result.send.rate:,.0f} msg/s broker "
                      f"{result.send.cpu_us:.0f} us/msg; receive {result.receive.messages:,} msgs "
                      f"{result.receive.rate:,.0f} msg/s broker {result.receive.cpu_us:.0f} us/msg", flush=True)
            load_after = os.getloadavg()[0]
    return results, (load_before, load_after)


def section(results: list[Result], command: str, size: int, in_flight: int, load: tuple[float, float]) -> str:
    rows = "\n".join(
        f"| {TITLES[r.client]} | {HOW[r.client].format(in_flight=in_flight)} | {r.send.messages:,} | "
        f"{r.send.rate:,.0f} | {r.send.cpu_us:,.0f} | {r.receive.messages:,} | {r.receive.rate:,.0f} | "
        f"{r.receive.cpu_us:,.0f} |" for r in results)
    return (
        "## RocketMQ 5 clients (bench/rmq5_bench.py)\n\n"
        f"`{command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: one lakemq "
        f"broker on loopback, {size}-byte bodies, each client on its own topic of 8 queues in turn. Broker CPU is "
        "the broker process's utime + stime per message over the phase. The machine has 2 cores shared with "
        f"other work: load average {load[0]:.1f} when the run started and {load[1]:.1f} when it ended, so "
        "rates are this run's; compare the clients with one another.\n\n"
        "| client | how it is run | sent | send msg/s | broker CPU us/msg | received | receive msg/s | "
        "broker CPU us/msg |\n|---|---|---|---|---|---|---|---|\n" + rows + "\n" + "".join(
            f"\nThe same run's 4.9 Java client sending one message a request (16 threads, synchronous sends), "
            f"as the 5.x clients must: {r.single.messages:,} messages, {r.single.rate:,.0f} msg/s, broker CPU "
            f"{r.single.cpu_us:,.0f} us/msg.\n" for r in results if r.single is not None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages each client sends (default 20,000)")
    parser.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    parser.add_argument("--in-flight", type=int, default=64, help="5.x clients' outstanding async sends")
    parser.add_argument("--clients", default=",".join(CLIENTS), help=f"comma-separated subset of {', '.join(CLIENTS)}")
    parser.add_argument("--write", action="store_true", help="replace the section of BENCHMARKS.md")
    args = parser.parse_args()
    clients = args.clients.split(",")
    unknown = sorted(set(clients) - set(CLIENTS))
    if unknown:
        parser.error(f"unknown client(s): {', '.join(unknown)}")
    results, load = run(clients, args.messages, args.size, args.in_flight)
    text = section(results, shlex.join(["python", "bench/rmq5_bench.py", *sys.argv[1:]]), args.size,
                   args.in_flight, load)
    print(text)
    if args.write:
        replace_section(text)


if __name__ == "__main__":
    main()
