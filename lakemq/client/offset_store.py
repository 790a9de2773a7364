"""Where a consumer group's progress lives.

Clustering: the broker keeps the group's offsets (RemoteBrokerOffsetStore): the consumer
updates an in-memory table as messages complete and persists it every 5 s with
UPDATE_CONSUMER_OFFSET; QUERY_CONSUMER_OFFSET reads it back. Broadcasting: every consumer
keeps its own offsets in a JSON file (LocalFileOffsetStore), replaced atomically.
An offset is the next queue offset to consume; -1 means "none stored".
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Protocol

from lakemq.common.durable import write_file_durably
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import BrokerError, LakeMQError, RemotingError

__all__ = [
    "LocalFileOffsetStore",
    "OffsetBroker",
    "OffsetStore",
    "ReadOffsetType",
    "RemoteBrokerOffsetStore",
    "default_offsets_dir",
]

log = logging.getLogger(__name__)


class ReadOffsetType(Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetBroker(Protocol):
    """What the remote store needs from the client's broker API."""

    async def query_consumer_offset(self, mq: MessageQueue, group: str) -> int: ...

    async def update_consumer_offset(self, mq: MessageQueue, group: str, offset: int) -> None: ...


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def update_offset(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None: ...

    async def read_offset(self, mq: MessageQueue, how: ReadOffsetType) -> int: ...

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    def remove_offset(self, mq: MessageQueue) -> None: ...

    def offsets(self) -> dict[MessageQueue, int]: ...


class _MemoryTable:
    def __init__(self) -> None:
        self._table: dict[MessageQueue, int] = {}

    def update_offset(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        current = self._table.get(mq)
        if current is None or not increase_only or offset > current:
            self._table[mq] = offset

    def remove_offset(self, mq: MessageQueue) -> None:
        self._table.pop(mq, None)

    def offsets(self) -> dict[MessageQueue, int]:
        return dict(self._table)


class RemoteBrokerOffsetStore(_MemoryTable):
    def __init__(self, broker: OffsetBroker, group: str) -> None:
        super().__init__()
        self._broker = broker
        self._group = group

    async def load(self) -> None:
        """Nothing to load: the broker is the store."""

    async def read_offset(self, mq: MessageQueue, how: ReadOffsetType) -> int:
        if how is not ReadOffsetType.READ_FROM_STORE and mq in self._table:
            return self._table[mq]
        if how is ReadOffsetType.READ_FROM_MEMORY:
            return -1
        offset = await self._broker.query_consumer_offset(mq, self._group)
        if offset >= 0:
            self.update_offset(mq, offset)
        return offset

    async def persist(self, mq: MessageQueue) -> None:
        offset = self._table.get(mq)
        if offset is not None:
            await self._broker.update_consumer_offset(mq, self._group, offset)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Persist the owned queues; forget queues no longer owned (RocketMQ does the same)."""
        owned = set(mqs)
        for mq in list(self._table):
            if mq not in owned:
                self._table.pop(mq, None)
                continue
            try:
                await self.persist(mq)
            except (RemotingError, BrokerError) as exc:
                log.warning("persist offset of %s failed: %s", mq, exc)


def default_offsets_dir() -> Path:
    return Path(os.environ.get("LAKEMQ_OFFSETS_DIR", Path.home() / ".lakemq_offsets"))


class LocalFileOffsetStore(_MemoryTable):
    """``{base}/{client_id}/{group}/offsets.json``; written to a temp file, fsynced and
    renamed over the old one, with the previous version kept as ``offsets.json.bak``."""

    def __init__(self, client_id: str, group: str, base_dir: str | Path | None = None) -> None:
        super().__init__()
        safe_client = client_id.replace(":", "_").replace("/", "_")
        self.path = Path(base_dir or default_offsets_dir()) / safe_client / group / "offsets.json"
        self._lock = asyncio.Lock()

    def _read_file(self) -> dict[MessageQueue, int] | None:
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                text = candidate.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            try:
                obj = json.loads(text)
                return {MessageQueue.from_json(e): int(e["offset"]) for e in obj["offsetTable"]}
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("offset file %s is unreadable (%s), trying the backup", candidate, exc)
        if self.path.exists():
            raise LakeMQError(f"offset file {self.path} and its backup are unreadable")
        return None

    def write_file(self, table: dict[MessageQueue, int]) -> None:
        """Atomic replace: a crash leaves either the old or the new file, never half of one."""
        entries = [dict(mq.to_json(), offset=off) for mq, off in sorted(table.items())]
        write_file_durably(self.path, json.dumps({"offsetTable": entries}, indent=1), backup=True)

    async def load(self) -> None:
        stored = await asyncio.to_thread(self._read_file)
        for mq, offset in (stored or {}).items():
            self.update_offset(mq, offset)

    async def read_offset(self, mq: MessageQueue, how: ReadOffsetType) -> int:
        if how is not ReadOffsetType.READ_FROM_STORE and mq in self._table:
            return self._table[mq]
        if how is ReadOffsetType.READ_FROM_MEMORY:
            return -1
        stored = await asyncio.to_thread(self._read_file)
        offset = (stored or {}).get(mq, -1)
        if offset >= 0:
            self.update_offset(mq, offset)
        return offset

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all(self._table)

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        owned = set(mqs)
        snapshot = {mq: off for mq, off in self._table.items() if mq in owned}
        if not snapshot:
            return
        async with self._lock:
            # Queues of other topics already on disk stay: a broadcast consumer owns them all.
            stored = await asyncio.to_thread(self._read_file) or {}
            stored.update(snapshot)
            await asyncio.to_thread(self.write_file, stored)
