"""The lake jobs on a Spark standalone cluster: a master and two workers started on loopback from
pyspark's own scripts (spark-class), `lakemq tier run` and `lakemq sql` with --master spark://...
give the same table and answers as local[*]."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from lake_helpers import WriteStore, mixed_messages

from lakemq.jobs.compact import compact
from lakemq.jobs.sql import run_sql
from lakemq.jobs.standalone import standalone_cluster
from tests.cluster import lakemq_command, tier_run_process

QUERY = "SELECT topic, kind, tags, count(*) AS n, sum(queue_offset) AS s FROM messages GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"


@pytest.fixture
def standalone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """spark://... of a master with two 1-core, 768 MiB workers, all on 127.0.0.1."""
    # Daemons that live a minute: the JIT and collector settings of the suite's drivers.
    monkeypatch.setenv("SPARK_DAEMON_JAVA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    with standalone_cluster(tmp_path, workers=2) as url:
        yield url


def _table_rows(uri: str) -> list[dict[str, Any]]:
    rows = pa.concat_tables([pq.read_table(f) for f in DeltaTable(uri).file_uris()]).to_pylist()
    return sorted(({k: v for k, v in r.items() if k != "properties"} for r in rows),
                  key=lambda r: r["commitlog_offset"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tier_run_and_sql_on_a_standalone_cluster_match_local(
    spark: Any, standalone: str, store_dir: Path, write_store: WriteStore, tmp_path: Path
) -> None:
    write_store(mixed_messages(400))
    local_lake, cluster_lake = tmp_path / "local-lake", tmp_path / "cluster-lake"
    compact(spark, store_dir=store_dir, lake_uri=str(local_lake), broker_name="broker-a", seal_idle_ms=0)
    # The suite's settings (tests/conftest.py) for the driver and the executors alike, with
    # executors that fit the small workers.
    defaults = tmp_path / "spark-defaults.conf"
    defaults.write_text(Path(os.environ["LAKEMQ_SPARK_DEFAULTS"]).read_text(encoding="utf-8")
                        + "spark.executor.memory 512m\nspark.driver.memory 1g\n"
                        "spark.executor.defaultJavaOptions -XX:TieredStopAtLevel=1 -XX:+UseSerialGC\n")
    env = dict(os.environ, COLUMNS="250", LAKEMQ_SPARK_DEFAULTS=str(defaults))
    tiered = tier_run_process(tmp_path, store_dir, cluster_lake, "broker-a", "--master", standalone, env=env)
    assert tiered.returncode == 0, tiered.stderr[-3000:]
    assert _table_rows(str(cluster_lake / "messages")) == _table_rows(str(local_lake / "messages"))

    answer = subprocess.run(lakemq_command("sql", "--lake", str(cluster_lake), "--master", standalone, QUERY),
                            env=dict(env, LAKEMQ_LOG_DIR=str(tmp_path / "sql-logs")),
                            capture_output=True, text=True, timeout=300, check=False)
    assert answer.returncode == 0, answer.stderr[-3000:]
    expected = [tuple("NULL" if v is None else str(v) for v in row)
                for row in run_sql(spark, str(local_lake), QUERY).collect()]
    assert _printed_rows(answer.stdout) == expected
    apps = {p.name for i in range(2) for p in (tmp_path / f"worker-{i}").iterdir()}
    assert len(apps) == 2, f"both jobs should have run executors on the workers: {apps}"


def _printed_rows(stdout: str) -> list[tuple[str, ...]]:
    """The body rows of the table `lakemq sql` printed (rich draws the header with ┃)."""
    return [tuple(c.strip() for c in line.strip().strip("│").split("│")) for line in stdout.splitlines()
            if line.count("│") >= 2]
