"""The broker benchmark's load: blocking remoting connections, one per producer or consumer,
each driven by a thread, the threads spread over client processes (see broker_bench.py).

Frames are built with lakemq.remoting's codec: a sync send is a SEND_MESSAGE_V2 request and
the wait for its response, a batch one SEND_BATCH_MESSAGE, a pull one PULL_MESSAGE.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message import Message
from lakemq.common.message_batch import encode_messages
from lakemq.common.record import iter_records
from lakemq.remoting.codec import RemotingCommand, decode_frame, encode
from lakemq.remoting.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    SendMessageRequestHeader,
    decode_header,
    encode_header,
    encode_send_header_v2,
)

QUEUES = 8
BODY_SIZE = 1024
PULL_SUSPEND, PULL_SUBSCRIPTION = 0x2, 0x4


# -- one connection ------------------------------------------------------------------------

class Connection:
    """A blocking remoting connection: write frames, read whole response frames."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()

    def read(self) -> RemotingCommand:
        buf = self._buf
        while True:
            if len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big")
                if len(buf) >= 4 + size:
                    frame = bytes(buf[4:4 + size])
                    del buf[:4 + size]
                    return decode_frame(frame)
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk

    def call(self, frame: bytes) -> RemotingCommand:
        self.sock.sendall(frame)
        return self.read()

    def close(self) -> None:
        self.sock.close()


def send_frame(topic: str, queue_id: int, body: bytes, opaque: int = 1, batch: list[bytes] | None = None) -> bytes:
    header = SendMessageRequestHeader(
        producer_group="bench_pg", topic=topic, default_topic="TBW102", default_topic_queue_nums=QUEUES,
        queue_id=queue_id, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
        properties="WAIT\x01true\x02" if batch is None else "", batch=batch is not None)
    code = RequestCode.SEND_MESSAGE_V2 if batch is None else RequestCode.SEND_BATCH_MESSAGE
    payload = body if batch is None else encode_messages(Message(topic, b, properties={"WAIT": "true"}) for b in batch)
    cmd = RemotingCommand.request(code, encode_send_header_v2(header), payload)
    cmd.opaque = opaque
    return encode(cmd)


def pull_frame(topic: str, queue_id: int, offset: int, suspend_ms: int = 0) -> bytes:
    header = PullMessageRequestHeader(
        consumer_group="bench_cg", topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=32,
        sys_flag=PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms else 0), commit_offset=0,
        suspend_timeout_millis=suspend_ms, sub_version=0, subscription="*", expression_type="TAG")
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))
    cmd.opaque = 1
    return encode(cmd)


# -- workers (each a thread in a client process) -------------------------------------------

@dataclass(frozen=True)
class Job:
    kind: str            # "send" | "pull" | "rate" | "poll"
    addr: str
    topic: str
    index: int           # the connection's number: picks its queues
    start: float         # time.monotonic() at which to begin (shared clock across processes)
    duration: float
    batch: int = 1
    rate: float = 0.0    # "rate": messages per second for this connection
    queues: tuple[int, ...] = ()
    expect: int = 0


def send_worker(job: Job) -> dict[str, float]:
    """Closed loop: one request in flight, queues taken in turn, counted inside the window."""
    conn = Connection(job.addr)
    body = os.urandom(BODY_SIZE)
    batch = [body] * job.batch if job.batch > 1 else None
    frames = [send_frame(job.topic, q, body, batch=batch) for q in range(QUEUES)]
    done = errors = 0
    latencies: list[float] = []  # ms per request: the replication bench's percentiles
    codes: dict[int, int] = {}
    i = job.index
    time.sleep(max(0.0, job.start - time.monotonic()))
    end = job.start + job.duration
    now = time.monotonic()
    while now < end:
        code = conn.call(frames[i % QUEUES]).code
        after = time.monotonic()
        latencies.append((after - now) * 1000)
        now = after
        if code == ResponseCode.SUCCESS:
            done += job.batch
        else:
            errors += 1
            codes[code] = codes.get(code, 0) + 1
        i += 1
    conn.close()
    return {"messages": done, "errors": errors, "latencies": latencies, "codes": codes}


def pull_worker(job: Job) -> dict[str, float]:
    """Pull each owned queue from 0 up to what it held when the phase began."""
    conn = Connection(job.addr)
    messages = nbytes = 0
    time.sleep(max(0.0, job.start - time.monotonic()))
    for queue_id in job.queues:
        offset = 0
        max_offset = None
        while max_offset is None or offset < max_offset:
            resp = conn.call(pull_frame(job.topic, queue_id, offset))
            head = decode_header(PullMessageResponseHeader, resp.ext_fields)
            max_offset = head.max_offset if max_offset is None else max_offset
            if resp.code != ResponseCode.SUCCESS:
                break
            messages += head.next_begin_offset - offset
            nbytes += len(resp.body)
            offset = head.next_begin_offset
    conn.close()
    return {"messages": messages, "bytes": nbytes, "end": time.monotonic()}


def rate_worker(job: Job) -> dict[str, float]:
    """Open loop: requests written at their scheduled times (at most 256 in flight), the
    schedule in each body; a reader thread takes the responses."""
    conn = Connection(job.addr)
    count = int(job.rate * job.duration)
    in_flight = threading.Semaphore(256)
    result = {"sent": 0.0, "ok": 0.0, "late_ms": 0.0}

    def read_responses() -> None:
        for _ in range(count):
            if conn.read().code == ResponseCode.SUCCESS:
                result["ok"] += 1
            in_flight.release()

    reader = threading.Thread(target=read_responses, daemon=True)
    reader.start()
    pad = os.urandom(BODY_SIZE - 8)
    for n in range(count):
        due = job.start + n / job.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        in_flight.acquire()
        stamp = int(due * 1e9).to_bytes(8, "big")
        conn.sock.sendall(send_frame(job.topic, (job.index + n) % QUEUES, stamp + pad, opaque=n + 1))
    result["sent"] = count
    result["late_ms"] = max(0.0, (time.monotonic() - (job.start + job.duration)) * 1000)
    reader.join(30)
    conn.close()
    return result


def poll_worker(job: Job) -> dict[str, object]:
    """Long-polling pulls of one queue (held by the broker until a message arrives);
    latency = arrival of the pull response - the message's scheduled send time."""
    [queue_id] = job.queues
    conn = Connection(job.addr)
    offset = 0
    latencies: list[float] = []
    deadline = job.start + job.duration + 15
    while len(latencies) < job.expect and time.monotonic() < deadline:
        resp = conn.call(pull_frame(job.topic, queue_id, offset, suspend_ms=1000))
        now = time.monotonic()
        if resp.code == ResponseCode.SUCCESS:
            for msg in iter_records(resp.body):
                latencies.append((now - int.from_bytes(msg.body[:8], "big") / 1e9) * 1000)
        if resp.code in (ResponseCode.SUCCESS, ResponseCode.PULL_OFFSET_MOVED):
            offset = decode_header(PullMessageResponseHeader, resp.ext_fields).next_begin_offset
    conn.close()
    return {"latencies": latencies}


WORKERS: dict[str, Callable[[Job], dict]] = {"send": send_worker, "pull": pull_worker, "rate": rate_worker,
                                              "poll": poll_worker}


def _process_main(jobs: list[Job], out: mp.Queue[list[dict]]) -> None:
    results: list[dict] = [{}] * len(jobs)

    def run(i: int) -> None:
        try:
            results[i] = WORKERS[jobs[i].kind](jobs[i])
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the phase
            results[i] = {"error": f"{type(exc).__name__}: {exc}"}

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    cpu = time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The process's CPU over its jobs (connecting and the wait for the start included, both
    # small), reported once per process: the client side's cost per message.
    results[0] = {**results[0], "client_cpu": time.process_time() - cpu}
    out.put(results)


def run_jobs(jobs: list[Job], processes: int) -> list[dict]:
    """Run ``jobs`` as threads spread round-robin over ``processes`` client processes."""
    ctx = mp.get_context("spawn")
    out: mp.Queue[list[dict]] = ctx.Queue()
    groups = [jobs[i::processes] for i in range(min(processes, len(jobs)))]
    procs = [ctx.Process(target=_process_main, args=(g, out)) for g in groups]
    for p in procs:
        p.start()
    results = [r for _ in procs for r in out.get(timeout=max(j.duration for j in jobs) + 120)]
    for p in procs:
        p.join(30)
    failed = [r["error"] for r in results if "error" in r]
    if failed:
        raise RuntimeError(f"{len(failed)} workers failed, first: {failed[0]}")
    return results
