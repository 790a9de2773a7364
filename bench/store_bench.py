"""Store benchmark: put throughput (CommitLog alone and through the MessageStore with dispatch),
SYNC_FLUSH group commit with many writers, recovery scan speed, against a raw mmap copy of the
same bytes (the physical limit of this machine and of CPython).

    .venv/bin/python bench/store_bench.py [--messages N] [--write-md]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import mmap
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.markdown import replace_section
from lakemq.broker.loop_acks import LoopAcks
from lakemq.common.message import MessageExtBrokerInner, properties_to_string
from lakemq.common.record import encode_host, encode_record
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import FlushDiskType, StoreConfig
from lakemq.store.group_commit import GroupCommit
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageResult, PutMessageStatus

SECTION = "## Store (bench/store_bench.py)"
TARGETS = {"async": 300_000, "sync": 50_000, "recovery_mb_s": 500.0}
NOTES = """\
Reading the table:
- "raw mmap copy" copies the very same record bytes into a fresh preallocated mapped file
  (best of 3): one slice assignment per record is CPython's floor per message, one memcpy
  the memory floor. "CPU us/msg" is the CPU time of the putting thread alone
  (time.thread_time): on this shared VM wall time also measures the neighbours, CPU time
  is what the code costs.
- The per-record loops are compiled (Cython, lakemq/store/_records.pyx and _scan.pyx; docs/NATIVE.md):
  a batch is checked and measured in C, the body CRC (zlib's CRC-32, as RocketMQ) comes
  from ISA-L, and every record is packed straight into the mapped file with its final
  offsets and store time; a batch of 16 KiB or more is copied with the GIL released.
  What is left per batched message is the per-batch Python (lock, file, result) spread
  over the batch plus the copy with its page faults, which is the raw per-record row.
  One message per put adds the call layers and result objects around the same C.
- Dispatch (ConsumeQueue and IndexFile) parses up to 1024 records per step into columns in
  C, with the Java String.hashCode of every index key, builds each queue's run of 20-byte
  entries in C and writes the IndexFile entries and slots with the GIL released: under a
  microsecond of CPU per record. The "drained" rows wait until ConsumeQueue and IndexFile
  caught up, so they count put + dispatch.
- SYNC_FLUSH: the fdatasyncs are a commit thread's, in C (lakemq/store/_group_commit.pyx):
  every put publishes its end offset, and the thread flushes whatever was published, one
  fdatasync after another, without the GIL, so appends overlap the flush in progress
  (docs/SYNC_FLUSH.md). Each writer waits for that flush to end and then for its own, so
  the rate is about (puts per fdatasync) / (fdatasync time), with the fdatasyncs back to
  back. The "asyncio loop" row is the broker's way: the loop appends, watches the commit
  thread's eventfd (AckWatch) and acknowledges its own puts, with no other thread taking
  the GIL to hand them over. The "one thread hand-off per put" row is the same writers
  through a concurrent Future per put (completed by PutAcks' thread): one self-pipe write and loop
  wake-up per put. With 64 blocking writer threads every acknowledged put is an OS thread
  wake-up plus a GIL hand-off (the writers spend over 95% of their time parked).
- Under SYNC_FLUSH the CommitLog file being appended to is mapped MADV_RANDOM. On this
  kernel (Linux 6.18) readahead otherwise fills the page cache with 2 MiB folios, and a
  folio is written back whole: once ~20 MB of a file were written, each fdatasync of 64
  puts (70 KB) wrote 2.1 MB (4,236 sectors in /sys/block/vda/stat, 161 with MADV_RANDOM)
  and took 1.2-1.9 ms instead of 0.35-0.4. The cost: a page fault per 4 KiB page instead
  of per folio, about 1.6 us more CPU per 1 KiB put, so ASYNC_FLUSH keeps large folios.
- Recovery walks records with one unpack each and the ISA-L CRC.
- This VM is shared with other jobs: figures move by about +-30% between runs, more while
  neighbours run test suites (load average 5-12 during this work)."""


def make_messages(n: int, body_size: int, queues: int = 8) -> list[MessageExtBrokerInner]:
    """What the broker hands the store: properties already serialized from the wire."""
    body = os.urandom(body_size)
    msgs = []
    for i in range(n):
        props = {"TAGS": "TagA", "UNIQ_KEY": f"7F0000010001{i:020X}", "WAIT": "true"}
        msgs.append(MessageExtBrokerInner(
            topic="BenchTopic", body=body, queue_id=i % queues, properties=props,
            properties_string=properties_to_string(props), born_timestamp=1_700_000_000_000,
            born_host="127.0.0.1:50000"))
    return msgs


def config(root: Path, **kw: object) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), **kw)  # type: ignore[arg-type]


def open_commit_log(cfg: StoreConfig) -> CommitLog:
    cl = CommitLog(cfg)
    cl.load()
    cl.recover_normally()
    cl.start()
    return cl


def timed(fn: Callable[[], object]) -> float:
    return timed_cpu(fn)[0]


def timed_cpu(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the calling thread): on a shared machine the second
    says what the code costs, the first also what the neighbours cost."""
    start, cpu = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - start, time.thread_time() - cpu


def bench_raw_copy(root: Path, records: list[bytearray], file_size: int,
                   repeat: int = 3) -> tuple[float, float, float]:
    """Copy the same record bytes into a fresh preallocated mapped file: one slice assignment
    per record (CPython's floor per message) and one memcpy of everything (the memory floor).
    Best of ``repeat``: this is the limit, and page-fault costs on this VM vary run to run.
    Returns (per-record wall, bulk wall, per-record CPU)."""
    best = [float("inf")] * 3
    for _ in range(repeat):
        each, bulk, each_cpu = _raw_copy_once(root, records, file_size)
        best = [min(best[0], each), min(best[1], bulk), min(best[2], each_cpu)]
    return best[0], best[1], best[2]


def _raw_copy_once(root: Path, records: list[bytearray], file_size: int) -> tuple[float, float, float]:
    results: list[tuple[float, float]] = []
    for per_record in (True, False):
        path = root / ("raw_per_record" if per_record else "raw_bulk")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, file_size)
        os.posix_fallocate(fd, 0, file_size)
        mm = mmap.mmap(fd, file_size)
        copy = (functools.partial(_copy_each, mm, records) if per_record
                else functools.partial(_copy_bulk, mm, b"".join(records)))
        results.append(timed_cpu(copy))
        mm.close()
        os.close(fd)
        path.unlink()
    return results[0][0], results[1][0], results[0][1]


def _copy_each(mm: mmap.mmap, records: list[bytearray]) -> None:
    pos = 0
    for rec in records:
        end = pos + len(rec)
        mm[pos:end] = rec
        pos = end


def _copy_bulk(mm: mmap.mmap, blob: bytes) -> None:
    mm[: len(blob)] = blob


def requests(msgs: list[MessageExtBrokerInner], batch: int = 1) -> list[MessagesPut]:
    """The put requests, built before the clock starts (a caller such as the broker builds its
    request from the bytes it received), then frozen out of the garbage collector's sight with
    the messages: a broker does not hold its next 300,000 messages on its heap, and every
    collection in the timed loop walking them would time the bench's heap, not the store."""
    puts = [MessagesPut(tuple(msgs[i : i + batch])) for i in range(0, len(msgs), batch)]
    gc.collect()
    gc.freeze()
    return puts


def bench_commit_log_put(root: Path, msgs: list[MessageExtBrokerInner],
                         batch: int) -> tuple[float, float, CommitLog]:
    """Returns (wall, putting thread's CPU, the CommitLog)."""
    cl = open_commit_log(config(root))
    put, puts = cl.put, requests(msgs, batch)
    elapsed, cpu = timed_cpu(lambda: [put(r) for r in puts])
    return elapsed, cpu, cl


def bench_store_put(root: Path, msgs: list[MessageExtBrokerInner], batch: int = 1) -> tuple[float, float]:
    """Through the facade with ConsumeQueue and IndexFile dispatch running (one message per
    put, or batches of ``batch``); returns the put time and the time until dispatch has
    caught up."""
    store = MessageStore(config(root, max_hash_slot_num=500_000, max_index_num=2_000_000))
    store.load()
    store.start()
    put, puts = store.put, requests(msgs, batch)
    start = time.perf_counter()
    for r in puts:
        put(r)
    put_done = time.perf_counter()
    while store.dispatch_behind_bytes() > 0:
        time.sleep(0.001)
    drained = time.perf_counter()
    store.shutdown()
    return put_done - start, drained - start


def bench_threads(root: Path, msgs: list[MessageExtBrokerInner], threads: int,
                  flush: FlushDiskType) -> tuple[float, int, int]:
    """``threads`` writers putting concurrently; returns time, group-commit flushes, failures."""
    cl = open_commit_log(config(root, flush_disk_type=flush))
    per = len(msgs) // threads
    failures = [0]
    barrier = threading.Barrier(threads + 1)

    def writer(chunk: list[MessagesPut]) -> None:
        barrier.wait()
        for r in chunk:
            if cl.put(r).status is not PutMessageStatus.PUT_OK:
                failures[0] += 1

    workers = [threading.Thread(target=writer, args=(requests(msgs[i * per : (i + 1) * per]),))
               for i in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    service = cl.flush_service
    flushes = service.flush_count if isinstance(service, GroupCommit) else 0
    cl.shutdown()
    return elapsed, flushes, failures[0]


def _complete_futures(acks: list[tuple[Any, PutMessageStatus]]) -> None:
    """A sink completing one concurrent Future per put, on PutAcks' thread."""
    for future, status in acks:
        future.set_result(status)


def _put_with_future(cl: CommitLog, r: MessagesPut) -> Future[PutMessageStatus]:
    future: Future[PutMessageStatus] = Future()
    result: PutMessageResult = cl.put(r, _complete_futures, future)
    if not result.pending:
        future.set_result(result.status)
    return future


def bench_sync_async(root: Path, msgs: list[MessageExtBrokerInner]) -> tuple[float, int, int]:
    """SYNC_FLUSH from one thread with a concurrent Future per put, completed by PutAcks'
    thread: no thread parks per put. Timed until every put is acknowledged."""
    cl = open_commit_log(config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    puts = requests(msgs)
    start = time.perf_counter()
    futures = [_put_with_future(cl, r) for r in puts]
    failures = sum(f.result() is not PutMessageStatus.PUT_OK for f in futures)
    elapsed = time.perf_counter() - start
    service = cl.flush_service
    flushes = service.flush_count if isinstance(service, GroupCommit) else 0
    cl.shutdown()
    return elapsed, flushes, failures


def bench_sync_loop(root: Path, msgs: list[MessageExtBrokerInner], writers: int,
                    per_waiter: bool = False) -> tuple[float, int, int, float]:
    """SYNC_FLUSH acknowledged as the broker awaits it: ``writers`` coroutines on one asyncio loop, each
    appending a message and awaiting its acknowledgement before the next. The loop watches
    the commit thread's eventfd and acknowledges each commit's puts itself (LoopAcks). With
    ``per_waiter`` each put instead gets its own concurrent Future, completed by PutAcks'
    thread and wrapped for the loop (one thread hand-off per put). Returns (time, flushes,
    failures, CPU seconds of the loop thread)."""
    cl = open_commit_log(config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    per = len(msgs) // writers
    failures = [0]

    async def run() -> float:
        loop = asyncio.get_running_loop()
        acks = LoopAcks(loop, None if per_waiter else cl.open_ack_watch)
        put, ok = cl.put, PutMessageStatus.PUT_OK

        async def writer(chunk: list[MessagesPut]) -> None:
            for r in chunk:
                if per_waiter:
                    status = await asyncio.wrap_future(_put_with_future(cl, r))
                else:
                    future = acks.future()
                    result = put(r, acks, future)
                    status = await future if result.pending else result.status
                if status is not ok:
                    failures[0] += 1

        chunks = [requests(msgs[i * per : (i + 1) * per]) for i in range(writers)]
        cpu = time.thread_time()
        await asyncio.gather(*(writer(chunk) for chunk in chunks))
        cpu = time.thread_time() - cpu
        acks.close()
        return cpu

    start = time.perf_counter()
    cpu = asyncio.run(run())
    elapsed = time.perf_counter() - start
    service = cl.flush_service
    flushes = service.flush_count if isinstance(service, GroupCommit) else 0
    cl.shutdown()
    return elapsed, flushes, failures[0], cpu


def bench_recovery(root: Path, check_crc: bool) -> tuple[float, int]:
    cl = CommitLog(config(root, check_crc_on_recover=check_crc))
    cl.load()
    elapsed = timed(cl.recover_normally)
    size = cl.get_max_offset() - cl.get_min_offset()
    cl.mapped_file_queue.shutdown()
    return elapsed, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--sync-threads", type=int, default=64)
    ap.add_argument("--sync-messages", type=int, default=64_000)
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--write-md", action="store_true", help="write the results into BENCHMARKS.md")
    args = ap.parse_args()
    load_at_start = os.getloadavg()[0]

    root = Path(tempfile.mkdtemp(prefix="store_bench_", dir=args.dir))
    n = args.messages
    rows: list[tuple[str, str, str, str]] = []
    figures: dict[str, float] = {}
    try:
        msgs = make_messages(n, args.body_size)
        host = encode_host("127.0.0.1:10911")
        records = [encode_record(topic=m.topic.encode(), queue_id=m.queue_id, body=m.body, flag=0,
                                 properties=m.encoded_properties(), sys_flag=0, born_timestamp=m.born_timestamp,
                                 born_host=encode_host(m.born_host), store_host=host) for m in msgs]
        total_bytes = sum(len(r) for r in records)
        mb = total_bytes / 1e6

        raw_each, raw_bulk, raw_cpu = bench_raw_copy(root, records, StoreConfig().mapped_file_size_commit_log)
        rows.append(("raw mmap copy, one slice per record", f"{n / raw_each:,.0f}", f"{mb / raw_each:,.0f}",
                     f"limit; CPU {raw_cpu / n * 1e6:.2f} us/msg"))
        rows.append(("raw mmap copy, one memcpy", f"{n / raw_bulk:,.0f}", f"{mb / raw_bulk:,.0f}", "limit"))

        put_s, put_cpu, cl = bench_commit_log_put(root / "cl_single", msgs, 1)
        cl.shutdown()
        figures["async"], figures["async_ratio"] = n / put_s, put_s / raw_each
        figures["async_cpu_ratio"] = put_cpu / raw_cpu
        rows.append(("CommitLog.put, one message, async flush", f"{n / put_s:,.0f}", f"{mb / put_s:,.0f}",
                     f"{put_s / raw_each:.1f}x raw per-record; CPU {put_cpu / n * 1e6:.2f} us/msg"))

        batch_s, batch_cpu, cl = bench_commit_log_put(root / "cl_batch", msgs, args.batch)
        cl.shutdown()
        figures["batch"], figures["batch_ratio"] = n / batch_s, batch_s / raw_each
        figures["batch_cpu_ratio"] = batch_cpu / raw_cpu
        rows.append((f"CommitLog.put, batch {args.batch}, async", f"{n / batch_s:,.0f}",
                     f"{mb / batch_s:,.0f}",
                     f"{batch_s / raw_each:.1f}x raw per-record; CPU {batch_cpu / n * 1e6:.2f} us/msg"))

        for batch in (1, args.batch):
            store_put_s, store_drain_s = bench_store_put(root / f"store_{batch}", make_messages(n, args.body_size),
                                                         batch)
            how = "put, one message" if batch <= 1 else f"put, batch {batch},"
            figures["store" if batch <= 1 else "store_batch"] = n / store_drain_s
            rows.append((f"MessageStore.{how} + dispatch (put)", f"{n / store_put_s:,.0f}",
                         f"{mb / store_put_s:,.0f}", f"{store_put_s / raw_each:.1f}x raw per-record"))
            rows.append((f"MessageStore.{how} + dispatch (drained)", f"{n / store_drain_s:,.0f}",
                         f"{mb / store_drain_s:,.0f}", "CQ + IndexFile built"))

        sync_msgs = make_messages(args.sync_messages, args.body_size)
        async_s, _, failures = bench_threads(root / "async_threads", sync_msgs, args.sync_threads,
                                             FlushDiskType.ASYNC_FLUSH)
        sync_n = len(sync_msgs) // args.sync_threads * args.sync_threads
        rows.append((f"CommitLog ASYNC_FLUSH, {args.sync_threads} writer threads", f"{sync_n / async_s:,.0f}",
                     f"{sync_n * len(records[0]) / 1e6 / async_s:,.0f}", f"{failures} failed"))
        sync_s, flushes, failures = bench_threads(root / "sync", sync_msgs, args.sync_threads,
                                                  FlushDiskType.SYNC_FLUSH)
        figures["sync"] = sync_n / sync_s
        rows.append((f"CommitLog SYNC_FLUSH, {args.sync_threads} blocking writer threads",
                     f"{sync_n / sync_s:,.0f}", f"{sync_n * len(records[0]) / 1e6 / sync_s:,.0f}",
                     f"{flushes} fdatasyncs, {sync_n / max(flushes, 1):.0f} puts each, {failures} failed"))
        loop_s, loop_flushes, loop_failures, loop_cpu = bench_sync_loop(root / "sync_loop", sync_msgs,
                                                                        args.sync_threads)
        figures["sync_loop"] = sync_n / loop_s
        label = f"SYNC_FLUSH, {args.sync_threads} concurrent writers on one asyncio loop (acks as the broker)"
        rows.append((label, f"{figures['sync_loop']:,.0f}",
                     f"{sync_n * len(records[0]) / 1e6 / loop_s:,.0f}",
                     (f"{loop_flushes} fdatasyncs, {sync_n / max(loop_flushes, 1):.0f} puts each, "
                      f"{loop_failures} failed; loop CPU {loop_cpu / sync_n * 1e6:.1f} us/msg")))
        hop_s, hop_flushes, _, hop_cpu = bench_sync_loop(root / "sync_loop_hops", sync_msgs,
                                                         args.sync_threads, per_waiter=True)
        label = (f"same, {args.sync_threads} writers, one thread hand-off per put "
                 "(a concurrent Future per put + wrap_future)")
        rows.append((label, f"{sync_n / hop_s:,.0f}",
                     f"{sync_n * len(records[0]) / 1e6 / hop_s:,.0f}",
                     (f"{hop_flushes} fdatasyncs, {sync_n / max(hop_flushes, 1):.0f} puts each; "
                      f"loop CPU {hop_cpu / sync_n * 1e6:.1f} us/msg")))
        async_sync_s, async_flushes, async_failures = bench_sync_async(root / "sync_async", sync_msgs)
        figures["sync_async"] = len(sync_msgs) / async_sync_s
        rows.append(("CommitLog SYNC_FLUSH, a Future per put, 1 thread", f"{figures['sync_async']:,.0f}",
                     f"{len(sync_msgs) * len(records[0]) / 1e6 / async_sync_s:,.0f}",
                     (f"{async_flushes} fdatasyncs, {len(sync_msgs) / max(async_flushes, 1):.0f} puts each, "
                      f"{async_failures} failed")))

        for check_crc in (True, False):
            rec_s, size = bench_recovery(root / "cl_single", check_crc)
            figures["recovery_crc" if check_crc else "recovery"] = size / 1e6 / rec_s
            rows.append((f"recover_normally, CRC {'on' if check_crc else 'off'}", f"{n / rec_s:,.0f}",
                         f"{size / 1e6 / rec_s:,.0f}", f"{size / 1e6:,.0f} MB scanned"))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    header = ("case", "msg/s", "MB/s", "note")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in [header, *rows]]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    table = "\n".join(lines)
    verdicts = verdict_lines(figures)
    print(table)
    print("\n".join(verdicts))
    if args.write_md:
        write_md(table + "\n\n" + "\n".join(verdicts), args, load_at_start)


def verdict_lines(f: dict[str, float]) -> list[str]:
    """The issue's targets against what was measured."""
    def mark(ok: bool) -> str:
        return "met" if ok else "MISSED"

    best_async = max(f["async"], f["batch"])
    best_ratio = min(f["async_ratio"], f["batch_ratio"])
    best_cpu_ratio = min(f["async_cpu_ratio"], f["batch_cpu_ratio"])
    best_store = max(f["store"], f["store_batch"])
    async_line = (
        f"- async put >= {TARGETS['async']:,} msg/s: CommitLog alone {mark(best_async >= TARGETS['async'])} "
        f"({f['async']:,.0f} one by one, {f['batch']:,.0f} batched); with dispatch on (MessageStore, "
        f"until ConsumeQueue and IndexFile caught up) {mark(best_store >= TARGETS['async'])} "
        f"({f['store']:,.0f} one by one, {f['store_batch']:,.0f} batched)"
    )
    sync_line = (
        f"- sync put with group commit >= {TARGETS['sync']:,} msg/s, judged on 64 writers "
        f"awaiting their acknowledgements on one asyncio loop (as the broker's sends do): "
        f"{mark(f['sync_loop'] >= TARGETS['sync'])} ({f['sync_loop']:,.0f}); with 64 blocking writer threads "
        f"{mark(f['sync'] >= TARGETS['sync'])} ({f['sync']:,.0f})"
    )
    recovery_line = (
        f"- recovery >= {TARGETS['recovery_mb_s']:,.0f} MB/s: {mark(f['recovery_crc'] >= TARGETS['recovery_mb_s'])} "
        f"({f['recovery_crc']:,.0f} MB/s with CRC, {f['recovery']:,.0f} without)"
    )
    ratio_line = (
        f"- put path within 3x of the raw copy: {mark(best_ratio <= 3)} ({best_ratio:.1f}x at best in wall "
        f"time; {best_cpu_ratio:.1f}x in CPU time of the putting thread)"
    )
    return [async_line, sync_line, recovery_line, ratio_line]


def write_md(table: str, args: argparse.Namespace, load_at_start: float) -> None:
    command = "python bench/store_bench.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("write_md", "dir")) + " --write-md"
    body = (f"{SECTION}\n\nMeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
            f"{platform.machine()}, {os.cpu_count()} cores (1-minute load average {load_at_start:.2f} when the run "
            f"started), Python {platform.python_version()}, ext4 with 1 GiB CommitLog files. Command:\n\n    {command}\n\n"
            f"{table}\n\n{NOTES}\n")
    replace_section(body)


if __name__ == "__main__":
    main()
