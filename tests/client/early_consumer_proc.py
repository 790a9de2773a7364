"""A push consumer started before its topic exists, as a user script runs it (no logging set
up: whatever the client logs at WARNING or above reaches stderr).

    python early_consumer_proc.py NAMESRV TOPIC GROUP COUNT

Prints READY once started, then each consumed body, and exits once COUNT were consumed.
"""

from __future__ import annotations

import sys
import threading

from lakemq.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    SyncPushConsumer,
)


def main(namesrv: str, topic: str, group: str, count: int) -> None:
    # Routes polled every 200 ms (RocketMQ: 30 s), so the test does not wait for the topic long.
    consumer = SyncPushConsumer(group, config=ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET),
                                client_config=ClientConfig(namesrv_addr=namesrv, poll_name_server_interval=200,
                                                           rebalance_interval=1000))
    consumer.subscribe(topic, "*")
    seen: list[str] = []
    done = threading.Event()
    lock = threading.Lock()  # listeners run in several consume threads

    def listener(msgs, context):  # type: ignore[no-untyped-def]
        with lock:
            for m in msgs:
                sys.stdout.write(m.body.decode() + "\n")
                seen.append(m.body.decode())
            sys.stdout.flush()
            if len(seen) >= count:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    consumer.start()
    print("READY", flush=True)
    done.wait(60)
    consumer.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
