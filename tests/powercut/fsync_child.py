"""Child of test_dir_fsync: a SYNC_FLUSH store on tiny files that rolls CommitLog and
ConsumeQueue files, writes the broker's config tables and the delay offsets, then shuts down.
The test runs it under strace and checks every name it made is followed by a directory fsync."""

from __future__ import annotations

import sys
from pathlib import Path

from lakemq.broker.config_file import save_json
from lakemq.common.message import MessageExtBrokerInner
from lakemq.store.config import FlushDiskType, StoreConfig
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus
from lakemq.tiering.lake_fs import LakeLocation


def lake_main(root: Path) -> None:
    """A tier run's writes on a local lake: Parquet parts in new partition directories
    (unsynced, as Spark's tasks write them), made durable before the Delta log names them."""
    lake = LakeLocation.of(str(root / "lake"))
    parts = [lake.join("messages", f"topic=T{i}", "store_date=2026-11-28", f"part-{i}.parquet") for i in range(2)]
    for part in parts:
        with lake.open_write(part) as handle:
            handle.write(b"PAR1" * 100)
    lake.make_durable(parts)
    print("done", flush=True)


def main() -> None:
    root = Path(sys.argv[1])
    if sys.argv[2:] == ["lake"]:
        lake_main(root)
        return
    store = MessageStore(StoreConfig(
        store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20, max_hash_slot_num=64, max_index_num=256,
        flush_disk_type=FlushDiskType.SYNC_FLUSH))
    if not store.load():
        raise SystemExit("store failed to load")
    store.start()
    for i in range(300):
        msg = MessageExtBrokerInner(topic=f"T{i % 2}", queue_id=0, body=bytes(1000),
                                    properties={"KEYS": f"k{i}"})
        result = store.put(MessagesPut.of(msg))
        if result.status is not PutMessageStatus.PUT_OK:
            raise SystemExit(f"put {i}: {result.status}")
    for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json"):
        save_json(root / "config" / name, {"version": 1})
        save_json(root / "config" / name, {"version": 2})  # a second time: a .bak too
    store.schedule.persist()
    store.shutdown()
    print("done", flush=True)


if __name__ == "__main__":
    main()
