"""Lake tier throughput, side by side with a single-process baseline, in one run.

    python bench/lake_bench.py [--messages N] [--write-md]

1. A CommitLog of N messages (1 KiB bodies, 64 MiB files) is written with lakemq.store.
2. compact: Spark local[2] reads the sealed segments through the ``commitlog`` data source,
   decodes them, writes Parquet and commits each range to the Delta table ``messages``.
3. baseline: one process, no Spark: the same vectorized decoder (lakemq.jobs.decode) and
   pyarrow writing the same partitioned Parquet. No Delta commit, so it is the floor.
4. key look-up over the lake with Spark SQL (lakemq.jobs.sql.lookup_key), median of 5 keys.

Figures are MB/s of CommitLog bytes in. The machine is shared by everything running on it.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a folder of scripts beside the package
    sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.markdown import replace_section  # noqa: E402
from lakemq.common.message import MessageConst, MessageExtBrokerInner  # noqa: E402
from lakemq.store.commit_log import CommitLog  # noqa: E402
from lakemq.store.config import StoreConfig  # noqa: E402

SECTION = "## Lake (bench/lake_bench.py)"
FILE_SIZE = 64 << 20
BODY = 1024


def write_commitlog(store_dir: Path, count: int) -> int:
    """``count`` messages through the real CommitLog; returns the bytes written."""
    config = StoreConfig(store_path_root_dir=str(store_dir), mapped_file_size_commit_log=FILE_SIZE)
    log = CommitLog(config, store_host="127.0.0.1:10911")
    log.load()
    log.start()
    body = b"b" * BODY
    try:
        for start in range(0, count, 64):
            batch = [
                MessageExtBrokerInner(
                    topic=f"Topic{i % 4}", body=body, queue_id=i % 8, born_timestamp=int(time.time() * 1000),
                    born_host="127.0.0.1:40000",
                    properties={MessageConst.KEYS: f"order-{i}", MessageConst.TAGS: f"tag{i % 3}",
                                MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"U{i:012d}"},
                )
                for i in range(start, min(start + 64, count))
            ]
            result = log.put_messages(batch)
            if not result.is_ok:
                raise RuntimeError(f"put failed: {result}")
        return log.get_max_offset()
    finally:
        log.shutdown()


def bench_compact(spark: object, store_dir: Path, lake: Path) -> tuple[float, int, int]:
    from lakemq.jobs.compact import compact

    began = time.perf_counter()
    result = compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="bench", seal_idle_ms=1)  # type: ignore[arg-type]
    return time.perf_counter() - began, result.bytes_in, result.rows


def bench_baseline(store_dir: Path, out: Path) -> tuple[float, int, int]:
    """The same decode and Parquet write in one process, file by file."""
    from lakemq.jobs.decode import decode_range
    from lakemq.tiering.seal import load_seals

    began = time.perf_counter()
    rows = bytes_in = 0
    for seal in load_seals(store_dir):
        with open(store_dir / "commitlog" / seal.file_name, "rb") as f:
            f.seek(seal.range_start - seal.file_start)
            data = f.read(seal.data_end - seal.range_start)
        batch, _ = decode_range(data, seal.range_start, skip_corrupt=False)
        pq.write_to_dataset(pa.Table.from_batches([batch]), str(out), partition_cols=["topic", "store_date"],
                            compression="zstd", basename_template=f"{seal.range_start}-{{i}}.parquet")
        rows += batch.num_rows
        bytes_in += len(data)
    return time.perf_counter() - began, bytes_in, rows


def bench_lookup(spark: object, lake: Path, count: int) -> list[float]:
    from lakemq.jobs.sql import lookup_key

    times = []
    for i in (1, count // 3, count // 2, 2 * count // 3, count - 1):
        began = time.perf_counter()
        rows = lookup_key(spark, str(lake), topic=f"Topic{i % 4}", key=f"order-{i}").collect()  # type: ignore[arg-type]
        times.append(time.perf_counter() - began)
        if len(rows) != 1:
            raise RuntimeError(f"key order-{i} found {len(rows)} times")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--write-md", action="store_true", help="write the results into BENCHMARKS.md")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from lakemq.jobs.session import build_session

    work = Path(tempfile.mkdtemp(prefix="lakemq-lake-bench-"))
    try:
        store = work / "store"
        print(f"writing {args.messages:,} messages ...", flush=True)
        total = write_commitlog(store, args.messages)
        spark = build_session(master="local[2]", app_name="lake-bench", ui_enabled=False,
                              conf={"spark.sql.shuffle.partitions": "2"})
        try:
            c_s, c_bytes, c_rows = bench_compact(spark, store, work / "lake")
            b_s, b_bytes, b_rows = bench_baseline(store, work / "baseline")
            lookups = bench_lookup(spark, work / "lake", args.messages)
        finally:
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if c_rows != args.messages or b_rows != args.messages:
        raise SystemExit(f"row counts differ: compact {c_rows}, baseline {b_rows}, written {args.messages}")
    c_mbs, b_mbs = c_bytes / c_s / 1e6, b_bytes / b_s / 1e6
    lookup_median = statistics.median(lookups)
    table = "\n".join([
        "| measure | lakemq | baseline | ratio (lakemq / baseline) | target |",
        "|---|---:|---:|---:|---|",
        f"| compaction, MB/s of CommitLog | {c_mbs:,.1f} ({c_s:.1f} s) | {b_mbs:,.1f} ({b_s:.1f} s) | "
        f"{c_mbs / b_mbs:.2f}x | >= 100 MB/s, within 1.5x of baseline |",
        f"| key look-up over {args.messages:,} messages, median of 5 | {lookup_median:.2f} s "
        f"(max {max(lookups):.2f} s) | | | <= 5 s |",
    ])
    print(table)
    print(f"CommitLog bytes: {total:,}")
    if args.write_md:
        command = f"python bench/lake_bench.py --messages {args.messages} --write-md"
        replace_section(
            f"{SECTION}\n\nMeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with:\n\n```\n{command}\n```\n\n"
            f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; "
            "other work shared the machine, so treat the figures as noisy.\n\n"
            f"Workload: {args.messages:,} messages with {BODY}-byte bodies, keys, tags and a unique key, in "
            f"{FILE_SIZE >> 20} MiB CommitLog files ({total / 1e6:,.0f} MB). lakemq = `compact` on Spark local[2] "
            "(commitlog data source, vectorized decode, Parquet written by the Spark tasks, one Delta commit per "
            "segment range through deltalake). Baseline = one process running the same decoder and "
            "`pyarrow.parquet.write_to_dataset`, with no Spark and no Delta commit.\n\n"
            f"{table}\n\n"
            "Replay rate (`lakemq replay`, which needs a running broker) is not measured by this script yet.\n"
        )


if __name__ == "__main__":
    main()
