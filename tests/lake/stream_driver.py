"""A streaming driver of its own (``python -m tests.lake.stream_driver``) for the kill -9 tests:
``lakemq`` stream of one topic into a Delta sink with a checkpoint, until killed (``--until
killed``, a 1 s processing-time trigger) or until it has read what was there when it started
(``--until caught-up``, Trigger.AvailableNow)."""

from __future__ import annotations

import argparse

from lakemq.jobs.session import build_session
from lakemq.jobs.sources import register_sources


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("namesrv", "lake", "topic", "sink", "checkpoint"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--until", choices=("killed", "caught-up"), required=True)
    parser.add_argument("--max-per-trigger", type=int, default=0, help="maxOffsetsPerTrigger; 0: none")
    args = parser.parse_args()
    spark = build_session(master="local[1]", app_name="lakemq-stream-driver", ui_enabled=False,
                          conf={"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "512m"})
    register_sources(spark)
    reader = (spark.readStream.format("lakemq").option("namesrv", args.namesrv).option("lake", args.lake)
              .option("topic", args.topic))
    if args.max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_per_trigger))
    stream = (reader.load()
              .select("keys", "queue_id", "queue_offset").writeStream.format("delta")
              .option("checkpointLocation", args.checkpoint))
    trigger = {"availableNow": True} if args.until == "caught-up" else {"processingTime": "1 second"}
    query = stream.trigger(**trigger).start(args.sink)
    print("started", flush=True)  # the soak waits for this before it picks a moment to kill
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
