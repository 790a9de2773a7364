"""``lakemq admin message query|view``: find messages by key, unique key or message id."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import click
from rich.console import Console
from rich.table import Table

from lakemq.cli.client_cmds import log_to_file, admin, namesrv_option
from lakemq.client.admin import Admin
from lakemq.common.message import MessageExt
from lakemq.errors import LakeMQError

BODY_PREVIEW = 60


def parse_millis(text: str | None, default: int) -> int:
    """Epoch milliseconds, or an ISO date/time such as 2026-11-22T10:00:00 (local time)."""
    if not text:
        return default
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError as exc:
        raise LakeMQError(f"time {text!r} is neither epoch milliseconds nor an ISO date/time") from exc


def _show(messages: list[MessageExt]) -> None:
    table = Table("msg id (offset)", "unique key", "topic", "queue", "queue offset", "stored", "tags", "keys", "body")
    for m in messages:
        body = m.body[:BODY_PREVIEW].decode("utf-8", "replace") + ("…" if len(m.body) > BODY_PREVIEW else "")
        stored = datetime.fromtimestamp(m.store_timestamp / 1000).isoformat(timespec="milliseconds")
        table.add_row(m.msg_id, m.unique_key or "", m.topic, str(m.queue_id), str(m.queue_offset), stored,
                      m.tags or "", " ".join(m.keys), body)
    Console().print(table)


@admin.group()
def message() -> None:
    """Find messages: by key, by unique key (client message id) or by offset message id."""


@message.command("query")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--key", "-k", help="a key from the message's KEYS")
@click.option("--unique-key", "-u", help="the client message id (UNIQ_KEY) a producer got back")
@click.option("--begin", help="stored at or after (epoch ms or ISO time; default: the beginning)")
@click.option("--end", help="stored at or before (epoch ms or ISO time; default: now)")
@click.option("--max", "max_num", default=64, show_default=True, help="at most this many messages")
def query_cmd(namesrv: str, topic: str, key: str | None, unique_key: str | None, begin: str | None,
              end: str | None, max_num: int) -> None:
    """Messages of TOPIC by key and time range, through the brokers' IndexFiles."""
    log_to_file()
    if bool(key) == bool(unique_key):
        raise LakeMQError("give exactly one of --key and --unique-key")

    async def run() -> list[MessageExt]:
        async with Admin(namesrv) as admin_api:
            return await admin_api.query_message(
                topic, key or unique_key or "", max_num=max_num, begin_ms=parse_millis(begin, 0),
                end_ms=parse_millis(end, int(time.time() * 1000)), unique_key=bool(unique_key))

    found = asyncio.run(run())
    if not found:
        raise LakeMQError(f"no message of {topic} with {'key' if key else 'unique key'} {key or unique_key}")
    _show(found)
    click.echo(f"{len(found)} message(s)")


@message.command("view")
@namesrv_option
@click.option("--id", "msg_id", help="the offset message id (store host + CommitLog offset)")
@click.option("--unique-key", "-u", help="the client message id (UNIQ_KEY) a producer got back; needs --topic")
@click.option("--topic", "-t", help="the message's topic, with --unique-key")
def view_cmd(namesrv: str, msg_id: str | None, unique_key: str | None, topic: str | None) -> None:
    """One message, with every property: by offset message id (VIEW_MESSAGE_BY_ID) or by
    unique key (QUERY_MESSAGE on UNIQ_KEY; a message stored twice by a retried send shows twice)."""
    log_to_file()
    if bool(msg_id) == bool(unique_key):
        raise LakeMQError("give exactly one of --id and --unique-key")
    if unique_key and not topic:
        raise LakeMQError("--unique-key needs --topic")

    async def run() -> list[MessageExt]:
        async with Admin(namesrv) as admin_api:
            if unique_key:
                return await admin_api.query_message(topic or "", unique_key, unique_key=True)
            return [await admin_api.view_message(msg_id or "")]

    found = asyncio.run(run())
    if not found:
        raise LakeMQError(f"no message of {topic} with unique key {unique_key}")
    for msg in found:
        _show([msg])
        props = Table("property", "value")
        for name, value in sorted(msg.properties.items()):
            props.add_row(name, value)
        Console().print(props)
        click.echo(f"reconsume times {msg.reconsume_times}, born {msg.born_host}, stored on {msg.store_host}, "
                   f"commit log offset {msg.commit_log_offset}, body {len(msg.body)} bytes")
