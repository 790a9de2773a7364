"""A push consumer in its own process, for the multi-process semantics tests.

    python consumer_proc.py MODE NAMESRV TOPIC GROUP INSTANCE OUT_DIR [DELAY_MS]

MODE ``broadcast``: a BROADCASTING consumer with a concurrent listener; ``orderly``: a
clustering consumer with an orderly listener. Both pull 2 messages at a time and cache at
most about 4 per queue. Every consumed message is appended to
OUT_DIR/INSTANCE.jsonl as {"body", "queue", "offset", "at"} (``at``: wall-clock seconds when
the listener saw it), after DELAY_MS of work per message. Prints READY once started and shuts
down cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

from lakemq.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumerConfig,
    MessageExt,
    MessageModel,
    PushConsumer,
)


def record(sink: TextIO, msgs: list[MessageExt]) -> None:
    sink.writelines(json.dumps({"body": m.body.decode(), "queue": m.queue_id, "offset": m.queue_offset,
                               "at": time.time()}) + "\n" for m in msgs)


async def main(mode: str, namesrv: str, topic: str, group: str, instance: str, out_dir: str,
               delay_ms: str = "0") -> None:
    out = Path(out_dir)
    delay = int(delay_ms) / 1000
    broadcast = mode == "broadcast"
    config = ConsumerConfig(
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        message_model=MessageModel.BROADCASTING if broadcast else MessageModel.CLUSTERING,
        offsets_dir=str(out / f"{instance}-offsets"),
        # A small cache: a consumer that exits finishes what it cached, and leaves the rest
        # of its queues to the others.
        pull_batch_size=2,
        pull_threshold_for_queue=4,
    )
    consumer = PushConsumer(group, config=config, client_config=ClientConfig(
        namesrv_addr=namesrv, instance_name=instance, rebalance_interval=1000, persist_consumer_offset_interval=1000))
    consumer.subscribe(topic)
    sink = open(out / f"{instance}.jsonl", "a", buffering=1)  # noqa: ASYNC230, SIM115 - open for the process's life

    async def concurrently(msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
        await asyncio.sleep(delay * len(msgs))
        record(sink, msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    async def orderly(msgs: list[MessageExt], _ctx: object) -> ConsumeOrderlyStatus:
        await asyncio.sleep(delay * len(msgs))
        record(sink, msgs)
        return ConsumeOrderlyStatus.SUCCESS

    if broadcast:
        consumer.register_message_listener_concurrently(concurrently)
    else:
        consumer.register_message_listener_orderly(orderly)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await consumer.start()
    print("READY", flush=True)
    await stop.wait()
    await consumer.shutdown()
    sink.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:8]))
