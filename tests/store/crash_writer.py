"""Child process for the crash tests: open the store under ``argv[1]`` (the CommitLog alone,
or the whole MessageStore when ``argv[3] == "store"``), then append SYNC_FLUSH messages from
several threads forever, printing ``offset size writer seq queue_offset`` for each
acknowledged put. The parent kills it with SIGKILL at a random moment (:func:`run_and_kill`)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from lakemq.common.message import MessageExtBrokerInner
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import FlushDiskType, StoreConfig
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageResult, PutMessageStatus

CONFIG = {"mapped_file_size_commit_log": 256 * 1024, "max_message_size": 64 * 1024,
          "flush_disk_type": FlushDiskType.SYNC_FLUSH}
STORE_CONFIG = {**CONFIG, "mapped_file_size_consume_queue": 20 * 200, "max_hash_slot_num": 256,
                "max_index_num": 2048}
WRITERS = 4

Acked = list[tuple[int, int, int, int, int]]  # offset, size, writer tag, seq, queue offset


def run_and_kill(store: Path, round_id: int, rng: random.Random, mode: str = "commitlog",
                 run_for: tuple[float, float] = (0.05, 0.6)) -> Acked:
    """Run this writer on ``store`` for a random time within ``run_for`` seconds once it is
    ready, SIGKILL it, and return the puts it printed as acknowledged."""
    proc = subprocess.Popen([sys.executable, __file__, str(store), str(round_id), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if first != b"ready\n":
            raise AssertionError(f"writer failed to start: {proc.communicate(timeout=10)[1].decode()}")
        time.sleep(rng.uniform(*run_for))
    finally:
        proc.kill()  # SIGKILL; also when the test fails: never leave a writer behind
    out, _ = proc.communicate(timeout=30)
    acked = []
    for line in out.split(b"\n"):
        parts = line.split()
        if len(parts) == 5:  # a torn last line was never fully acknowledged to us
            acked.append(tuple(int(p) for p in parts))
    return acked  # type: ignore[return-value]


def body_for(writer: int, seq: int) -> bytes:
    head = f"{writer}:{seq}:".encode()
    return head + bytes([(writer * 31 + seq) % 256]) * ((seq * 7919) % 20000)


def key_for(writer: int, seq: int) -> str:
    return f"K{writer}-{seq}"


def open_put(root: str, mode: str) -> callable[[MessageExtBrokerInner], PutMessageResult]:  # type: ignore[valid-type]
    if mode == "store":
        store = MessageStore(StoreConfig(store_path_root_dir=root, **STORE_CONFIG))  # type: ignore[arg-type]
        if not store.load():
            raise SystemExit("store failed to load")
        store.start()
        return lambda msg: store.put(MessagesPut.of(msg))
    commit_log = CommitLog(StoreConfig(store_path_root_dir=root, **CONFIG))  # type: ignore[arg-type]
    commit_log.load()
    commit_log.recover_normally()
    commit_log.start()
    return lambda msg: commit_log.put(MessagesPut.of(msg))


def main() -> None:
    root, round_id, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "commitlog"
    put = open_put(root, mode)
    out_lock = threading.Lock()

    def write(writer: int) -> None:
        seq = 0
        tag = round_id * 100 + writer
        while True:
            msg = MessageExtBrokerInner(topic="CrashTopic", queue_id=writer, body=body_for(tag, seq),
                                        properties={"KEYS": key_for(tag, seq)})
            result = put(msg)
            ar = result.append_result
            if result.status is PutMessageStatus.PUT_OK and ar is not None:
                with out_lock:
                    sys.stdout.write(f"{ar.wrote_offset} {ar.wrote_bytes} {tag} {seq} {ar.logics_offset}\n")
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
    for w in range(WRITERS):
        threading.Thread(target=write, args=(w,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
