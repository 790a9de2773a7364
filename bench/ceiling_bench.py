"""What a Python server can answer on this machine at all, next to what lakemq's broker answers,
with the same load in the same run.

    .venv/bin/python bench/ceiling_bench.py [--duration S] [--write-md]

The "null server" is the least any remoting server written in Python must do per request, on
the event loop lakemq's broker runs (uvloop where installed): split the byte stream into
frames, parse the JSON header (orjson) to learn the code and opaque, and answer with a
SEND_MESSAGE_V2-shaped success response (the same header fields a broker sends: msgId,
queueId, queueOffset, transactionId) encoded with orjson. It stores nothing.

Both servers get exactly the load of bench/broker_bench.py (bench/broker_load.py: blocking
remoting connections in client processes, lakemq.remoting's codec): sync sends from 1 and
from 16 producers, and 16 producers sending batches of 32 1 KiB messages. Each phase reports
msg/s, the server's CPU per message and the clients' CPU per message. On 2 cores a phase can
not go faster than 2 cores / (server CPU + client CPU per message), and not faster than
1 core / (server CPU per message) when the server's work holds one GIL; the null server's row
is that bound for any Python broker measured with this load.

The redis part (``--parts redis``) asks the same question of redis-server: redis-py with hiredis
(the peer bench's redis client and workload, bench/peers/redis_peer.py) drives redis-server and
then a Python server on the same event loop that answers XADD and keeps only the append-only
file, with redis's own durability (bench/peers/null_redis_peer.py), under ``appendfsync always``
and ``everysec``: how far a Python server that does nothing but what redis must do per request
is from redis itself.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench.broker_bench import TARGETS, Settings, _spawn, cpu_seconds, create_topics, servers, stop, sync_send
from bench.markdown import replace_section
from bench.peers.base import Peer
from bench.peers.cpu import process_cpu_split
from bench.peers.null_redis_peer import NullRedisAlwaysPeer, NullRedisEverysecPeer
from bench.peers.redis_peer import RedisAlwaysPeer, RedisEverysecPeer
from bench.peers.workload import FULL, _produce

SECTION = "## Ceiling: lakemq next to a null server (bench/ceiling_bench.py)"
NULL_READY = re.compile(r"null server listening on (\S+)")
PHASES = (("sync_1", 1, 1, "BenchSync"), ("sync_16", 16, 1, "BenchSync"), ("batch", 16, 32, "BenchBatch"))
TARGET_KEYS = {"sync_1": "sync_1", "sync_16": "sync_16", "batch": "batch_16x32"}


class NullProtocol(asyncio.Protocol):
    """Frames in, one success response per request frame out; nothing stored."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._offset = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses but write the same way.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        out = []
        pos = 0
        while len(buf) - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if len(buf) - pos - 4 < size:
                break
            header_len = int.from_bytes(buf[pos + 5:pos + 8], "big")
            header = orjson.loads(bytes(buf[pos + 8:pos + 8 + header_len]))
            pos += 4 + size
            self._offset += 1
            response = orjson.dumps({
                "code": 0, "extFields": {"msgId": "7F00000100002A9F0000000000000000", "queueId": "0",
                                         "queueOffset": str(self._offset), "transactionId": ""},
                "flag": 1, "language": "JAVA", "opaque": header["opaque"], "serializeTypeCurrentRPC": "JSON",
                "version": 0,
            })
            out.append((4 + len(response)).to_bytes(4, "big") + len(response).to_bytes(4, "big") + response)
        del buf[:pos]
        if out and self._transport is not None:
            self._transport.write(b"".join(out))


def run_null_server() -> None:
    from lakemq.remoting.event_loop import loop_name, new_event_loop

    loop = new_event_loop()
    server = loop.run_until_complete(loop.create_server(NullProtocol, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    print(f"null server listening on 127.0.0.1:{port} ({loop_name()})", flush=True)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.run_forever()
    server.close()
    loop.close()


def measure(addr: str, pid: int, s: Settings) -> dict[str, dict[str, float]]:
    results = {}
    for key, producers, batch, topic in PHASES:
        cpu = cpu_seconds(pid)
        r = sync_send(addr, topic, producers, batch, s)
        r["cpu_us"] = (cpu_seconds(pid) - cpu) / max(r["messages"], 1) * 1e6
        if r["errors"]:
            raise RuntimeError(f"{key}: {r['errors']:.0f} non-SUCCESS responses from {addr}")
        results[key] = r
        print(f"  {key}: {r['rate']:,.0f} msg/s, server CPU {r['cpu_us']:.1f} us/msg, "
              f"client CPU {r['client_cpu_us']:.1f} us/msg", flush=True)
    return results


def report(null: dict[str, dict[str, float]], lakemq: dict[str, dict[str, float]]) -> str:
    names = {"sync_1": "sync send, 1 producer", "sync_16": "sync send, 16 producers",
             "batch": "batch send, 16 producers x 32"}
    lines = [
        ("| phase | null server msg/s (server / client CPU per msg) | lakemq msg/s (broker / client CPU per msg) "
         "| lakemq / null | target | null server vs target |"),
        "|---|---:|---:|---:|---:|---|",
    ]
    for key, *_ in PHASES:
        n, m, target = null[key], lakemq[key], TARGETS[TARGET_KEYS[key]]
        lines.append(
            f"| {names[key]} | {n['rate']:,.0f} ({n['cpu_us']:.1f} / {n['client_cpu_us']:.1f} us) "
            f"| {m['rate']:,.0f} ({m['cpu_us']:.1f} / {m['client_cpu_us']:.1f} us) | {m['rate'] / n['rate']:.2f} "
            f"| {target:,} | {'above' if n['rate'] >= target else '**below**'} |")
    return "\n".join(lines)


REDIS_PAIRS = (("appendfsync always", RedisAlwaysPeer, NullRedisAlwaysPeer),
               ("appendfsync everysec", RedisEverysecPeer, NullRedisEverysecPeer))
REDIS_PRODUCERS = (1, 16)
# One server's figures per producer count: rate, user_us, sys_us.
Figures = dict[int, dict[str, float]]


def measure_redis_peer(peer_class: type[Peer], duration: float) -> Figures:
    """Sync XADDs from 1 and 16 producers (the peer bench's produce phase) against one server."""
    from lakemq.remoting import event_loop

    plan = dataclasses.replace(FULL, phase_seconds=duration)
    results: Figures = {}
    with peer_class() as peer:
        pid = peer.processes[-1].sid

        async def run() -> None:
            client = peer.client()
            await client.create_topic("ceiling")
            await _produce(client, "ceiling", 16, 1, dataclasses.replace(plan, phase_seconds=1.0), peer.cpu_seconds)
            for producers in REDIS_PRODUCERS:
                before = process_cpu_split([pid])
                r = await _produce(client, "ceiling", producers, 1, plan, peer.cpu_seconds)
                after = process_cpu_split([pid])
                n = max(r.messages, 1)
                results[producers] = {"rate": r.rate, "user_us": (after[0] - before[0]) / n * 1e6,
                                      "sys_us": (after[1] - before[1]) / n * 1e6}
                print(f"  {peer.key}, {producers} producer(s): {r.rate:,.0f} msg/s, server CPU "
                      f"{results[producers]['user_us']:.1f} user + {results[producers]['sys_us']:.1f} sys us/msg",
                      flush=True)
            await client.close()

        event_loop.run(run())
    return results


def measure_redis(rounds: int, duration: float) -> dict[str, list[tuple[Figures, Figures]]]:
    """Each durability's pair, ``rounds`` times, the order swapped every round: on this machine
    the second of two runs is often faster by itself."""
    measured: dict[str, list[tuple[Figures, Figures]]] = {}
    for durability, redis_class, null_class in REDIS_PAIRS:
        for i in range(rounds):
            print(f"redis part, {durability}, round {i + 1}", flush=True)
            if i % 2 == 0:
                redis = measure_redis_peer(redis_class, duration)
                null = measure_redis_peer(null_class, duration)
            else:
                null = measure_redis_peer(null_class, duration)
                redis = measure_redis_peer(redis_class, duration)
            measured.setdefault(durability, []).append((redis, null))
    return measured


def _span(values: list[float], fmt: str) -> str:
    low, high = min(values), max(values)
    return format(low, fmt) if f"{low:{fmt}}" == f"{high:{fmt}}" else f"{low:{fmt}}-{high:{fmt}}"


def report_redis(measured: dict[str, list[tuple[Figures, Figures]]]) -> str:
    lines = [
        ("| durability | producers | redis-server msg/s | its CPU per msg, user + sys us "
         "| Python null server msg/s | its CPU per msg | null / redis msg/s, each round "
         "| null / redis CPU, each round |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for durability, rounds in measured.items():
        for p in REDIS_PRODUCERS:
            cells = []
            for side in (0, 1):
                runs = [pair[side][p] for pair in rounds]
                cells.append(_span([r["rate"] for r in runs], ",.0f"))
                cells.append(f"{_span([r['user_us'] for r in runs], '.1f')} + {_span([r['sys_us'] for r in runs], '.1f')}")
            rates = ", ".join(f"{n[p]['rate'] / r[p]['rate']:.2f}" for r, n in rounds)
            cpus = ", ".join(f"{(n[p]['user_us'] + n[p]['sys_us']) / (r[p]['user_us'] + r[p]['sys_us']):.2f}"
                             for r, n in rounds)
            lines.append(f"| {durability} | {p} | {' | '.join(cells)} | {rates} | {cpus} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_null-server":
        run_null_server()
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per phase [10]")
    ap.add_argument("--send-processes", type=int, default=4, help="client processes for 16 producers [4]")
    ap.add_argument("--parts", default="remoting,redis",
                    help="remoting (null server vs lakemq), redis (null RESP server vs redis-server) [both]")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each redis pair, order swapped [2]")
    ap.add_argument("--write-md", action="store_true", help="write the results into BENCHMARKS.md")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if not parts or parts - {"remoting", "redis"}:
        ap.error("--parts takes remoting, redis or both")
    if args.write_md and parts != {"remoting", "redis"}:
        ap.error("--write-md needs both parts: the section holds both tables")
    s = Settings(args.duration, 0, args.send_processes, "ASYNC_FLUSH")
    tables = []
    if "remoting" in parts:
        tables.append(report(*measure_remoting(s)))
    if "redis" in parts:
        tables.append(report_redis(measure_redis(args.rounds, args.duration)))
    for table in tables:
        print(table)
    if args.write_md:
        command = "python bench/ceiling_bench.py " + " ".join(sys.argv[1:])
        replace_section(
            f"{SECTION}\n\nMeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with:\n\n```\n{command}\n```\n\n"
            f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}. "
            "Same load as the broker section (blocking remoting connections in client processes, "
            f"{args.duration:g} s per phase). The null server parses each request's JSON header and "
            "answers with a send response; it stores nothing, so its row is what this load gets from "
            "a Python server that does no broker work (see the script's docstring).\n\n" + tables[0] + "\n\n"
            "redis-server against a Python server that answers XADD and keeps only the append-only file "
            "(fdatasync'ed each turn before the replies under `always`, once a second under `everysec`), "
            "on the same event loop, both driven by redis-py with hiredis as in the peer bench "
            f"(one client process, asyncio producers, {args.duration:g} s per phase), {args.rounds} round(s) "
            "with the order swapped each round:\n\n" + tables[1] + "\n")


def measure_remoting(s: Settings) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """The null server, then lakemq's broker, under broker_bench's load."""
    work = Path(tempfile.mkdtemp(prefix="ceiling_bench_"))
    try:
        print("null server", flush=True)
        proc, addr = _spawn("null", [sys.executable, str(Path(__file__).resolve()), "_null-server"], work, NULL_READY)
        try:
            null = measure(addr, proc.pid, s)
        finally:
            stop(proc)
        print("lakemq broker (ASYNC_FLUSH)", flush=True)
        with servers(work, s.flush, None) as (ns, broker, pid):
            create_topics(ns, ["BenchSync", "BenchBatch"])
            lakemq = measure(broker, pid, s)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return null, lakemq


if __name__ == "__main__":
    main()
