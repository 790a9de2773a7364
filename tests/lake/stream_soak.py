"""kill -9 the streaming driver at random points while producers run; then the Delta sink must
hold every acknowledged message exactly once.

    PYTHONPATH=$PWD .venv/bin/python -m tests.lake.stream_soak --kills 10 [--tier-every 3]

A real NameServer and broker on loopback (lakemq.launcher), a producer thread sending to a
4-queue topic and recording each acknowledged key, and ``tests.lake.stream_driver`` restarted
from its checkpoint after each kill (a driver JVM start each time: about a minute per kill on a
shared 2-core machine). Every ``--tier-every`` kills a ``lakemq tier run`` moves the lake's end,
so restarts cross the lake/broker switch. Exits 1 naming what is missing or doubled."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.topics import create_routed_topic
from lakemq.client.producer import Producer
from lakemq.common.message import Message
from lakemq.launcher import start_cluster
from tests.cluster import tier_run_process

TOPIC = "soak_orders"
BROKER = "broker-a"


def _produce(namesrv: str, acked: set[str], stop: threading.Event) -> None:
    async def go() -> None:
        await create_routed_topic(namesrv, TOPIC, queue_nums=4)
        async with Producer("soak_producer", namesrv_addr=namesrv) as producer:
            i = 0
            while not stop.is_set():
                key = f"k-{i}"
                msg = Message(TOPIC, key.encode())
                msg.keys = key
                await producer.send(msg)
                acked.add(key)
                i += 1
                await asyncio.sleep(0.03)  # some 25 a second: enough to cross every kind of kill point

    asyncio.run(go())


def _driver(namesrv: str, lake: Path, root: Path, until: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "tests.lake.stream_driver", "--namesrv", namesrv, "--lake", str(lake),
            "--topic", TOPIC, "--sink", str(root / "sink"), "--checkpoint", str(root / "checkpoint"),
            "--until", until, "--max-per-trigger", "300" if until == "killed" else "0"]
    # A session of its own: the kill takes the Python driver and its Spark JVM together, as a crash would.
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(root / "driver.log", "a"), text=True,
                            start_new_session=True)


def _wait_started(proc: subprocess.Popen[str], timeout: float) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        if line.startswith("started"):
            return
        if time.monotonic() > deadline:
            break
    raise SystemExit(f"the driver did not start (exit {proc.poll()}); see driver.log")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--tier-every", type=int, default=3)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    began = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="stream-soak-"))
    lake = root / "lake"
    print(f"seed {args.seed}, work in {root}", flush=True)
    with start_cluster(root, brokers=(BROKER,)) as cluster:
        acked: set[str] = set()
        stop = threading.Event()
        producer = threading.Thread(target=_produce, args=(cluster.namesrv_addr, acked, stop), daemon=True)
        producer.start()
        for kill in range(1, args.kills + 1):
            if args.tier_every and kill % args.tier_every == 0:
                # A driver JVM of its own beside the streaming driver's: minutes on a loaded machine.
                done = tier_run_process(root, root / BROKER / "store", lake, BROKER, "--no-retention", timeout=1200)
                assert done.returncode == 0, done.stderr[-2000:]
            proc = _driver(cluster.namesrv_addr, lake, root, "killed")
            _wait_started(proc, 600)
            time.sleep(rng.uniform(0, 8))  # the random point: before, inside or between micro-batches
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            print(f"kill {kill}: {len(acked)} acknowledged so far", flush=True)
        stop.set()
        producer.join(60)
        if not acked or producer.is_alive():
            raise SystemExit("the producer failed or did not stop; see the output above")
        final = _driver(cluster.namesrv_addr, lake, root, "caught-up")
        assert final.wait(1200) == 0, "the last driver failed; see driver.log"
    from deltalake import DeltaTable

    keys = DeltaTable(str(root / "sink")).to_pyarrow_table(columns=["keys"]).column("keys").to_pylist()
    doubled = len(keys) - len(set(keys))
    missing = acked - set(keys)
    print(f"{len(acked)} acknowledged, {len(keys)} in the sink, {doubled} doubled, {len(missing)} missing "
          f"({args.kills} kills, {time.monotonic() - began:.0f} s)")
    if doubled or missing:
        print(f"not exactly once: missing {sorted(missing)[:10]}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    # Past the verdict, skip the interpreter's teardown: a native library's thread has aborted
    # it ("terminate called without an active exception"), which would hide the exit code.
    os._exit(1 if doubled or missing else 0)


if __name__ == "__main__":
    main()
