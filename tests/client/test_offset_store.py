import asyncio
import json
import os
from pathlib import Path

import pytest

from lakemq.client.offset_store import LocalFileOffsetStore, ReadOffsetType
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import LakeMQError

MQ0 = MessageQueue("T", "b", 0)
MQ1 = MessageQueue("T", "b", 1)


def test_local_store_round_trip_and_backup(tmp_path: Path) -> None:
    async def run() -> None:
        store = LocalFileOffsetStore("127.0.0.1@1", "g", tmp_path)
        await store.load()
        assert await store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == -1
        store.update_offset(MQ0, 10)
        store.update_offset(MQ1, 5)
        store.update_offset(MQ1, 3, increase_only=True)
        await store.persist_all([MQ0, MQ1])
        store.update_offset(MQ0, 12)
        await store.persist_all([MQ0, MQ1])
        assert store.path == tmp_path / "127.0.0.1@1" / "g" / "offsets.json"
        again = LocalFileOffsetStore("127.0.0.1@1", "g", tmp_path)
        await again.load()
        assert again.offsets() == {MQ0: 12, MQ1: 5}
        assert await again.read_offset(MQ1, ReadOffsetType.READ_FROM_MEMORY) == 5
        bak = json.loads(store.path.with_name("offsets.json.bak").read_text())
        assert {e["queueId"]: e["offset"] for e in bak["offsetTable"]} == {0: 10, 1: 5}
        # a torn main file (a crash outside our atomic rename) falls back to the backup
        store.path.write_text('{"offsetTable": [')
        torn = LocalFileOffsetStore("127.0.0.1@1", "g", tmp_path)
        await torn.load()
        assert torn.offsets() == {MQ0: 10, MQ1: 5}
        store.path.with_name("offsets.json.bak").write_text("garbage")
        with pytest.raises(LakeMQError):
            await LocalFileOffsetStore("127.0.0.1@1", "g", tmp_path).load()

    asyncio.run(run())


def test_local_store_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalFileOffsetStore("c", "g", tmp_path)
    store.write_file({MQ0: 1})
    real_replace = os.replace

    def crash(src: str, dst: str) -> None:
        if str(dst).endswith("offsets.json"):
            raise OSError("power cut")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        store.write_file({MQ0: 2})
    monkeypatch.setattr(os, "replace", real_replace)

    async def reload() -> dict[MessageQueue, int]:
        s = LocalFileOffsetStore("c", "g", tmp_path)
        await s.load()
        return s.offsets()

    # the old content survives as the backup; nothing half-written is ever read
    assert asyncio.run(reload()) == {MQ0: 1}
