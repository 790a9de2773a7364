"""Lake tier throughput beside a single-process baseline, and key look-ups over a large lake.

    python bench/lake_bench.py [--messages N] [--rounds R] [--lookup-messages M] [--sql]
                               [--cluster-workers 1,2] [--write-md]

1. A CommitLog of N messages (1 KiB bodies, 64 MiB files) is written with lakemq.store.
2. R rounds, interleaved so every side sees the same machine load:
   - compact (the writer lakemq uses): seal, then Spark local[2] tasks read the sealed byte
     ranges, decode them, write Parquet and the driver commits each range to the Delta table
     ``messages`` through delta-rs (a fresh lake and fresh seals every round);
   - Spark's Delta writer, the alternative: seal, the same tasks decode the same byte ranges
     but hand the rows to the JVM (``mapInArrow``), and ``df.write.format("delta")`` writes
     and commits them with Delta's idempotent-write options (txnAppId = broker, txnVersion =
     the last range end: one commit per run, no digest check before it);
   - baseline: one process, no Spark: the same vectorized decoder (lakemq.jobs.decode) and
     pyarrow writing the same partitioned Parquet with the same writer options. No sealing,
     no digests, no Delta commit, so it is the floor.
3. Key look-ups with ``lakemq.jobs.message_lookup.find_messages`` (what ``lakemq admin message
   query --lake`` runs): 5 keys and 5 unique keys over the N-message lake, or, with
   ``--lookup-messages M``, over a lake of M small messages: CommitLog files written with the
   store's record encoder (lakemq.common.record.encode_record, 16-byte bodies), sealed and
   compacted by ``compact`` like any other (that compaction is reported too), deleted after.

4. With ``--sql``, Spark SQL over the look-up lake: a full-scan aggregate (count by topic and
   tag), a unique-key look-up and a time-range query (1% of the time span), each through
   ``format("delta")`` and Delta's catalog (``lakemq sql``'s path), through the ``lakedelta``
   Python data source lakemq used before (loaded from git at OLD_COMMIT), and through one
   process of pyarrow over the same Parquet files (``DeltaTable.to_pyarrow_dataset``), the
   single-process baseline. Median of 3 after a warm-up; the answers must agree. Then the
   lake is maintained as every ``lakemq tier run`` and the tiering DAG end (lakemq.jobs.maintain:
   deltalake's optimize into files of ``tierTargetFileSize``, vacuum, checkpoint) and the
   queries run again through Delta and pyarrow: the lake its users query.
5. With ``--cluster-workers 1,2``, the compaction again on a Spark standalone cluster on this
   machine (lakemq.jobs.standalone: a master and that many 1-core workers), per worker count.

Figures are MB/s of CommitLog bytes in, and CPU seconds per MB of every process involved
(driver, JVM, Python workers; not the standalone cluster's daemons). The machine is shared by
everything running on it: for an idle re-run see BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a folder of scripts beside the package
    sys.path.insert(0, str(ROOT))

import pyarrow as pa
import pyarrow.parquet as pq

from bench.markdown import replace_section
from lakemq.common.message import MessageConst, MessageExtBrokerInner
from lakemq.common.record import BLANK_MAGIC_CODE, encode_host, encode_record
from lakemq.store.commit_log import CommitLog
from lakemq.store.config import StoreConfig
from lakemq.store.put_request import MessagesPut

SECTION = "## Lake (bench/lake_bench.py)"
OLD_COMMIT = "678cc00"  # the last commit with the lakedelta source and the VERSION AS OF rewrite
FILE_SIZE = 64 << 20
BODY = 1024
SMALL_BODY = 16
TOPICS = 4


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
                    topic=f"Topic{i % TOPICS}", body=body, queue_id=i % 8, born_timestamp=int(time.time() * 1000),
                    born_host="127.0.0.1:40000",
                    properties={MessageConst.KEYS: f"order-{i}", MessageConst.TAGS: f"tag{i % 3}",
                                MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq_key(i)},
                )
                for i in range(start, min(start + 64, count))
            ]
            result = log.put(MessagesPut.of(*batch))
            if not result.is_ok:
                raise RuntimeError(f"put failed: {result}")
        return log.get_max_offset()
    finally:
        log.shutdown()


def uniq_key(i: int) -> str:
    """A unique key shaped like a producer's (host, pid, then a growing counter): 32 hex digits."""
    return f"7F0000010F2A4C3E{i:016X}"


def write_small_commitlog(store_dir: Path, count: int, progress: bool = True) -> int:
    """``count`` small messages as 64 MiB CommitLog files, encoded record by record with the
    store's encoder (the layout a broker writes: full files end in a blank record)."""
    directory = store_dir / "commitlog"
    directory.mkdir(parents=True, exist_ok=True)
    store_host, born_host = encode_host("127.0.0.1:10911"), encode_host("127.0.0.1:40000")
    topics = [f"Topic{t}".encode() for t in range(TOPICS)]
    queue_offsets = [0] * (TOPICS * 8)
    first_ms = int(time.time() * 1000) - count // 100
    file_start, buf = 0, bytearray()

    def flush(full: bool) -> None:
        if full:
            buf.extend(struct.pack(">iI", FILE_SIZE - len(buf), BLANK_MAGIC_CODE))
            buf.extend(bytes(FILE_SIZE - len(buf)))
        (directory / f"{file_start:020d}").write_bytes(buf)

    for i in range(count):
        t, q = i % TOPICS, i % 8
        ts = first_ms + i // 100
        props = f"KEYS\x01order-{i}\x02TAGS\x01tag{i % 3}\x02UNIQ_KEY\x01{uniq_key(i)}\x02".encode()
        body = f"m{i:015d}".encode()
        while True:
            record = encode_record(
                topic=topics[t], queue_id=q, body=body, flag=0, properties=props, sys_flag=0, born_timestamp=ts,
                born_host=born_host, store_host=store_host, queue_offset=queue_offsets[t * 8 + q],
                physical_offset=file_start + len(buf), store_timestamp=ts,
            )
            if len(buf) + len(record) + 8 <= FILE_SIZE:  # room left for the blank record
                break
            flush(full=True)
            file_start += FILE_SIZE
            buf = bytearray()
        buf += record
        queue_offsets[t * 8 + q] += 1
        if progress and i and i % 1_000_000 == 0:
            print(f"  {i:,} messages encoded", flush=True)
    flush(full=False)
    old = time.time() - 3600  # idle, so sealing takes the last file too
    for f in directory.iterdir():
        os.utime(f, (old, old))
    return file_start + len(buf)


def _tree_cpu() -> float:
    """CPU seconds (user + system) of this process and every live descendant: the Spark JVM and
    its Python workers. Linux /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total, stack = 0, [os.getpid()]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    stack += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / tick


@dataclass(frozen=True)
class CompactRun:
    seal_s: float
    seconds: float  # seal + compact
    bytes_in: int
    rows: int
    cpu_s: float  # every process involved


def bench_compact(spark: Any, store_dir: Path, lake: Path) -> CompactRun:
    """Seal (timed on its own), then compact (which finds everything sealed)."""
    from lakemq.jobs.compact import compact
    from lakemq.tiering.seal import seal_segments

    cpu, began = _tree_cpu(), time.perf_counter()
    seal_segments(store_dir, idle_ms=1)
    sealed = time.perf_counter()
    result = compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="bench", seal_idle_ms=1)
    done = time.perf_counter()
    return CompactRun(sealed - began, done - began, result.bytes_in, result.rows, _tree_cpu() - cpu)


@dataclass(frozen=True)
class _Decoder:
    """``mapInArrow``: task numbers in, decoded rows out (what Spark's Delta writer gets)."""

    store: Any
    tasks: tuple[Any, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lakemq.jobs.decode import decode_range
        from lakemq.tiering.tables import SPARK_ARROW_SCHEMA

        for batch in batches:
            for task_id in batch.column(0).to_pylist():
                for piece in self.tasks[task_id].pieces:
                    data = self.store.read_range(piece.file_uri, piece.start - piece.file_start,
                                                 piece.end - piece.file_start)
                    rows, _ = decode_range(data, piece.start, skip_corrupt=False, check_crc=False, grouped=True)
                    yield rows.select(SPARK_ARROW_SCHEMA.names).cast(SPARK_ARROW_SCHEMA)


def bench_spark_writer(spark: Any, store_dir: Path, lake: Path) -> CompactRun:
    """Seal, then the same decode in Spark tasks, written and committed by Spark's Delta writer."""
    from deltalake import DeltaTable

    from lakemq.jobs.lake_writer import plan_tasks
    from lakemq.tiering.lake_fs import LakeLocation
    from lakemq.tiering.seal import seal_segments
    from lakemq.tiering.tables import SPARK_DDL

    cpu, began = _tree_cpu(), time.perf_counter()
    seals = [s for s in seal_segments(store_dir, idle_ms=1) if s.byte_ranges()]
    sealed = time.perf_counter()
    store = LakeLocation.of(str(store_dir.resolve()))
    tasks = plan_tasks(store, seals, parallelism=spark.sparkContext.defaultParallelism)
    rows = spark.range(len(tasks), numPartitions=len(tasks)).mapInArrow(_Decoder(store, tuple(tasks)), SPARK_DDL)
    (rows.write.format("delta").mode("append").partitionBy("topic", "store_date")
     .option("txnAppId", "bench").option("txnVersion", seals[-1].range_end).option("compression", "zstd")
     .save(str(lake / "messages")))
    done = time.perf_counter()
    written = sum(int(n) for n in pa.table(DeltaTable(str(lake / "messages")).get_add_actions(flatten=True))
                  .column("num_records").to_pylist())
    return CompactRun(sealed - began, done - began, sum(s.range_end - s.range_start for s in seals), written,
                      _tree_cpu() - cpu)


DELTA_ENGINE = "Spark + Delta (format delta)"
PYARROW_ENGINE = "pyarrow, one process (baseline)"
SQL_QUERIES = {
    "full scan: count by topic and tag": "SELECT topic, tags, count(*) AS n FROM {t} GROUP BY topic, tags",
    "unique-key look-up": "SELECT msg_id, queue_offset FROM {t} WHERE topic = '{topic}' AND uniq_key = '{key}'",
    "time range (1% of the span)": ("SELECT count(*) AS n, sum(length(body)) AS bytes FROM {t} "
                                    "WHERE store_timestamp BETWEEN {begin} AND {end}"),
}


def _old_lakedelta(spark: Any, work: Path) -> bool:
    """Register the lakedelta source as it was at OLD_COMMIT; False when git cannot show it."""
    import importlib.util

    from pyspark import cloudpickle

    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{OLD_COMMIT}:lakemq/jobs/delta_source.py"],
                           capture_output=True, text=True, check=False)
    if shown.returncode != 0:
        print(f"old lakedelta path skipped: {shown.stderr.strip()}", flush=True)
        return False
    path = work / "lakedelta_old.py"
    path.write_text(shown.stdout)
    spec = importlib.util.spec_from_file_location("lakedelta_old", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lakedelta_old"] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)  # Python workers cannot import it
    spark.dataSource.register(module.DeltaDataSource)
    # Its reader pushes filters down, which the project's spark-defaults enabled then (f11ed0b).
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    return True


def _pyarrow_query(dataset: Any, name: str, args: dict[str, Any]) -> list[tuple[Any, ...]]:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    if name.startswith("full scan"):
        table = dataset.to_table(columns=["topic", "tags"]).group_by(["topic", "tags"]).aggregate([([], "count_all")])
        return sorted(tuple(r.values()) for r in table.to_pylist())
    if name.startswith("unique-key"):
        table = dataset.to_table(columns=["msg_id", "queue_offset"],
                                 filter=(ds.field("topic") == args["topic"]) & (ds.field("uniq_key") == args["key"]))
        return sorted(tuple(r.values()) for r in table.to_pylist())
    table = dataset.to_table(columns=["body"], filter=(ds.field("store_timestamp") >= args["begin"])
                             & (ds.field("store_timestamp") <= args["end"]))
    return [(table.num_rows, pc.sum(pc.binary_length(table.column("body"))).as_py())]


def bench_sql(spark: Any, lake: Path, count: int, work: Path, *,
              old: bool = True) -> dict[str, dict[str, list[float]]]:
    """Seconds per query and engine (3 runs after a warm-up); answers must agree. ``old``: the
    lakedelta source too."""
    from deltalake import DeltaTable

    from lakemq.jobs.sql import register_tables

    uri = str(lake / "messages")
    register_tables(spark, str(lake))
    stamps = spark.sql("SELECT min(store_timestamp) AS lo, max(store_timestamp) AS hi FROM messages").collect()[0]
    span = stamps["hi"] - stamps["lo"]
    i = count // 2
    args = {"topic": f"Topic{i % TOPICS}", "key": uniq_key(i), "begin": stamps["lo"] + span // 2,
            "end": stamps["lo"] + span // 2 + span // 100}
    engines: dict[str, Any] = {DELTA_ENGINE: lambda q: spark.sql(q.format(t="messages", **args))}
    if old and _old_lakedelta(spark, work):
        spark.read.format("lakedelta").option("path", uri).load().createOrReplaceTempView("old_messages")
        engines["lakedelta source (before)"] = lambda q: spark.sql(q.format(t="old_messages", **args))
    dataset = DeltaTable(uri).to_pyarrow_dataset()
    times: dict[str, dict[str, list[float]]] = {}
    for name, query in SQL_QUERIES.items():
        answers = {}
        for engine, run in [*engines.items(), (PYARROW_ENGINE, None)]:
            took = []
            for attempt in range(4):
                began = time.perf_counter()
                if run is None:
                    answer = _pyarrow_query(dataset, name, args)
                else:
                    answer = sorted(tuple(r) for r in run(query).collect())
                if attempt:
                    took.append(time.perf_counter() - began)
            answers[engine] = answer
            times.setdefault(name, {})[engine] = took
            print(f"{name} via {engine}: {statistics.median(took):.2f} s", flush=True)
        if len({repr(a) for a in answers.values()}) != 1:
            raise RuntimeError(f"{name}: the engines disagree: {answers}")
    return times


@dataclass(frozen=True)
class Upkeep:
    seconds: float
    files_before: int
    files_after: int


def _data_files(uri: str) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(uri).get_add_actions(flatten=True).num_rows)


def bench_maintain(lake: Path) -> Upkeep:
    """The upkeep every ``lakemq tier run`` ends with, at its default settings."""
    from lakemq.jobs.maintain import maintain
    from lakemq.tiering.config import TieringConfig

    config = TieringConfig()
    before = _data_files(str(lake / "messages"))
    began = time.perf_counter()
    maintain(str(lake), target_size=config.tier_target_file_size,
             vacuum_retention_hours=config.tier_vacuum_retention_hours)
    return Upkeep(time.perf_counter() - began, before, _data_files(str(lake / "messages")))


def bench_cluster(store: Path, work: Path, workers: int) -> CompactRun:
    """The compaction on a standalone cluster of ``workers`` 1-core workers (second of two runs)."""
    from lakemq.jobs.session import build_session
    from lakemq.jobs.standalone import standalone_cluster

    with standalone_cluster(work / f"cluster-{workers}", workers=workers, memory="1g") as url:
        spark = build_session(master=url, app_name="lake-bench-cluster", ui_enabled=False,
                              conf={"spark.executor.memory": "768m", "spark.sql.shuffle.partitions": "2"})
        try:
            runs = []
            for _ in range(2):  # the first one starts the executors' Python workers
                _reset(store, work / "lake")
                runs.append(bench_compact(spark, store, work / "lake"))
            return runs[-1]
        finally:
            spark.stop()


def bench_baseline(store_dir: Path, out: Path) -> tuple[float, int, int, float]:
    """The same decode and Parquet write in one process, file by file."""
    from lakemq.jobs.decode import decode_range
    from lakemq.jobs.lake_writer import PARQUET_OPTIONS
    from lakemq.tiering.seal import load_seals

    began, cpu = time.perf_counter(), time.process_time()
    rows = bytes_in = 0
    for seal in load_seals(store_dir):
        with open(store_dir / "commitlog" / seal.file_name, "rb") as f:
            f.seek(seal.range_start - seal.file_start)
            data = f.read(seal.data_end - seal.range_start)
        # As compaction: CRCs were checked when the segment was sealed.
        batch, _ = decode_range(data, seal.range_start, skip_corrupt=False, check_crc=False)
        pq.write_to_dataset(pa.Table.from_batches([batch]), str(out), partition_cols=["topic", "store_date"],
                            basename_template=f"{seal.range_start}-{{i}}.parquet", **PARQUET_OPTIONS)
        rows += batch.num_rows
        bytes_in += len(data)
    return time.perf_counter() - began, bytes_in, rows, time.process_time() - cpu


def bench_lookups(spark: Any, lake: Path, count: int) -> dict[str, list[float]]:
    from lakemq.jobs.message_lookup import find_messages

    times: dict[str, list[float]] = {"key": [], "unique key": []}
    find_messages(spark, str(lake), topic="Topic0", key="order-0")  # Python workers started once
    for i in (1, count // 3, count // 2, 2 * count // 3, count - 1):
        for kind, key, unique in (("key", f"order-{i}", None), ("unique key", None, uniq_key(i))):
            began = time.perf_counter()
            found = find_messages(spark, str(lake), topic=f"Topic{i % TOPICS}", key=key, unique_key=unique)
            times[kind].append(time.perf_counter() - began)
            if [m.uniq_key for m in found] != [uniq_key(i)]:
                raise RuntimeError(f"{kind} of message {i} found {len(found)} messages")
    return times


def _lookup_rows(times: dict[str, list[float]], count: int) -> list[str]:
    return [
        f"| look-up by {kind} over {count:,} messages, median of 5 | {statistics.median(t):.2f} s "
        f"(max {max(t):.2f} s) | | | < 1 s |"
        for kind, t in times.items()
    ]


def _reset(store: Path, *dirs: Path) -> None:
    shutil.rmtree(store / "tiering", ignore_errors=True)  # seals: every round seals again
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def _table(args: argparse.Namespace, compacts: list[CompactRun], writers: list[CompactRun],
           baselines: list[tuple[float, int, int, float]], small: CompactRun | None, small_bytes: int,
           lookups: dict[str, list[float]], lookup_count: int, sql: dict[str, dict[str, list[float]]],
           cluster: dict[int, CompactRun], sql_maintained: dict[str, dict[str, list[float]]],
           upkeep: Upkeep | None) -> str:
    """Round 1 is the first Spark job of a fresh session (what a one-shot ``tier run`` pays);
    the later rounds run on a warm session."""
    c_mbs = [c.bytes_in / c.seconds / 1e6 for c in compacts]
    b_mbs = [b[1] / b[0] / 1e6 for b in baselines]
    ratios = [c / b for c, b in zip(c_mbs, b_mbs)]
    warm = slice(1, None) if len(compacts) > 1 else slice(None)
    w = len(c_mbs[warm])
    med = statistics.median
    rows = [
        "| measure | lakemq | baseline | ratio (lakemq / baseline) | target |",
        "|---|---:|---:|---:|---|",
        (f"| compaction, MB/s of CommitLog, warm session, median of {w} | {med(c_mbs[warm]):,.1f} "
         f"({med(c.seconds for c in compacts[warm]):.2f} s, of which sealing "
         f"{med(c.seal_s for c in compacts[warm]):.2f} s) | {med(b_mbs[warm]):,.1f} "
         f"({med(b[0] for b in baselines[warm]):.2f} s) | {med(ratios[warm]):.2f}x | "
         ">= 100 MB/s, within 1.5x of baseline |"),
        (f"| compaction, CPU seconds (lakemq: driver, JVM and Python workers), median of {w} | "
         f"{med(c.cpu_s for c in compacts[warm]):.2f} s | {med(b[3] for b in baselines[warm]):.2f} s | "
         f"{med(c.cpu_s / b[3] for c, b in zip(compacts[warm], baselines[warm])):.2f}x | |"),
        (f"| compaction, each round, MB/s (round 1 = first Spark job of the session) | "
         f"{', '.join(f'{v:,.0f}' for v in c_mbs)} | {', '.join(f'{v:,.0f}' for v in b_mbs)} | "
         f"{', '.join(f'{v:.2f}x' for v in ratios)} | |"),
        (f"| compaction, CPU seconds per MB, median of {w} | {med(c.cpu_s / c.bytes_in * 1e6 for c in compacts[warm]):.4f}"
         f" | {med(b[3] / b[1] * 1e6 for b in baselines[warm]):.4f} | | |"),
    ]
    if writers:
        s_mbs = [c.bytes_in / c.seconds / 1e6 for c in writers]
        rows += [
            (f"| the other writer: Spark's Delta writer (txnAppId/txnVersion), MB/s, warm, median of {w} | "
             f"{med(s_mbs[warm]):,.1f} (each round: {', '.join(f'{v:,.0f}' for v in s_mbs)}) | "
             f"{med(b_mbs[warm]):,.1f} | {med(x / y for x, y in zip(s_mbs[warm], b_mbs[warm])):.2f}x | |"),
            (f"| the other writer: CPU seconds per MB, median of {w} | "
             f"{med(c.cpu_s / c.bytes_in * 1e6 for c in writers[warm]):.4f} | | | |"),
        ]
    if small is not None:
        rows.append(
            f"| compaction of the {args.lookup_messages:,} small messages ({small_bytes / 1e6:,.0f} MB), warm | "
            f"{small.bytes_in / small.seconds / 1e6:,.1f} MB/s, {small.rows / small.seconds:,.0f} msg/s "
            f"({small.seconds:.1f} s, of which sealing {small.seal_s:.1f} s) | | | |")
    rows += _lookup_rows(lookups, lookup_count)
    for workers, run in sorted(cluster.items()):
        rows.append(f"| compaction on a standalone cluster, {workers} worker(s) of 1 core, warm | "
                    f"{run.bytes_in / run.seconds / 1e6:,.1f} MB/s ({run.seconds:.2f} s, CPU {run.cpu_s:.2f} s "
                    "outside the cluster) | | | |")
    sections = [] if upkeep is None else [(f"as `compact` left it ({upkeep.files_before} data files)", sql),
                                          (f"after `maintain` ({upkeep.files_after} data files)", sql_maintained)]
    for title, times in sections:
        engines = list(next(iter(times.values())))
        rows += ["", (f"| SQL over {lookup_count:,} messages, {title}, seconds (median of 3) | "
                      f"{' | '.join(engines)} | Delta / pyarrow |"),
                 "|---|" + "---:|" * (len(engines) + 1)]
        rows += [f"| {name} | {' | '.join(f'{med(t[e]):.2f}' for e in engines)} | "
                 f"{med(t[DELTA_ENGINE]) / med(t[PYARROW_ENGINE]):.1f}x |" for name, t in times.items()]
    if upkeep is not None:
        rows += ["", f"`maintain` (optimize to {upkeep.files_after} files, vacuum, checkpoint): {upkeep.seconds:.1f} s."]
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=4,
                    help="interleaved compact/baseline rounds; the first one starts Spark's workers")
    ap.add_argument("--lookup-messages", type=int, default=0,
                    help="build a lake of this many small messages for the look-ups (0: use the --messages lake)")
    ap.add_argument("--sql", action="store_true", help="time SQL over the look-up lake: Delta, lakedelta, pyarrow")
    ap.add_argument("--cluster-workers", default="",
                    help="comma-separated worker counts: the compaction on a standalone cluster of each size")
    ap.add_argument("--no-spark-writer", action="store_true", help="skip Spark's Delta writer rounds")
    ap.add_argument("--write-md", action="store_true", help="write the results into BENCHMARKS.md")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from lakemq.jobs.session import build_session

    work = Path(tempfile.mkdtemp(prefix="lakemq-lake-bench-"))
    compacts: list[CompactRun] = []
    writers: list[CompactRun] = []
    sql: dict[str, dict[str, list[float]]] = {}
    sql_maintained: dict[str, dict[str, list[float]]] = {}
    upkeep: Upkeep | None = None
    cluster: dict[int, CompactRun] = {}
    baselines: list[tuple[float, int, int, float]] = []
    loads: list[float] = []
    small: CompactRun | None = None
    small_bytes = 0
    try:
        store = work / "store"
        print(f"writing {args.messages:,} messages ...", flush=True)
        total = write_commitlog(store, args.messages)
        spark = build_session(master="local[2]", app_name="lake-bench", ui_enabled=False,
                              conf={"spark.sql.shuffle.partitions": "2"})
        try:
            for r in range(args.rounds):
                _reset(store, work / "lake", work / "baseline", work / "lake-spark")
                loads.append(os.getloadavg()[0])
                compacts.append(bench_compact(spark, store, work / "lake"))
                if not args.no_spark_writer:
                    _reset(store)
                    writers.append(bench_spark_writer(spark, store, work / "lake-spark"))
                baselines.append(bench_baseline(store, work / "baseline"))
                print(f"round {r + 1}: compact {compacts[-1].seconds:.2f} s (seal {compacts[-1].seal_s:.2f} s, "
                      f"cpu {compacts[-1].cpu_s:.2f} s), "
                      + (f"Spark writer {writers[-1].seconds:.2f} s (cpu {writers[-1].cpu_s:.2f} s), "
                         if writers else "")
                      + f"baseline {baselines[-1][0]:.2f} s (cpu {baselines[-1][3]:.2f} s), load {loads[-1]:.1f}",
                      flush=True)
            if args.cluster_workers:
                spark.stop()
                for n in (int(x) for x in args.cluster_workers.split(",")):
                    cluster[n] = bench_cluster(store, work, n)
                    print(f"standalone cluster, {n} worker(s): {cluster[n].seconds:.2f} s", flush=True)
                spark = build_session(master="local[2]", app_name="lake-bench", ui_enabled=False,
                                      conf={"spark.sql.shuffle.partitions": "2"})
            if args.lookup_messages:
                shutil.rmtree(work / "baseline", ignore_errors=True)
                shutil.rmtree(store, ignore_errors=True)
                big = work / "small-store"
                print(f"encoding {args.lookup_messages:,} small messages ...", flush=True)
                small_bytes = write_small_commitlog(big, args.lookup_messages)
                shutil.rmtree(work / "lake", ignore_errors=True)
                small = bench_compact(spark, big, work / "lake")
                print(f"compacted {small.rows:,} messages in {small.seconds:.1f} s", flush=True)
                shutil.rmtree(big, ignore_errors=True)
                lookups = bench_lookups(spark, work / "lake", args.lookup_messages)
                lookup_count = args.lookup_messages
            else:
                _reset(store, work / "lake")
                bench_compact(spark, store, work / "lake")  # the lake of the rounds above, whatever ran last
                lookups = bench_lookups(spark, work / "lake", args.messages)
                lookup_count = args.messages
            if args.sql:
                sql = bench_sql(spark, work / "lake", lookup_count, work)
                upkeep = bench_maintain(work / "lake")
                print(f"maintain: {upkeep.files_before} -> {upkeep.files_after} files in {upkeep.seconds:.1f} s",
                      flush=True)
                sql_maintained = bench_sql(spark, work / "lake", lookup_count, work, old=False)
        finally:
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for c, b in zip(compacts, baselines):
        if c.rows != args.messages or b[2] != args.messages:
            raise SystemExit(f"row counts differ: compact {c.rows}, baseline {b[2]}, written {args.messages}")
    for c in [*writers, *cluster.values()]:
        if c.rows != args.messages:
            raise SystemExit(f"row counts differ: {c.rows} written, {args.messages} in the CommitLog")
    if small is not None and small.rows != args.lookup_messages:
        raise SystemExit(f"small-message lake holds {small.rows} rows, not {args.lookup_messages}")
    table = _table(args, compacts, writers, baselines, small, small_bytes, lookups, lookup_count, sql, cluster,
                   sql_maintained, upkeep)
    print(table)
    print(f"CommitLog bytes: {total:,}; 1-minute load average at each round: {', '.join(f'{v:.1f}' for v in loads)}")
    if args.write_md:
        command = f"python bench/lake_bench.py --messages {args.messages} --rounds {args.rounds}"
        if args.lookup_messages:
            command += f" --lookup-messages {args.lookup_messages}"
        if args.sql:
            command += " --sql"
        if args.cluster_workers:
            command += f" --cluster-workers {args.cluster_workers}"
        lookup_text = (
            f"Look-ups: a second lake of {args.lookup_messages:,} messages ({SMALL_BODY}-byte bodies, a key "
            "`order-<n>`, a tag and a unique key each, 4 topics), its CommitLog files encoded with the store's "
            "record encoder and then sealed and compacted by `compact` (the small-message compaction row)."
            if small is not None else f"Look-ups over the {args.messages:,}-message lake above."
        )
        replace_section(
            f"{SECTION}\n\nMeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with:\n\n```\n{command} "
            f"--write-md\n```\n\n"
            f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; "
            f"1-minute load average {', '.join(f'{v:.1f}' for v in loads)} at the start of each round (other work "
            "shared the machine), so treat the figures as noisy.\n\n"
            f"Workload: {args.messages:,} messages with {BODY}-byte bodies, keys, tags and a unique key, in "
            f"{FILE_SIZE >> 20} MiB CommitLog files ({total / 1e6:,.0f} MB). lakemq = `compact` on Spark local[2]: "
            "sealing (CRC check and digest of every record), Spark tasks that read byte ranges of the store, "
            "decode and write Parquet into the table, and one Delta commit per segment range through deltalake. "
            "Baseline = one process running the same decoder and `pyarrow.parquet.write_to_dataset` with the same "
            "Parquet options, with no sealing, no Spark and no Delta commit. Rounds alternate compact and baseline."
            f" {lookup_text} Each look-up runs `find_messages` on the same Spark session, after one warm-up."
            + (" SQL: each query through each engine once to warm up, then the median of 3; first over the lake as "
               "`compact` left it, then again after `maintain` (optimize, vacuum, checkpoint at `lakemq tier run`'s "
               "defaults), which every tier run and the tiering DAG end with." if sql else "")
            + "\n\n"
            f"{table}\n"
        )


if __name__ == "__main__":
    main()
