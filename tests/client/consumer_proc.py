"""A clustering push consumer in its own process, for the multi-process tests.

    python consumer_proc.py NAMESRV TOPIC GROUP INSTANCE OUT_DIR

Appends each consumed body to OUT_DIR/INSTANCE.msgs, rewrites OUT_DIR/INSTANCE.owned with the
queues it owns, prints READY once started and shuts down cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from lakemq.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    MessageExt,
    PushConsumer,
)


async def main(namesrv: str, topic: str, group: str, instance: str, out_dir: str) -> None:
    out = Path(out_dir)
    msgs_path, owned_path = out / f"{instance}.msgs", out / f"{instance}.owned"
    consumer = PushConsumer(group, config=ConsumerConfig(consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET),
                            client_config=ClientConfig(namesrv_addr=namesrv, instance_name=instance,
                                                       rebalance_interval=1000, persist_consumer_offset_interval=1000))
    consumer.subscribe(topic)
    sink = open(msgs_path, "a", buffering=1)  # noqa: ASYNC230, SIM115 - open for the process's life, line-buffered

    async def listener(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
        sink.writelines(m.body.decode() + "\n" for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_message_listener_concurrently(listener)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await consumer.start()
    print("READY", flush=True)
    while not stop.is_set():
        owned = sorted(f"{mq.broker_name}:{mq.queue_id}" for mq in consumer.owned_queues() if mq.topic == topic)
        tmp = owned_path.with_suffix(".tmp")
        tmp.write_text("\n".join(owned))
        os.replace(tmp, owned_path)
        try:
            await asyncio.wait_for(stop.wait(), 0.1)
        except TimeoutError:
            pass
    await consumer.shutdown()
    sink.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
