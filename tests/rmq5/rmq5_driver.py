"""Drives Apache RocketMQ's official 5.x Python client (rocketmq-python-client) against a
lakemq broker's gRPC front door. Run with .venv-rmq5's python (scripts/rmq5_env.sh), never
lakemq's: its `rocketmq` package is not the C++ client's of the same name.

argv[1] is a JSON spec: ``endpoint``, ``topic``, ``action`` ("send", "transaction", "push":
a PushConsumer of ``group`` started, reporting the settings the broker gave it, "consume": a
PushConsumer of ``group`` reporting each message it consumes, failing the bodies in
``fail`` that many times first and taking ``slow`` seconds over those in ``slow``, or "simple": a SimpleConsumer of ``group`` that takes one JSON
command a line on stdin: receive, ack, change, ack_with (an older handle); both consumers
subscribe with ``expression`` of ``filter`` "TAG" or "SQL92"),
``messages`` (each: body, tag, keys, properties, group, deliver_at_s, decision, recalls: how
many times to recall it once sent), optional
``ak``/``sk``, and for a transaction ``check`` (the TransactionChecker's answer: "commit" or
"rollback"). Prints one JSON line per receipt (and per check-back), then, once stdin closes,
shuts the client down: a transaction's producer stays up until the test has seen its check-back.
"""

import json
import sys
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
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType

RESOLUTIONS = {"commit": TransactionResolution.COMMIT, "rollback": TransactionResolution.ROLLBACK}


def out(**fields):
    print(json.dumps(fields), flush=True)


def message(topic, spec):
    msg = Message()
    msg.topic = topic
    msg.body = spec["body"].encode()
    if spec.get("tag"):
        msg.tag = spec["tag"]
    for key in spec.get("keys", []):
        msg.keys = key
    for name, value in spec.get("properties", {}).items():
        msg.add_property(name, value)
    if spec.get("group"):
        msg.message_group = spec["group"]
    if spec.get("deliver_at_s"):
        msg.delivery_timestamp = spec["deliver_at_s"]
    return msg


class Checker(TransactionChecker):
    def __init__(self, answer):
        self.answer = answer

    def check(self, msg):
        out(event="check", message_id=msg.message_id, body=msg.body.decode())
        return RESOLUTIONS[self.answer]


class Listener(MessageListener):
    def consume(self, message):
        out(event="received", message_id=message.message_id, body=message.body.decode())
        return ConsumeResult.SUCCESS


def described(msg):
    return {"message_id": msg.message_id, "body": msg.body.decode(), "tag": msg.tag, "topic": msg.topic,
            "attempt": msg.delivery_attempt, "group": msg.message_group, "handle": msg.receipt_handle,
            "properties": dict(msg.properties or {})}


def subscription(spec):
    kind = FilterType.SQL if spec.get("filter") == "SQL92" else FilterType.TAG
    return {spec["topic"]: FilterExpression(spec.get("expression", "*"), kind)}


class Recorder(MessageListener):
    """Reports each consumption; fails a body of ``fail`` its count of times first; takes
    ``slow`` [body] seconds over a body (then reports "slept")."""

    def __init__(self, fail, slow):
        self.fail = dict(fail)
        self.slow = dict(slow)

    def consume(self, message):
        body = message.body.decode()
        failing = self.fail.get(body, 0) > 0
        if failing:
            self.fail[body] -= 1
        out(event="consumed", failed=failing, **described(message))
        if body in self.slow:
            time.sleep(self.slow[body])
            out(event="slept", body=body)
        return ConsumeResult.FAILURE if failing else ConsumeResult.SUCCESS


def consume(config, spec):
    consumer = PushConsumer(config, spec["group"], Recorder(spec.get("fail", {}), spec.get("slow", {})), subscription(spec),
                            consumption_thread_count=1)
    consumer.startup()
    try:
        out(event="started")
        sys.stdin.read()
    finally:
        consumer.shutdown()


def simple(config, spec):
    consumer = SimpleConsumer(config, spec["group"], subscription(spec), await_duration=spec.get("await_s", 5))
    consumer.startup()
    held = {}
    try:
        out(event="started")
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            try:
                if op == "receive":
                    got = consumer.receive(command.get("max", 16), command.get("invisible_s", 20))
                    held.update((m.message_id, m) for m in got)
                    out(event="received", messages=[described(m) for m in got])
                    continue
                msg = held[command["id"]]
                if op == "ack_with":
                    msg.receipt_handle = command["handle"]
                if op in ("ack", "ack_with"):
                    consumer.ack(msg)
                    out(event="acked", message_id=msg.message_id)
                elif op == "change":
                    consumer.change_invisible_duration(msg, command["invisible_s"])
                    out(event="changed", message_id=msg.message_id, handle=msg.receipt_handle)
            except Exception as exc:  # noqa: BLE001 - reported for the test to assert on
                out(event="error", op=op, error=f"{type(exc).__name__}: {exc}")
    finally:
        consumer.shutdown()


def push(config, spec):
    """Start a PushConsumer (it waits for the broker's Settings) and report what it was told."""
    consumer = PushConsumer(config, spec["group"], Listener(), {spec["topic"]: FilterExpression("*")})
    consumer.startup()
    try:
        out(event="started", fifo=consumer._PushConsumer__fifo,
            long_polling_timeout_s=consumer._PushConsumer__long_polling_timeout)
        sys.stdin.read()
    finally:
        consumer.shutdown()


def main():
    spec = json.loads(sys.argv[1])
    config = ClientConfiguration(spec["endpoint"], Credentials(spec.get("ak", ""), spec.get("sk", "")),
                                 request_timeout=10)
    if spec["action"] in ("push", "consume", "simple"):
        {"push": push, "consume": consume, "simple": simple}[spec["action"]](config, spec)
        return
    topic = spec["topic"]
    checker = Checker(spec.get("check", "commit")) if spec["action"] == "transaction" else None
    producer = Producer(config, (topic,), checker)
    producer.startup()
    try:
        for item in spec["messages"]:
            try:
                if spec["action"] == "transaction":
                    transaction = producer.begin_transaction()
                    receipt = producer.send(message(topic, item), transaction)
                    decision = item.get("decision")
                    if decision == "commit":
                        transaction.commit()
                    elif decision == "rollback":
                        transaction.rollback()
                else:
                    receipt = producer.send(message(topic, item))
            except Exception as exc:  # noqa: BLE001 - any refusal is reported for the test to assert on
                out(event="error", error=f"{type(exc).__name__}: {exc}")
                continue
            out(event="sent", message_id=receipt.message_id, offset=receipt.offset,
                transaction_id=receipt.transaction_id, recall_handle=receipt.recall_handle)
            for _ in range(item.get("recalls", 0)):
                try:
                    out(event="recalled", message_id=producer.recall_message(topic, receipt.recall_handle))
                except Exception as exc:  # noqa: BLE001 - reported for the test to assert on
                    out(event="error", error=f"{type(exc).__name__}: {exc}")
        out(event="done")
        sys.stdin.read()
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
