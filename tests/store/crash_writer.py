"""Child process for the crash tests: recover the CommitLog under ``argv[1]``, then append
SYNC_FLUSH messages from several threads forever, printing ``offset size writer seq`` for each
acknowledged put. The parent kills it with SIGKILL at a random moment."""

from __future__ import annotations

import os
import sys
import threading
import time

from lakemq.common.message import MessageExtBrokerInner
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import FlushDiskType, StoreConfig
from lakemq.store.results import PutMessageStatus

CONFIG = {"mapped_file_size_commit_log": 256 * 1024, "max_message_size": 64 * 1024,
          "flush_disk_type": FlushDiskType.SYNC_FLUSH}


def body_for(writer: int, seq: int) -> bytes:
    head = f"{writer}:{seq}:".encode()
    return head + bytes([(writer * 31 + seq) % 256]) * ((seq * 7919) % 20000)


def main() -> None:
    commit_log = CommitLog(StoreConfig(store_path_root_dir=sys.argv[1], **CONFIG))  # type: ignore[arg-type]
    commit_log.load()
    commit_log.recover_normally()
    commit_log.start()
    out_lock = threading.Lock()
    round_id = int(sys.argv[2])

    def write(writer: int) -> None:
        seq = 0
        while True:
            msg = MessageExtBrokerInner(topic="CrashTopic", queue_id=writer, body=body_for(writer, seq))
            result = commit_log.put_message(msg)
            ar = result.append_result
            if result.status is PutMessageStatus.PUT_OK and ar is not None:
                with out_lock:
                    sys.stdout.write(f"{ar.wrote_offset} {ar.wrote_bytes} {round_id * 100 + writer} {seq}\n")
                    sys.stdout.flush()
            seq += 1

    parent = os.getppid()

    def orphan_watch() -> None:  # never outlive the test that started us
        deadline = time.monotonic() + 60
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=orphan_watch, daemon=True).start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for w in range(4):
        threading.Thread(target=write, args=(w,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
