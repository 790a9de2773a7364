"""``lakemq admin message query|view``: find messages by key, unique key or message id."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from lakemq.cli.client_cmds import admin, log_to_file, namesrv_option
from lakemq.cli.lake_service import service_option
from lakemq.cli.output import print_rows
from lakemq.client.admin import BROKER_QUERY_MAX, Admin, MessageQuery, message_order
from lakemq.client.message_id import message_id_kind
from lakemq.common.message import MessageExt
from lakemq.common.timeparse import parse_millis
from lakemq.errors import LakeMQError

if TYPE_CHECKING:
    from lakemq.tiering.tables import LakeMessage

BODY_PREVIEW = 60


def _row(tier: str, msg_id: str, uniq: str | None, topic: str, queue_id: int, queue_offset: int, stored_ms: int,
         tags: str | None, keys: Sequence[str], body: bytes) -> tuple[str, ...]:
    preview = body[:BODY_PREVIEW].decode("utf-8", "replace") + ("…" if len(body) > BODY_PREVIEW else "")
    stored = datetime.fromtimestamp(stored_ms / 1000).isoformat(timespec="milliseconds")
    return (tier, msg_id, uniq or "", topic, str(queue_id), str(queue_offset), stored, tags or "", " ".join(keys),
            preview)


def _hot_row(m: MessageExt) -> tuple[str, ...]:
    return _row("hot", m.msg_id, m.unique_key, m.topic, m.queue_id, m.queue_offset, m.store_timestamp, m.tags,
                m.keys, m.body)


def _lake_row(m: LakeMessage) -> tuple[str, ...]:
    return _row("lake", m.msg_id, m.uniq_key, m.topic, m.queue_id, m.queue_offset, m.store_timestamp, m.tags,
                m.keys, m.body)


_COLUMNS = ("tier", "msg id (offset)", "unique key", "topic", "queue", "queue offset", "stored", "tags", "keys",
            "body")


def _show(rows: Sequence[tuple[str, ...]]) -> None:
    print_rows(_COLUMNS, rows, wrap=("keys", "body"))


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
@click.option("--max", "max_num", default=64, show_default=True,
              help="show the newest this many (listed oldest first)")
@click.option("--lake", help="also search this lake (history the hot tier no longer holds)")
@click.option("--storage-option", "-o", "storage_option", multiple=True, help="KEY=VALUE for the lake store")
@click.option("--master", help="Spark master for the lake search")
@service_option
def query_cmd(namesrv: str, topic: str, key: str | None, unique_key: str | None, begin: str | None,
              end: str | None, max_num: int, lake: str | None, storage_option: tuple[str, ...],
              master: str | None, service: str | None) -> None:
    """Messages of TOPIC by key and time range, through the brokers' IndexFiles, and with
    --lake through the lake's messages table as well: the newest --max matches of both tiers,
    listed oldest first (store time, then CommitLog order)."""
    log_to_file()
    if bool(key) == bool(unique_key):
        raise LakeMQError("give exactly one of --key and --unique-key")
    begin_ms, end_ms = parse_millis(begin, 0), parse_millis(end, int(time.time() * 1000))

    if max_num < 1:
        raise LakeMQError("--max must be at least 1")

    async def run() -> MessageQuery:
        async with Admin(namesrv) as admin_api:
            return await admin_api.query_message_limited(
                topic, key or unique_key or "", max_num=max_num, begin_ms=begin_ms, end_ms=end_ms,
                unique_key=bool(unique_key))

    try:
        hot = asyncio.run(run())
    except LakeMQError as exc:
        if not lake:
            raise
        # History outlives brokers: with a lake to search, an unreachable cluster is a note.
        logging.getLogger(__name__).warning("hot tier not searched", exc_info=True)
        click.echo(f"note: hot tier not searched: {exc}", err=True)
        hot = MessageQuery([], False, False)
    rows = [(message_order(m), _hot_row(m)) for m in hot.messages]
    more = hot.more
    lake_error: LakeMQError | None = None
    if lake:
        from lakemq.cli.lake_service import lake_session
        from lakemq.jobs.connect_client import keep_out_numpy

        # The look-up tries the lake's index in this process first, which needs pyarrow but not
        # numpy and pandas (a second of imports): kept out until a Spark here lets them in.
        keep_out_numpy()
        from lakemq.cli.progress import JobProgress
        from lakemq.jobs.message_lookup import find_messages, find_messages_on_driver
        from lakemq.tiering.lake_fs import parse_storage_options

        seen = {m.msg_id for m in hot.messages}
        # One more than shown: finding it says that --max cut the result.
        lookup: dict[str, Any] = {"topic": topic, "key": key, "unique_key": unique_key, "begin_ms": begin_ms,
                                  "end_ms": end_ms, "limit": max_num + 1,
                                  "storage_options": parse_storage_options(storage_option)}
        try:
            # Through the lake's index a look-up reads a few rows, here; Spark only when it must.
            found = find_messages_on_driver(lake, **lookup)
            if found is None:
                logging.getLogger(__name__).info("the lake look-up needs Spark: %s", lake)
                with JobProgress() as progress, lake_session(service, master, progress) as spark:
                    found = find_messages(spark, lake, **lookup)
            cold = found
        except LakeMQError as exc:
            if not hot.messages:
                raise
            # What the hot tier found is shown; the failed lake search still fails the command.
            logging.getLogger(__name__).warning("lake search failed", exc_info=True)
            lake_error, cold = exc, []
        rows += [((m.store_timestamp, m.store_host, m.commitlog_offset), _lake_row(m)) for m in cold
                 if m.msg_id not in seen]
    if not rows:
        where = " (hot tier and lake)" if lake else ""
        raise LakeMQError(f"no message of {topic} with {'key' if key else 'unique key'} {key or unique_key}{where}")
    # Each tier answered its newest --max; together, the newest --max of both, oldest first.
    rows.sort(key=lambda pair: pair[0])
    more |= len(rows) > max_num
    _show([row for _, row in rows[-max_num:]])
    shown = min(len(rows), max_num)
    if more:
        click.echo(f"the newest {shown} message(s) shown, oldest first; older ones match too: raise --max or "
                   "narrow --begin/--end")
    elif hot.capped:
        click.echo(f"{shown} message(s); a broker answers at most {BROKER_QUERY_MAX} per query, so more may match: "
                   "narrow --begin/--end")
    else:
        click.echo(f"{shown} message(s)")
    if lake_error is not None:
        raise LakeMQError(f"the lake was not searched, only the hot tier is shown: {lake_error}")


@message.command("view")
@namesrv_option
@click.option("--id", "msg_id", help="a message id: the offset message id (store host + CommitLog offset), or the "
                                     "unique key a producer got back, with --topic")
@click.option("--unique-key", "-u", help="the client message id (UNIQ_KEY) a producer got back; needs --topic")
@click.option("--topic", "-t", help="the message's topic, with a unique key")
def view_cmd(namesrv: str, msg_id: str | None, unique_key: str | None, topic: str | None) -> None:
    """One message, with every property: by offset message id (VIEW_MESSAGE_BY_ID) or by
    unique key (QUERY_MESSAGE on UNIQ_KEY; a message stored twice by a retried send shows twice)."""
    log_to_file()
    if bool(msg_id) == bool(unique_key):
        raise LakeMQError("give exactly one of --id and --unique-key")
    if msg_id:
        kind = message_id_kind(msg_id)
        if kind is None:
            raise LakeMQError(f"{msg_id} is not a message id: an offset message id or a unique key is 32 hex digits")
        if kind == "unique":
            if not topic:
                raise LakeMQError(f"{msg_id} is a unique key (the id a producer gets back), not an offset message id: "
                                  f"add --topic TOPIC, or use --unique-key {msg_id} --topic TOPIC")
            msg_id, unique_key = None, msg_id
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
        _show([_hot_row(msg)])
        print_rows(("property", "value"), sorted(msg.properties.items()))
        click.echo(f"reconsume times {msg.reconsume_times}, born {msg.born_host}, stored on {msg.store_host}, "
                   f"commit log offset {msg.commit_log_offset}, body {len(msg.body)} bytes")
