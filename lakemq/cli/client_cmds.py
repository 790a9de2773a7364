"""`lakemq produce`, `lakemq consume` and `lakemq admin ...`: thin faces over lakemq.client."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from datetime import datetime

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lakemq.cli import main
from lakemq.cli.output import print_rows
from lakemq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumerConfig,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from lakemq.client.admin import Admin, QueueProgress, QueueStats
from lakemq.common.logs import setup_logging
from lakemq.errors import LakeMQError


def log_to_file() -> None:
    """Client warnings (a retried send, a failed name server) go to the log, not the terminal."""
    setup_logging("lakemq-client")

namesrv_option = click.option(
    "--namesrv", "-n", default=lambda: os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"), show_default="$NAMESRV_ADDR or 127.0.0.1:9876",
    help="name server address(es), host:port;host:port")


@main.command()
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--tags", default=None, help="tag of every message")
@click.option("--keys", default=None, help="space-separated keys of every message")
@click.option("--count", "-c", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--size", "-s", default=None, type=click.IntRange(min=1), help="body size in bytes (generated body)")
@click.option("--body", "-b", default=None, help="body text (default: 'message N')")
@click.option("--group", "-g", default="lakemq_cli_producer", show_default=True)
def produce(namesrv: str, topic: str, tags: str | None, keys: str | None, count: int, size: int | None,
            body: str | None, group: str) -> None:
    """Send COUNT messages to TOPIC and print a summary."""
    log_to_file()
    if size is not None and body is not None:
        raise click.UsageError("--size and --body are exclusive")

    def make_body(i: int) -> bytes:
        if size is not None:
            return (f"{i}:".encode() + b"x" * size)[:size]
        return (body if body is not None else f"message {i}").encode()

    async def run() -> tuple[int, float, str, str]:
        last_id = last_offset_id = ""
        started = time.monotonic()
        async with Producer(group, namesrv_addr=namesrv) as producer:
            with Progress(TextColumn("sending"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty()) as progress:
                task = progress.add_task("send", total=count)
                for i in range(count):
                    msg = Message(topic, make_body(i))
                    msg.tags = tags
                    msg.keys = keys
                    result = await producer.send(msg)
                    last_id, last_offset_id = result.msg_id, result.offset_msg_id
                    progress.advance(task)
        return count, time.monotonic() - started, last_id, last_offset_id

    sent, elapsed, last_id, last_offset_id = asyncio.run(run())
    # Both ids, named: `admin message view` takes either (--id; a unique key with --topic).
    click.echo(f"sent {sent} message(s) to {topic} in {elapsed:.2f}s, last msg id {last_id} (unique key), "
               f"offset msg id {last_offset_id}")


def _line(msg: MessageExt) -> str:
    text = msg.body.decode("utf-8", "replace")
    if len(text) > 200:
        text = text[:200] + "..."
    return f"{msg.topic}\t{msg.queue_id}\t{msg.queue_offset}\t{msg.msg_id}\t{msg.tags or ''}\t{text}"


@main.command()
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--group", "-g", required=True)
@click.option("--expression", "-e", default="*", show_default=True, help="tag expression, e.g. 'a || b'")
@click.option("--count", "-c", default=None, type=click.IntRange(min=1), help="stop after COUNT messages")
@click.option("--from", "from_where", type=click.Choice(["first", "last", "timestamp"]), default="last",
              show_default=True, help="where a group without stored offsets starts")
@click.option("--timestamp", default="", help="yyyyMMddHHmmss for --from timestamp")
@click.option("--idle-timeout", default=None, type=float, help="stop after this many seconds without a message")
def consume(namesrv: str, topic: str, group: str, expression: str, count: int | None, from_where: str,
            timestamp: str, idle_timeout: float | None) -> None:
    """Print messages of TOPIC as `topic queue offset msgid tags body`, one per line."""
    log_to_file()
    where = {"first": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, "last": ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
             "timestamp": ConsumeFromWhere.CONSUME_FROM_TIMESTAMP}[from_where]
    if timestamp:
        try:
            datetime.strptime(timestamp, "%Y%m%d%H%M%S")
        except ValueError:
            raise click.BadParameter("expected yyyyMMddHHmmss", param_hint="--timestamp") from None

    async def run() -> int:
        seen = 0
        done = asyncio.Event()
        last_message = time.monotonic()
        consumer = PushConsumer(group, namesrv_addr=namesrv,
                                config=ConsumerConfig(consume_from_where=where, consume_timestamp=timestamp))
        consumer.subscribe(topic, expression)

        async def on_messages(msgs: list[MessageExt], ctx: object) -> ConsumeConcurrentlyStatus:
            nonlocal seen, last_message
            for msg in msgs:
                if count is not None and seen >= count:
                    break
                click.echo(_line(msg))
                seen += 1
            last_message = time.monotonic()
            if count is not None and seen >= count:
                done.set()
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        consumer.register_message_listener_concurrently(on_messages)
        # SIGTERM ends the run like --count does: offsets are persisted on the way out.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, done.set)
        await consumer.start()
        try:
            while not done.is_set():
                try:
                    await asyncio.wait_for(done.wait(), 0.2)
                except TimeoutError:
                    if idle_timeout is not None and time.monotonic() - last_message > idle_timeout:
                        break
        finally:
            await consumer.shutdown()
        return seen

    try:
        seen = asyncio.run(run())
    except KeyboardInterrupt:
        return
    click.echo(f"consumed {seen} message(s)", err=True)


@main.group()
def admin() -> None:
    """Topics and consumer groups."""


@admin.group()
def topic() -> None:
    """Create, list and inspect topics."""


@topic.command("create")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--queues", "-q", default=4, show_default=True, type=int, help="read and write queue count")
@click.option("--cluster", "-c", default=None, help="only the masters of this cluster")
@click.option("--order", is_flag=True, help="an ordered topic")
def topic_create(namesrv: str, topic: str, queues: int, cluster: str | None, order: bool) -> None:
    log_to_file()
    async def run() -> list[str]:
        async with Admin(namesrv) as admin_api:
            return await admin_api.create_topic(topic, queue_nums=queues, order=order, cluster=cluster)

    brokers = asyncio.run(run())
    click.echo(f"topic {topic} created with {queues} queue(s) on {', '.join(brokers)}")


@topic.command("list")
@namesrv_option
def topic_list(namesrv: str) -> None:
    log_to_file()
    async def run() -> list[str]:
        async with Admin(namesrv) as admin_api:
            return await admin_api.list_topics()

    for name in asyncio.run(run()):
        click.echo(name)


@topic.command("stats")
@namesrv_option
@click.option("--topic", "-t", required=True)
def topic_stats(namesrv: str, topic: str) -> None:
    log_to_file()
    async def run() -> list[QueueStats]:
        async with Admin(namesrv) as admin_api:
            return await admin_api.topic_stats(topic)

    print_rows(("broker", "queue", "min offset", "max offset", "messages"),
               [(row.mq.broker_name, str(row.mq.queue_id), str(row.min_offset), str(row.max_offset),
                 str(row.max_offset - row.min_offset)) for row in asyncio.run(run())])


@admin.group()
def consumer() -> None:
    """Consumer groups."""


@consumer.command("progress")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--topic", "-t", default=None, help="only this topic")
def consumer_progress(namesrv: str, group: str, topic: str | None) -> None:
    """Per queue: broker max offset, committed offset and lag."""
    log_to_file()
    async def run() -> list[QueueProgress]:
        async with Admin(namesrv) as admin_api:
            return await admin_api.consumer_progress(group, topic)

    rows = asyncio.run(run())
    if not rows:
        raise LakeMQError(f"group {group} has no committed offsets")
    print_rows(("topic", "broker", "queue", "broker offset", "consumer offset", "lag"),
               [(row.mq.topic, row.mq.broker_name, str(row.mq.queue_id), str(row.broker_offset),
                 str(row.consumer_offset), str(row.lag)) for row in rows])
    click.echo(f"total lag {sum(r.lag for r in rows)}")
