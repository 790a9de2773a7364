"""The broker's CPU per request on its hot paths, without sockets or other processes.

    .venv/bin/python bench/hot_path_bench.py [--sends N] [--pulls N] [--flush ASYNC_FLUSH|SYNC_FLUSH]

A real BrokerController runs on this process's event loop (uvloop, as `lakemq broker`); one
connection is made to its RemotingServer's dispatcher over an in-memory transport, so what is
measured is the broker's own work per request (frame and header decoding, the processor, the
store, the response's encoding) and none of the kernel's. Phases:

- ``send``: SEND_MESSAGE_V2 requests as lakemq.client writes them (1 KiB body, UNIQ_KEY and
  WAIT properties), one per read, each answered before the next is fed;
- ``pull``: PULL_MESSAGE of 32 over everything the send phase stored, one queue at a time;
- ``deliver``: what a push consumer at a low rate costs per message: a long-polling pull is
  held on an empty queue, a send arrives and wakes it, the pull is answered with that message.

Printed per phase: CPU per request and per message of the whole process (time.process_time:
the loop plus the store's dispatch thread, measured once dispatch caught up) and of the loop
thread alone. Figures are repeatable on a busy machine because nothing here waits on another
process; under ``valgrind --tool=callgrind`` two runs of different sizes give the instructions
per request by difference.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `bench` and `lakemq` importable
    sys.path.insert(0, str(ROOT))

from lakemq.broker.broker_controller import BrokerController
from lakemq.cli.broker_cmds import load_broker_configs
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.constants import PullSysFlag
from lakemq.common.message import MessageConst, properties_to_string
from lakemq.remoting import event_loop
from lakemq.remoting.codec import FrameDecoder, RemotingCommand, encode
from lakemq.remoting.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    decode_header,
    encode_header,
    send_header_v2_fields,
)

TOPIC = "HotPath"
GROUP = "hot_path_cg"
QUEUES = 8
BODY = os.urandom(1024)


class _Transport:
    """What a connection writes goes here; the harness reads the responses back."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def writelines(self, chunks: list[bytes]) -> None:
        self.written.append(b"".join(chunks))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else default


def _send_frame(n: int, topic: str = TOPIC, queue_id: int | None = None) -> bytes:
    props = properties_to_string({MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"7F0000010001{n:020X}",
                                  MessageConst.WAIT_STORE_MSG_OK: "true"})
    fields = send_header_v2_fields("hot_path_pg", topic, "TBW102", 4, n % QUEUES if queue_id is None else queue_id,
                                   0, int(time.time() * 1000), 0, props, 0, False, None, False)
    command = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, BODY)
    command.opaque = n + 1
    return encode(command)


def _pull_frame(queue_id: int, offset: int, opaque: int, topic: str = TOPIC, suspend_ms: int = 0) -> bytes:
    flag = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if suspend_ms else 0)
    header = PullMessageRequestHeader(GROUP, topic, queue_id, offset, 32, flag, 0, suspend_ms, 0, "*", "TAG")
    command = RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))
    command.opaque = opaque
    return encode(command)


class _Harness:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller
        self.transport = _Transport()
        self.connection = controller.remoting_server._new_connection()
        self.connection.connection_made(self.transport)  # type: ignore[arg-type]
        self.decoder = FrameDecoder()

    async def call(self, frame: bytes, answers: int = 1) -> list[RemotingCommand]:
        """Feed one request; the responses once ``answers`` of them were written."""
        self.connection.data_received(frame)
        responses: list[RemotingCommand] = []
        while len(responses) < answers:
            while not self.transport.written:
                await asyncio.sleep(0)
            data = b"".join(self.transport.written)
            self.transport.written.clear()
            responses += self.decoder.feed(data)
        return responses


def _caught_up(controller: BrokerController) -> None:
    deadline = time.monotonic() + 30
    while controller.store.dispatch_behind_bytes() > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("dispatch did not catch up")
        time.sleep(0.0005)


def _report(name: str, unit: str, count: int, per: int, cpu: float, loop_cpu: float) -> None:
    print(f"{name}: {count:,} {unit}s, process CPU {cpu / count * 1e6:.2f} us/{unit} "
          f"({cpu / (count * per) * 1e6:.2f} us/msg), loop thread {loop_cpu / count * 1e6:.2f} us/{unit}",
          flush=True)


async def _run(args: argparse.Namespace, work: Path) -> None:
    conf = work / "broker.conf"
    conf.write_text(f"brokerName=hot-path\nflushDiskType={args.flush}\ndefaultTopicQueueNums={QUEUES}\n"
                    "autoCreateSubscriptionGroup=true\n")
    configs = load_broker_configs(str(conf), data_dir=str(work / "store"), port=0, namesrv="127.0.0.1:1")
    controller = BrokerController(*configs)
    await controller.start()
    try:
        controller.topic_config_manager.create_topic_in_send_message_method(TOPIC, "TBW102", QUEUES)
        harness = _Harness(controller)
        frames = [_send_frame(n) for n in range(args.sends)]
        for frame in frames[:100]:  # warm up: first file pages, caches, the group's config
            await harness.call(frame)
        _caught_up(controller)
        cpu, loop_cpu = time.process_time(), time.thread_time()
        for frame in frames[100:]:
            [response] = await harness.call(frame)
            if response.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send refused: {response.code} {response.remark}")
        loop_cpu = time.thread_time() - loop_cpu
        _caught_up(controller)
        _report("send", "send", len(frames) - 100, 1, time.process_time() - cpu, loop_cpu)

        pulls = messages = 0
        offsets = [0] * QUEUES
        await harness.call(_pull_frame(0, 0, 1))  # the group's config made on the first pull
        cpu, loop_cpu = time.process_time(), time.thread_time()
        while pulls < args.pulls:
            queue_id = pulls % QUEUES
            [response] = await harness.call(_pull_frame(queue_id, offsets[queue_id], pulls + 2))
            if response.code != ResponseCode.SUCCESS:
                offsets[queue_id] = 0  # read the queue again from its start
                continue
            head = decode_header(PullMessageResponseHeader, response.ext_fields)
            messages += head.next_begin_offset - offsets[queue_id]
            offsets[queue_id] = head.next_begin_offset
            pulls += 1
        loop_cpu = time.thread_time() - loop_cpu
        _report("pull", "pull", pulls, max(1, messages // pulls), time.process_time() - cpu, loop_cpu)

        deliver_topic = TOPIC + "Deliver"
        controller.topic_config_manager.create_topic_in_send_message_method(deliver_topic, "TBW102", 1)
        cpu = loop_cpu = 0.0
        for n in range(args.deliveries + 100):
            if n == 100:  # after a warm-up
                cpu, loop_cpu = time.process_time(), time.thread_time()
            harness.connection.data_received(_pull_frame(0, n, 2 * n + 1, deliver_topic, suspend_ms=15_000))
            await asyncio.sleep(0)
            if harness.transport.written:
                raise RuntimeError("the pull was answered before a message arrived")
            send, pulled = await harness.call(_send_frame(n, deliver_topic, 0), answers=2)
            if send.code != ResponseCode.SUCCESS or pulled.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"deliver: {send.code} {send.remark} / {pulled.code} {pulled.remark}")
        loop_cpu = time.thread_time() - loop_cpu
        _report("deliver", "message", args.deliveries, 1, time.process_time() - cpu, loop_cpu)
        harness.connection.connection_lost(None)
    finally:
        await controller.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=20_000, help="send requests [20000]")
    parser.add_argument("--pulls", type=int, default=5_000, help="pull requests of 32 [5000]")
    parser.add_argument("--deliveries", type=int, default=5_000, help="held pulls woken by a send [5000]")
    parser.add_argument("--flush", choices=["ASYNC_FLUSH", "SYNC_FLUSH"], default="ASYNC_FLUSH")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hot_path_") as work:
        event_loop.run(_run(args, Path(work)))


if __name__ == "__main__":
    main()
