"""Side-by-side benchmark of lakemq and real peers (Apache RocketMQ, Redis Streams, RabbitMQ,
NATS JetStream, Apache Kafka).

    python bench/peer_bench.py            # all peers, about 30 minutes
    python bench/peer_bench.py --quick    # smoke test, about 5 minutes
    python bench/peer_bench.py --peers rocketmq-async,lakemq-async --no-write

Each peer is installed when missing (Debian packages; Apache RocketMQ's jars through
scripts/jvm_deps.sh, Apache Kafka's too), started on free loopback ports in a private temporary directory with
durable settings, run through the same workload (bench/peers/workload.py; the ``-java`` peers
run it with Apache RocketMQ's Java client, bench/peers/java_bench.py), with the broker's CPU
time read from /proc around every phase, and stopped, whatever happens. The asyncio clients
run on uvloop unless ``--loop asyncio`` says otherwise. The results replace the
"## Peers" section of BENCHMARKS.md and the plot docs/bench/peers_latency.png.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import uvloop

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `bench` and `lakemq` importable
    sys.path.insert(0, str(ROOT))

from bench.markdown import replace_section
from bench.peers import PEERS, Peer, PeerUnavailable
from bench.peers.java_bench import run_java_workload
from bench.peers.report import plot_latency, render_section, write_json
from bench.peers.workload import FULL, QUICK, PeerResult, Plan, run_workload

BENCHMARKS = ROOT / "BENCHMARKS.md"
# Every asyncio client runs on one loop, chosen per run: uvloop, or asyncio's own.
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}
PLOT = ROOT / "docs" / "bench" / "peers_latency.png"
RAW = ROOT / "docs" / "bench" / "peers_results.json"


def _parse(argv: list[str]) -> argparse.Namespace:
    keys = [peer.key for peer in PEERS]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short phases: a ~2 minute smoke test")
    parser.add_argument("--peers", default=",".join(keys),
                        help=f"comma-separated subset of: {', '.join(keys)}")
    parser.add_argument("--loop", choices=LOOPS, default="uvloop",
                        help="the event loop under every asyncio client (default uvloop, on which they "
                             "gain: BENCHMARKS.md, \"The peers' event loop\")")
    parser.add_argument("--no-write", action="store_true",
                        help="print results only; leave BENCHMARKS.md and the plot alone")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.peers.split(",")) - set(keys))
    if unknown:
        parser.error(f"unknown peer(s): {', '.join(unknown)}; choose from {', '.join(keys)}")
    return args


def _run_peer(peer_type: type[Peer], plan: Plan, loop: str) -> PeerResult:
    peer = peer_type()
    result = PeerResult(peer.key, peer.title, peer.durability.value, peer.settings, peer.batch_note,
                        peer.client_name)
    print(f"{peer.title} [{peer.settings}]", flush=True)
    started = time.monotonic()
    try:
        with peer:
            print(f"  started in {time.monotonic() - started:.1f} s", flush=True)
            if peer.client_name == "java":
                run_java_workload(peer, result, plan, log=lambda line: print(line, flush=True))
            else:
                with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
                    runner.run(_drive(peer, result, plan))
    except PeerUnavailable as exc:
        result.error = f"unavailable: {exc}"
    except Exception as exc:  # noqa: BLE001 - one peer failing must not lose the others' rows
        result.error = f"failed: {type(exc).__name__}: {exc}"
    if result.error:
        print(f"  {result.error}", flush=True)
    return result


async def _drive(peer: Peer, result: PeerResult, plan: Plan) -> None:
    client = peer.client()
    try:
        await run_workload(client, result, plan, log=lambda line: print(line, flush=True), cpu=peer.cpu_seconds)
    finally:
        await client.close()


def _terminate(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into an exception so that every started server is stopped on the way out.
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
    # Clients log each retried send (e.g. a broker's flow control); the tables tell the outcome.
    logging.basicConfig(level=logging.ERROR, format="  %(name)s: %(message)s")
    plan = QUICK if args.quick else FULL
    chosen = set(args.peers.split(","))
    command = shlex.join(["python", "bench/peer_bench.py", *(sys.argv[1:] if argv is None else argv)])
    began = time.monotonic()
    try:
        results = [_run_peer(peer_type, plan, args.loop) for peer_type in PEERS if peer_type.key in chosen]
    except KeyboardInterrupt:
        print("interrupted: the servers started so far are stopped; nothing was written", flush=True)
        return 130
    print(f"all peers done in {time.monotonic() - began:.0f} s", flush=True)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if not args.no_write:
        plot_latency(results, plan, PLOT, f"End-to-end latency, {plan.body_size}-byte messages ({when})")
        plot_ref = PLOT.relative_to(ROOT).as_posix()
        section = render_section(results, plan, command, when, plot_ref, args.loop)
        replace_section(section, BENCHMARKS)
        write_json(results, plan, command, RAW)
        print(f"wrote {BENCHMARKS.relative_to(ROOT)}, {plot_ref}, {RAW.relative_to(ROOT)}")
    else:
        print(render_section(results, plan, command, when, None, args.loop))
    return 0 if all(r.error is None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
