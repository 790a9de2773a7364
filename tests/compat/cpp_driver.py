"""Drives the official RocketMQ C++ client (PyPI rocketmq 0.4.4) in its own process.

The compatibility tests run this file as a subprocess: the native library owns threads,
signal handlers and log files, and a crash in it must not take pytest down. It speaks JSON
lines on stdin/stdout, and writes the C++ client's logs under ``--log-dir``.

    produce --namesrv A --group G --mode sync|oneway|orderly|batch    < messages
        one message per stdin line: {"topic", "body", "tags"?, "keys"?, "props"?: {k: v},
        "order"?: int (orderly: the queue selector's argument, queue = order % queues)};
        one result per line: {"status", "msg_id", "offset"} (oneway: {"status": "SENT"});
        batch sends all lines as one batch and prints one result.
    consume --namesrv A --group G --topic T [--expression "TagA || TagB"] [--orderly]
            --expect N [--idle S] [--timeout S] [--props K,K] [--fail-first BODY,BODY]
        one line per delivered message (with "failed": true when the listener answered
        RECONSUME_LATER: a first delivery of a --fail-first body, which the client then sends
        back to the broker for a later retry); stops once N deliveries were printed and nothing more came
        for ``--idle`` seconds (so late duplicates or wrongly delivered messages are seen),
        or at ``--timeout``; shutdown persists the group's offsets to the broker.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from rocketmq.client import Message, Producer, PushConsumer, RecvMessage
from rocketmq.exceptions import ProducerSendOrderlyFailed, ProducerSendSyncFailed
from rocketmq.ffi import MSG_CALLBACK_FUNC, _CConsumeStatus, _CLogLevel, dll

INFO = _CLogLevel.INFO


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _message(spec: dict[str, Any]) -> Message:
    msg = Message(spec["topic"])
    msg.set_body(spec["body"])
    if spec.get("tags"):
        msg.set_tags(spec["tags"])
    if spec.get("keys"):
        msg.set_keys(spec["keys"])
    for key, value in spec.get("props", {}).items():
        msg.set_property(key, value)
    return msg


def _send_retrying(send: Any) -> Any:
    """A send, tried a second time if it fails with "No route info".

    The C++ client fails a send at once, without writing a byte, when it cannot take its
    transport table's lock: its log says "GetTransport of:<addr> get timed_mutex timeout" while
    another of its threads (the heartbeat, the route refresh, a first connect) is connecting a
    broker. Its own retries fail the same way within the same millisecond and it raises "No route
    info". This happens whenever the client opens a connection, so to a second broker in the
    middle of a run too, not only at the first send. A retried send that did reach the broker
    would show up as a duplicate, which the tests count."""
    try:
        return send()
    except (ProducerSendSyncFailed, ProducerSendOrderlyFailed) as exc:
        if "No route info" not in str(exc):
            raise
        time.sleep(0.5)
        return send()


def produce(args: argparse.Namespace) -> None:
    producer = Producer(args.group)
    producer.set_namesrv_addr(args.namesrv)
    dll.SetProducerLogPath(producer._handle, args.log_dir.encode())
    dll.SetProducerLogLevel(producer._handle, INFO)
    producer.start()
    try:
        specs = [json.loads(line) for line in sys.stdin]
        if args.mode == "batch":
            result = producer.send_batch([_message(spec) for spec in specs])
            print(json.dumps({"status": result.status.name, "msg_id": result.msg_id, "offset": result.offset}))
            return
        for n, spec in enumerate(specs):
            msg = _message(spec)
            if args.mode == "oneway":
                producer.send_oneway(msg)
                out: dict[str, Any] = {"status": "SENT"}
            else:
                def send(msg: Message = msg, spec: dict[str, Any] = spec) -> Any:
                    return (producer.send_orderly(msg, spec["order"]) if args.mode == "orderly"
                            else producer.send_sync(msg))

                result = _send_retrying(send)
                out = {"status": result.status.name, "msg_id": result.msg_id, "offset": result.offset}
            print(json.dumps(out), flush=True)
        if args.mode == "oneway":
            # Nothing answers a oneway send: shutting down right after the last one can close the
            # transport before libevent has written it out.
            time.sleep(1.0)
    finally:
        producer.shutdown()


def consume(args: argparse.Namespace) -> None:
    props = [p for p in args.props.split(",") if p]
    fail_first = {b for b in args.fail_first.split(",") if b}
    lock = threading.Lock()
    state = {"count": 0, "last": time.monotonic()}

    def on_message(_consumer: int, handle: int) -> int:
        msg = RecvMessage(handle)
        record = {
            "topic": msg.topic, "body": _text(msg.body), "tags": _text(msg.tags), "keys": _text(msg.keys),
            "id": msg.id, "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
            "reconsume_times": msg.reconsume_times, "props": {p: _text(msg.get_property(p)) for p in props},
        }
        failed = record["body"] in fail_first and msg.reconsume_times == 0
        with lock:
            print(json.dumps({**record, "failed": failed}), flush=True)
            state["count"] += 1
            state["last"] = time.monotonic()
        return int(_CConsumeStatus.RECONSUME_LATER if failed else _CConsumeStatus.CONSUME_SUCCESS)

    consumer = PushConsumer(args.group, orderly=args.orderly)
    consumer.set_namesrv_addr(args.namesrv)
    dll.SetPushConsumerLogPath(consumer._handle, args.log_dir.encode())
    dll.SetPushConsumerLogLevel(consumer._handle, INFO)
    consumer.set_thread_count(1 if args.orderly else 2)
    # One message per listener call: the C API answers for the whole call.
    consumer.set_message_batch_max_size(1)
    # The C API directly: 0.4.4's subscribe() wrapper re-raises a listener's exception out of
    # the ctypes callback, which leaves the status the client reads undefined.
    callback = MSG_CALLBACK_FUNC(on_message)
    dll.Subscribe(consumer._handle, args.topic.encode(), args.expression.encode())
    register = dll.RegisterMessageCallbackOrderly if args.orderly else dll.RegisterMessageCallback
    register(consumer._handle, callback)
    consumer.start()
    deadline = time.monotonic() + args.timeout
    try:
        while time.monotonic() < deadline:
            with lock:
                if state["count"] >= args.expect and time.monotonic() - state["last"] >= args.idle:
                    break
            time.sleep(0.05)
    finally:
        consumer.shutdown()
    print(json.dumps({"done": state["count"]}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("produce", "consume"):
        p = sub.add_parser(name)
        p.add_argument("--namesrv", required=True)
        p.add_argument("--group", required=True)
        p.add_argument("--log-dir", required=True)
    sub.choices["produce"].add_argument("--mode", choices=["sync", "oneway", "orderly", "batch"], default="sync")
    c = sub.choices["consume"]
    c.add_argument("--topic", required=True)
    c.add_argument("--expression", default="*")
    c.add_argument("--orderly", action="store_true")
    c.add_argument("--expect", type=int, required=True)
    c.add_argument("--idle", type=float, default=2.0)
    c.add_argument("--timeout", type=float, default=60.0)
    c.add_argument("--props", default="")
    c.add_argument("--fail-first", default="")
    args = parser.parse_args()
    produce(args) if args.command == "produce" else consume(args)


if __name__ == "__main__":
    main()
