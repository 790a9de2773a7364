"""Scale: one broker holding many topics and groups, lakemq's and Apache RocketMQ 4.9's on the
same machine, one after the other.

    .venv/bin/python bench/scale_bench.py [--topics 10000] [--queues 8] [--groups 1000]
                                          [--clients 2000] [--lookups 2000] [--only lakemq|rocketmq]
                                          [--backlog-gib 20] [--out scale.json] [--write-md]

For each broker: a start on an empty store (boot time, RSS), then a start on a store whose
``config/topics.json`` and ``config/subscriptionGroup.json`` hold the topics (each of
``--queues`` queues) and groups, in the format both brokers read. Measured on that start: the
time from exec to the boot line; the bytes of each REGISTER_BROKER body the broker sends its
NameServer (through a counting proxy on loopback); the RSS after boot, and per topic (minus the
empty broker's); ``--lookups`` GET_ROUTEINFO_BY_TOPIC requests for random topics at the
NameServer (p50 / p99); ``--clients`` HEART_BEAT requests, each from its own client id (two per
group, each subscribed to one topic, each on its own connection) from 8 threads (p50 / p99,
total), and the RSS after. With ``--backlog-gib N``: N GiB of 1 KiB messages sent to one topic in
batches, then read from offset 0 by a new group (pulls of 32, four threads). ``--root DIR``
keeps the stores and logs there.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.broker_load import BODY_SIZE, QUEUES, Connection, Job, pull_worker, send_frame
from bench.jvm import RocketMQServer
from bench.markdown import replace_section
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.subscription import SubscriptionData
from lakemq.launcher import BROKER_READY, NAMESRV_READY, ServerProcess, reserved_port, spawn
from lakemq.remoting.bodies import ConsumerData, HeartbeatData
from lakemq.remoting.codec import RemotingCommand, encode

SECTION = "## Scale (bench/scale_bench.py)"
CONNECTIONS = 8


def topic_name(i: int) -> str:
    return f"scale_topic_{i:05d}"


def group_name(i: int) -> str:
    return f"scale_group_{i:04d}"


def write_configs(config_dir: Path, topics: int, queues: int, groups: int) -> None:
    """topics.json and subscriptionGroup.json as both brokers persist them."""
    config_dir.mkdir(parents=True, exist_ok=True)
    version = {"counter": 1, "timestamp": int(time.time() * 1000)}
    table = {topic_name(i): {"topicName": topic_name(i), "readQueueNums": queues, "writeQueueNums": queues,
                             "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
             for i in range(topics)}
    (config_dir / "topics.json").write_text(json.dumps({"topicConfigTable": table, "dataVersion": version}))
    subs = {group_name(i): {"groupName": group_name(i), "consumeEnable": True, "consumeFromMinEnable": True,
                            "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16,
                            "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                            "notifyConsumerIdsChangedEnable": True}
            for i in range(groups)}
    (config_dir / "subscriptionGroup.json").write_text(
        json.dumps({"subscriptionGroupTable": subs, "dataVersion": version}))


# -- the counting proxy between a broker and its NameServer -----------------------------------

class RegistrationProxy:
    """Forwards loopback TCP to the NameServer, recording the body size of every REGISTER_BROKER
    request that passes (frame: length, header length, header, body)."""

    def __init__(self) -> None:
        self.target = ""
        self.bodies: list[int] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._server.accept()
            host, _, port = self.target.rpartition(":")
            upstream = socket.create_connection((host, int(port)))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        buf = bytearray()
        try:
            while chunk := src.recv(1 << 20):
                dst.sendall(chunk)
                if requests:
                    buf += chunk
                    self._frames(buf)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                s.close()

    def _frames(self, buf: bytearray) -> None:
        while len(buf) >= 8:
            size = int.from_bytes(buf[:4], "big")
            if len(buf) < 4 + size:
                return
            header_len = int.from_bytes(buf[4:8], "big") & 0xFFFFFF
            header = json.loads(bytes(buf[8:8 + header_len]))
            if header.get("code") == RequestCode.REGISTER_BROKER:
                self.bodies.append(size - 4 - header_len)
            del buf[:4 + size]


# -- measurements ------------------------------------------------------------------------------

def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _percentiles(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"p50_ms": round(ordered[len(ordered) // 2], 3), "p99_ms": round(ordered[int(len(ordered) * 0.99)], 3)}


def route_lookups(namesrv: str, topics: int, count: int) -> dict[str, float]:
    conn = Connection(namesrv)
    ms = []
    rng = random.Random(7)
    for n in range(count):
        cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic_name(rng.randrange(topics))})
        cmd.opaque = n + 1
        started = time.perf_counter()
        resp = conn.call(encode(cmd))
        ms.append((time.perf_counter() - started) * 1000)
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"route look-up failed: {resp.code} {resp.remark}")
    conn.close()
    return {"count": count, **_percentiles(ms)}


def heartbeats(broker: str, clients: int, topics: int, groups: int) -> dict[str, float]:
    """``clients`` heartbeats, client i in group i % groups subscribed to one topic, each on a
    connection of its own, sent by CONNECTIONS threads."""
    ms: list[float] = []
    conns: list[Connection] = []
    lock = threading.Lock()

    def run(worker: int) -> None:
        mine = []
        for i in range(worker, clients, CONNECTIONS):
            # A connection per client, kept open: the broker closes a connection whose
            # clients all stopped heartbeating (channelExpiredTimeout), as with real clients.
            conn = Connection(broker)
            conns.append(conn)
            topic = topic_name((i * 7) % topics)
            data = HeartbeatData(f"127.0.0.{1 + i // 250}@scale-{i}", (), (ConsumerData(
                group_name(i % groups), subscription_data_set=(SubscriptionData(topic, "*"),)),))
            cmd = RemotingCommand.request(RequestCode.HEART_BEAT, {}, data.encode())
            cmd.opaque = i + 1
            started = time.perf_counter()
            resp = conn.call(encode(cmd))
            while not resp.is_response:  # the broker tells the group's clients their ids changed
                resp = conn.read()
            mine.append((time.perf_counter() - started) * 1000)
            if resp.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"heartbeat failed: {resp.code} {resp.remark}")
        with lock:
            ms.extend(mine)

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(w,)) for w in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for conn in conns:
        conn.close()
    if len(ms) != clients:
        raise RuntimeError(f"{clients - len(ms)} heartbeats failed")
    return {"clients": clients, "total_s": round(time.perf_counter() - started, 2), **_percentiles(ms)}


def _max_offset(conn: Connection, topic: str, queue_id: int) -> int:
    cmd = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    resp = conn.call(encode(cmd))
    return int(resp.ext_fields.get("offset", 0))


def backlog(broker: str, gib: float) -> dict[str, float]:
    """Fill ``scale_topic_00000`` with ``gib`` GiB of 1 KiB messages (batches of 32 from 4
    threads), then read it all from offset 0 as a new group would, one thread per two queues."""
    topic, batch = topic_name(0), 32
    target = int(gib * (1 << 30)) // (BODY_SIZE * batch * 4)  # batches per thread

    busy = [0] * 4

    def fill(worker: int) -> None:
        conn = Connection(broker)
        body = bytes(BODY_SIZE)
        for n in range(target):
            frame = send_frame(topic, (worker + n) % QUEUES, body, batch=[body] * batch)
            # Flow control (SYSTEM_BUSY) is answered before the put: the batch is sent again
            # after a pause, as both brokers' own clients do.
            while (resp := conn.call(frame)).code == ResponseCode.SYSTEM_BUSY:
                busy[worker] += 1
                time.sleep(0.05)
            if resp.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"backlog send failed: {resp.code} {resp.remark}")
        conn.close()

    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:  # a failed send ends the bench with its error
        for done in [pool.submit(fill, w) for w in range(4)]:
            done.result()
    written_s = time.monotonic() - started
    expected = target * batch * 4
    # The ConsumeQueues trail the CommitLog (dispatch): wait until they index every message.
    conn, deadline = Connection(broker), time.monotonic() + 600 + 60 * gib
    while (indexed := sum(_max_offset(conn, topic, q) for q in range(QUEUES))) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the ConsumeQueues index {indexed:,} of {expected:,} backlog messages")
        time.sleep(0.5)
    conn.close()
    dispatch_s = time.monotonic() - started - written_s
    results: list[dict[str, float]] = []
    started = time.monotonic()
    jobs = [Job("pull", broker, topic, w, started, 0, queues=(2 * w, 2 * w + 1)) for w in range(QUEUES // 2)]
    readers = [threading.Thread(target=lambda j=j: results.append(pull_worker(j))) for j in jobs]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    read_s = time.monotonic() - started
    messages = sum(r["messages"] for r in results)
    if messages != expected:
        raise RuntimeError(f"the new group read {messages:,} of {expected:,} backlog messages")
    gib_read = sum(r["bytes"] for r in results) / (1 << 30)
    return {"messages": messages, "busy_retries": sum(busy), "write_s": round(written_s, 1), "dispatch_wait_s": round(dispatch_s, 1),
            "read_s": round(read_s, 1),
            "read_mib_s": round(gib_read * 1024 / read_s, 1), "read_msgs_s": round(messages / read_s)}


# -- the two brokers ---------------------------------------------------------------------------

Started = tuple[str, str, int, float]  # namesrv addr, broker addr, broker pid, boot seconds


@contextmanager
def lakemq_broker(root: Path, proxy: RegistrationProxy) -> Iterator[Started]:
    namesrv = spawn("namesrv", ["namesrv", "--port", str(reserved_port()), "--log-dir", str(root / "ns-logs")],
                    root / "namesrv", NAMESRV_READY)
    proxy.target = namesrv.addr
    conf = root / "broker.conf"
    conf.write_text("brokerName=broker-a\nmappedFileSizeCommitLog=" + str(64 << 20) + "\n")
    started = time.monotonic()
    broker: ServerProcess | None = None
    try:
        broker = spawn("broker", ["broker", "-c", str(conf), "--data-dir", str(root / "store"),
                                  "--port", str(reserved_port()), "--namesrv", proxy.addr,
                                  "--log-dir", str(root / "logs")], root / "broker", BROKER_READY, timeout=600)
        yield namesrv.addr, broker.addr, broker.proc.pid, time.monotonic() - started
    finally:
        if broker is not None:
            broker.stop(120)
        namesrv.stop()


@contextmanager
def rocketmq_broker(root: Path, proxy: RegistrationProxy) -> Iterator[Started]:
    class Proxied(RocketMQServer):
        boot_s = 0.0

        def start_broker(self) -> None:
            proxy.target = self.namesrv_addr
            self.broker_conf["namesrvAddr"] = proxy.addr
            started = time.monotonic()
            super().start_broker()
            self.boot_s = time.monotonic() - started

    with Proxied(root, {"mappedFileSizeCommitLog": str(64 << 20)}, heap="1g") as rmq:
        yield rmq.namesrv_addr, rmq.broker_addr, rmq.broker_pid, rmq.boot_s


def measure(kind: str, start: Callable[[Path, RegistrationProxy], Any], args: argparse.Namespace,
            root: Path) -> dict[str, Any]:
    store = root / kind / "full" / "store"
    result: dict[str, Any] = {"broker": kind}
    proxy = RegistrationProxy()
    with start(root / kind / "empty", proxy) as (_ns, _addr, pid, boot_s):
        time.sleep(2)  # let boot-time allocations settle before reading RSS
        result["empty"] = {"boot_s": round(boot_s, 2), "rss_mib": round(rss_mib(pid), 1),
                           "register_body_bytes": max(proxy.bodies, default=0)}
    print(kind, "empty", result["empty"], flush=True)
    write_configs(store / "config", args.topics, args.queues, args.groups)
    proxy = RegistrationProxy()
    with start(root / kind / "full", proxy) as (namesrv, addr, pid, boot_s):
        deadline = time.monotonic() + 60
        while not proxy.bodies and time.monotonic() < deadline:
            time.sleep(0.2)
        rss = rss_mib(pid)
        full: dict[str, Any] = {
            "boot_s": round(boot_s, 2), "rss_mib": round(rss, 1),
            "register_body_bytes": max(proxy.bodies, default=0), "registrations": len(proxy.bodies),
            "kib_per_topic": round((rss - result["empty"]["rss_mib"]) * 1024 / args.topics, 2)}
        full["route_lookups"] = route_lookups(namesrv, args.topics, args.lookups)
        full["heartbeats"] = heartbeats(addr, args.clients, args.topics, args.groups)
        full["rss_after_heartbeats_mib"] = round(rss_mib(pid), 1)
        if args.backlog_gib:
            full["backlog"] = backlog(addr, args.backlog_gib)
        result["full"] = full
    print(kind, "full", result["full"], flush=True)
    return result


def markdown(results: list[dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    rows = []
    for r in results:
        e, f = r["empty"], r["full"]
        rows.append(
            f"| {r['broker']} | {e['boot_s']:.1f} / {f['boot_s']:.1f} | {e['rss_mib']:.0f} / {f['rss_mib']:.0f} "
            f"| {f['kib_per_topic']:.1f} | {f['register_body_bytes']:,} "
            f"| {f['route_lookups']['p50_ms']:.2f} / {f['route_lookups']['p99_ms']:.2f} "
            f"| {f['heartbeats']['total_s']:.1f} | {f['heartbeats']['p50_ms']:.2f} / {f['heartbeats']['p99_ms']:.2f} "
            f"| {f['rss_after_heartbeats_mib']:.0f} |")
    return (f"{SECTION}\n\n`{command}`: {args.topics:,} topics of {args.queues} queues, {args.groups:,} groups, "
            f"{args.clients:,} heartbeating clients, {args.lookups:,} route look-ups.\n\n"
            "| broker | boot s (empty / full) | RSS MiB (empty / full) | KiB per topic | REGISTER_BROKER body bytes "
            "| route look-up ms p50 / p99 | heartbeats total s | heartbeat ms p50 / p99 | RSS after heartbeats MiB |\n"
            "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n" + _backlog_rows(results))


def _backlog_rows(results: list[dict[str, Any]]) -> str:
    rows = [f"| {r['broker']} | {b['messages']:,} | {b['write_s']:.1f} | {b['read_s']:.1f} | {b['read_mib_s']:.1f} "
            f"| {b['read_msgs_s']:,} |" for r in results if (b := r["full"].get("backlog"))]
    if not rows:
        return ""
    return ("\nBacklog read from offset 0 by a new group:\n\n"
            "| broker | messages | write s | read s | read MiB/s | read msgs/s |\n|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--clients", type=int, default=2_000)
    parser.add_argument("--lookups", type=int, default=2_000)
    parser.add_argument("--only", choices=("lakemq", "rocketmq"))
    parser.add_argument("--backlog-gib", type=float, default=0.0,
                        help="then fill one topic with this many GiB and read it from the start (goal: 20)")
    parser.add_argument("--root", type=Path, help="work directory, kept (default: a temporary one)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--write-md", action="store_true")
    args = parser.parse_args()
    brokers = {"lakemq": lakemq_broker, "rocketmq": rocketmq_broker}
    results = []
    with TemporaryDirectory(prefix="lakemq-scale-") as tmp:
        root = args.root or Path(tmp)
        for kind, start in brokers.items():
            if args.only in (None, kind):
                results.append(measure(kind, start, args, root))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    if args.write_md:
        replace_section(markdown(results, args, "bench/scale_bench.py " + " ".join(sys.argv[1:])))
    print(markdown(results, args, "bench/scale_bench.py " + " ".join(sys.argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
