"""bench/rmq5_bench.py's phases run by Apache RocketMQ's official 5.x Python client
(rocketmq-python-client 5.1.2, gRPC, plaintext). Run with .venv-rmq5's python (its `rocketmq`
package is not the C++ client's of lakemq's .venv).

argv: ENDPOINT TOPIC GROUP COUNT SIZE IN_FLIGHT BROKER_PID. Send COUNT messages of SIZE bytes
with ``send_async``, at most IN_FLIGHT outstanding (as the client's users pipeline sends), then
one PushConsumer of GROUP (its defaults: receive batches of 32, 20 consumption threads)
consumes them all. The broker's CPU seconds (/proc/PID/stat) are read around each phase. One
JSON line per phase.
"""

import json
import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
)

TICKS = os.sysconf("SC_CLK_TCK")
WARM_UP = 200


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def phase(name, messages, seconds, cpu_seconds):
    print(json.dumps({"phase": name, "messages": messages, "seconds": seconds, "cpu_seconds": cpu_seconds}),
          flush=True)


def send(producer, topic, body, count, in_flight):
    slots = threading.Semaphore(in_flight)
    failures = []

    def answered(future):
        if future.exception() is not None:
            failures.append(future.exception())
        slots.release()

    for _ in range(count):
        slots.acquire()
        msg = Message()
        msg.topic = topic
        msg.body = body
        producer.send_async(msg).add_done_callback(answered)
    for _ in range(in_flight):  # every send answered
        slots.acquire()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed: {failures[0]}")


class Counter(MessageListener):
    def __init__(self, expected):
        self.expected = expected
        self.received = 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def consume(self, message):
        with self.lock:
            self.received += 1
            if self.received >= self.expected:
                self.done.set()
        return ConsumeResult.SUCCESS


def main():
    endpoint, topic, group = sys.argv[1:4]
    count, size, in_flight, broker_pid = (int(x) for x in sys.argv[4:8])
    body = bytes(size)
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=30)
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        send(producer, topic, body, WARM_UP, in_flight)  # unmeasured: routes, connection
        start_cpu, start = cpu(broker_pid), time.monotonic()
        send(producer, topic, body, count, in_flight)
        phase("send", count, time.monotonic() - start, cpu(broker_pid) - start_cpu)
    finally:
        producer.shutdown()
    counter = Counter(count + WARM_UP)
    start_cpu, start = cpu(broker_pid), time.monotonic()
    consumer = PushConsumer(config, group, counter, {topic: FilterExpression("*")})
    consumer.startup()
    try:
        if not counter.done.wait(600):
            raise RuntimeError(f"consumed {counter.received} of {counter.expected}")
        phase("receive", counter.received, time.monotonic() - start, cpu(broker_pid) - start_cpu)
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    main()
