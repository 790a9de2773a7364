"""Replication benchmark: the same send load against a broker with no slave, an
ASYNC_MASTER with a slave and a SYNC_MASTER with a slave, in one run; and how fast an empty
slave catches up with a master that already holds a large CommitLog file.

    .venv/bin/python bench/ha_bench.py [--quick] [--duration S] [--producers N] [--catch-up-mib M]
                                       [--flush SYNC_FLUSH] [--write-md]

Every broker is a real ``lakemq broker`` process on loopback (lakemq.launcher), each setup
on a fresh store. The load is bench/broker_load.py's: closed-loop sync sends of 1 KiB
bodies, one TCP connection per producer in its own thread, spread over client processes;
each send's latency is the time from writing its request to reading its response, so a
SYNC_MASTER's wait for its slave is in it. Catch-up: a master's store is filled in-process
with 16 KiB messages in one CommitLog file, the master started on it, then an empty slave
(which starts at the master's last file, as RocketMQ's does); the rate is the bytes over the
time from the slave's start to its max offset reaching the master's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.broker_bench import cpu_seconds, create_topics
from bench.broker_load import BODY_SIZE, Job, run_jobs
from bench.markdown import replace_section
from lakemq.client.admin import Admin
from lakemq.common.codes import ResponseCode
from lakemq.common.config import bind
from lakemq.common.message import MessageExtBrokerInner
from lakemq.launcher import SMALL_STORE, Cluster, start_cluster
from lakemq.store.config import StoreConfig
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut

SECTION = "## Replication (bench/ha_bench.py)"
MIB = 1 << 20
SETUPS = (("no slave", "ASYNC_MASTER", False), ("ASYNC_MASTER + slave", "ASYNC_MASTER", True),
          ("SYNC_MASTER + slave", "SYNC_MASTER", True))
# Brokers as a deployment would run them (1 GiB CommitLog files), not the tests' small stores.
BROKER = {"mappedFileSizeCommitLog": str(1024 * MIB), "haSendHeartbeatInterval": "1000",
          "registerNameServerPeriod": "2000"}


def _runtime(ns: str, addr: str) -> dict[str, str]:
    async def go() -> dict[str, str]:
        async with Admin(ns) as admin:
            return await admin.broker_runtime_info(addr)
    return asyncio.run(go())


def _start(cluster: Cluster, role: str, with_slave: bool) -> None:
    cluster.add_broker("broker-a", {**BROKER, "brokerRole": role})
    if with_slave:
        cluster.add_broker("broker-a-s", {**BROKER, "brokerName": "broker-a", "brokerRole": "SLAVE",
                                          "brokerId": "1"})
        deadline = time.monotonic() + 30
        while _runtime(cluster.namesrv_addr, cluster.broker_addr("broker-a")).get("haConnectedSlaves") != "1":
            if time.monotonic() > deadline:
                raise RuntimeError("the slave did not connect")
            time.sleep(0.1)


def _pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")


def send_load(root: Path, role: str, with_slave: bool, producers: int, processes: int,
              duration: float) -> dict[str, float]:
    with start_cluster(root, brokers=()) as cluster:
        _start(cluster, role, with_slave)
        master = cluster.broker_addr("broker-a")
        create_topics(cluster.namesrv_addr, ["BenchHa"])
        pid = cluster.brokers["broker-a"].proc.pid
        cpu = cpu_seconds(pid)
        start = time.monotonic() + 1.5 + 0.5 * processes
        results = run_jobs([Job("send", master, "BenchHa", i, start, duration) for i in range(producers)], processes)
        cpu = cpu_seconds(pid) - cpu
        lat = sorted(x for r in results for x in r["latencies"])
        messages = sum(r["messages"] for r in results)
        codes: dict[int, int] = {}
        for r in results:
            for code, n in r["codes"].items():
                codes[code] = codes.get(code, 0) + n
        out = {"rate": messages / duration, "messages": messages, "p50": _pct(lat, 50), "p99": _pct(lat, 99),
               "p999": _pct(lat, 99.9), "cpu_us": cpu / max(messages, 1) * 1e6,
               "errors": sum(codes.values()), "codes": ", ".join(
                   f"{ResponseCode(c).name} {n}" for c, n in sorted(codes.items())) or "-"}
        if with_slave:  # how long after the load the slave still needed
            ended = time.monotonic()
            while True:
                info = _runtime(cluster.namesrv_addr, master)
                if info.get("slaveFallBehindBytes") == "0":
                    break
                if time.monotonic() - ended > 120:
                    raise RuntimeError(f"the slave did not catch up: {info}")
                time.sleep(0.05)
            out["behind_s"] = time.monotonic() - ended
        return out


def fill_store(root: Path, total: int) -> int:
    config = bind(StoreConfig, {**SMALL_STORE, **BROKER}, store_path_root_dir=str(root))
    store = MessageStore(config)
    assert store.load()
    store.start()
    try:
        body = os.urandom(16 * 1024)
        i = 0
        while store.get_max_phy_offset() < total:
            batch = [MessageExtBrokerInner(topic="CatchUp", body=body, queue_id=(i + k) % 8, born_timestamp=1,
                                           born_host="127.0.0.1:1") for k in range(64)]
            if not store.put(MessagesPut(tuple(batch))).is_ok:
                raise RuntimeError("filling the store failed")
            i += 64
        return store.get_max_phy_offset()
    finally:
        store.shutdown()


def catch_up(root: Path, total: int) -> dict[str, float]:
    end = fill_store(root / "broker-a" / "store", total)
    with start_cluster(root, brokers=()) as cluster:
        cluster.add_broker("broker-a", BROKER)
        started = time.monotonic()
        cluster.add_broker("broker-a-s", {**BROKER, "brokerName": "broker-a", "brokerRole": "SLAVE", "brokerId": "1"})
        booted = time.monotonic() - started
        slave = cluster.broker_addr("broker-a-s")
        while int(_runtime(cluster.namesrv_addr, slave)["commitLogMaxOffset"]) < end:
            if time.monotonic() - started > 600:
                raise RuntimeError("the slave did not catch up in 10 minutes")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
    return {"mib": end / MIB, "seconds": elapsed, "boot": booted, "mib_s": end / MIB / elapsed}


def report(loads: dict[str, dict[str, float]], cu: dict[str, float], producers: int) -> str:
    lines = [(f"| setup | sync sends/s ({producers} producers) | p50 ms | p99 ms | p99.9 ms | broker CPU per msg "
              "| non-SUCCESS answers | slave behind after the load |"), "|---|---:|---:|---:|---:|---:|---|---:|"]
    for name, _, with_slave in SETUPS:
        m = loads[name]
        behind = f"{m['behind_s']:.2f} s" if with_slave else "-"
        lines.append(f"| {name} | {m['rate']:,.0f} | {m['p50']:.2f} | {m['p99']:.2f} | {m['p999']:.2f} "
                     f"| {m['cpu_us']:.0f} us | {m['codes']} | {behind} |")
    lines += ["", (f"An empty slave took the master's {cu['mib']:,.0f} MiB in {cu['seconds']:.1f} s from its start "
                   f"(its boot, {cu['boot']:.1f} s, included): **{cu['mib_s']:,.0f} MiB/s**.")]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 s phases, 128 MiB catch-up: a smoke run")
    ap.add_argument("--duration", type=float, help="seconds of load per setup [10; --quick 2]")
    ap.add_argument("--producers", type=int, default=16, help="sync producers [16]")
    ap.add_argument("--send-processes", type=int, default=4, help="client processes [4]")
    ap.add_argument("--catch-up-mib", type=int, help="MiB the master holds for the catch-up [1000; --quick 128]")
    ap.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH",
                    help="the brokers' flushDiskType [ASYNC_FLUSH]")
    ap.add_argument("--write-md", action="store_true", help="write the results into BENCHMARKS.md")
    args = ap.parse_args()
    BROKER["flushDiskType"] = args.flush
    duration = args.duration or (2.0 if args.quick else 10.0)
    catch_up_mib = args.catch_up_mib or (128 if args.quick else 1000)
    work = Path(tempfile.mkdtemp(prefix="ha_bench_"))
    try:
        loads = {}
        for i, (name, role, with_slave) in enumerate(SETUPS):
            loads[name] = send_load(work / f"load{i}", role, with_slave, args.producers, args.send_processes,
                                    duration)
            m = loads[name]
            print(f"{name}: {m['rate']:,.0f} msg/s, p99 {m['p99']:.2f} ms, answers not SUCCESS: {m['codes']}",
                  flush=True)
        cu = catch_up(work / "catch_up", catch_up_mib * MIB)
        print(f"catch-up: {cu['mib']:,.0f} MiB in {cu['seconds']:.1f} s ({cu['mib_s']:,.0f} MiB/s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = report(loads, cu, args.producers)
    print(table)
    if args.write_md:
        command = " ".join(["python", "bench/ha_bench.py", *sys.argv[1:]])
        smoke = "**Smoke run** (`--quick`): too short for stable figures.\n\n" if args.quick else ""
        replace_section(
            f"{SECTION}\n\nMeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with:\n\n```\n{command}\n"
            f"```\n\nMachine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; "
            "the NameServer, the brokers and the client processes share them.\n\n"
            f"Setup: one NameServer and broker-a ({args.flush}, 1 GiB CommitLog files), with or without its slave "
            f"(brokerId 1, on the same machine, over loopback); {args.producers} producers sending {BODY_SIZE}-byte "
            f"bodies in a closed loop for {duration:g} s per setup (bench/broker_load.py); latency per send from "
            "request to response.\n\n" + smoke + table + "\n")


if __name__ == "__main__":
    main()
