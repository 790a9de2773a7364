"""What the gRPC front door's one-port TLS front costs (lakemq/broker/grpc/front.py).

    .venv/bin/python bench/grpc_front_bench.py [--messages N] [--inflight K]

Starts a real NameServer and broker per mode and sends N SendMessage calls of 1 KiB bodies,
K in flight, from grpcio's asyncio client in this process: ``disabled`` (grpcio owns the
port, plaintext), ``permissive`` (the front peeks and relays plaintext to grpcio) and
``permissive+tls`` (the front ends TLS and relays). Prints sends/s and the broker's CPU
per 1,000 sends (from /proc: the loop, grpcio's threads and the front together).
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc

from bench.broker_bench import cpu_seconds
from lakemq.client.sync import SyncProducer
from lakemq.grpc._pb import definition_pb2 as v2
from lakemq.grpc._pb import service_pb2 as rpc
from lakemq.grpc._pb.service_pb2_grpc import MessagingServiceStub
from lakemq.launcher import reserved_port, start_cluster

TOPIC = "GrpcBench"


def _request() -> rpc.SendMessageRequest:
    sp = v2.SystemProperties(message_id=uuid.uuid4().hex.upper(), message_type=v2.MessageType.NORMAL,
                             body_encoding=v2.Encoding.IDENTITY)
    return rpc.SendMessageRequest(messages=[v2.Message(topic=v2.Resource(name=TOPIC), body=b"x" * 1024,
                                                       system_properties=sp)])


async def _load(channel: grpc.aio.Channel, messages: int, inflight: int) -> float:
    stub = MessagingServiceStub(channel)
    await stub.QueryRoute(rpc.QueryRouteRequest(topic=v2.Resource(name=TOPIC)))
    left = messages

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            response = await stub.SendMessage(_request())
            assert response.status.code == v2.Code.OK, response

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    return time.perf_counter() - started


def run(mode: str, messages: int, inflight: int) -> tuple[float, float]:
    port = reserved_port()
    tls = mode.endswith("+tls")
    conf = {"grpcListenPort": str(port), "grpcTlsMode": mode.removesuffix("+tls")}
    with tempfile.TemporaryDirectory() as root, start_cluster(Path(root), broker_conf=conf) as cluster:
        with SyncProducer("grpc-bench-admin", namesrv_addr=cluster.namesrv_addr) as admin:
            admin.create_topic(TOPIC, 4)
        pid = cluster.brokers["broker-a"].proc.pid

        async def main() -> tuple[float, float]:
            target = f"127.0.0.1:{port}"
            if tls:
                cert = ssl.get_server_certificate(("127.0.0.1", port)).encode()
                channel = grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(cert))
            else:
                channel = grpc.aio.insecure_channel(target)
            async with channel:
                await _load(channel, messages // 10, inflight)  # warm-up
                cpu = cpu_seconds(pid)
                elapsed = await _load(channel, messages, inflight)
                return elapsed, cpu_seconds(pid) - cpu

        elapsed, cpu = asyncio.run(main())
    return messages / elapsed, cpu / messages * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--inflight", type=int, default=32)
    args = parser.parse_args()
    print("| mode | sends/s | broker CPU ms per 1,000 sends |\n|---|---|---|")
    for mode in ("disabled", "permissive", "permissive+tls"):
        rate, cpu_ms = run(mode, args.messages, args.inflight)
        print(f"| {mode} | {rate:,.0f} | {cpu_ms * 1000:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
