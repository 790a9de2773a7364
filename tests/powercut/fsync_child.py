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


def main() -> None:
    root = Path(sys.argv[1])
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
