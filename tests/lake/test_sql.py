"""Spark SQL over the lake through Delta's catalog: the tables and views, time travel (option,
VERSION AS OF, TIMESTAMP AS OF), Delta's own commands, and `lakemq sql` as a user runs it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from lake_helpers import WriteStore, user_messages

from lakemq.jobs.compact import compact
from lakemq.jobs.sql import run_sql
from tests.cluster import lakemq_command


def test_tables_views_and_time_travel(spark: Any, store_dir: Path, write_store: WriteStore,
                                          tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write_store(user_messages(200))
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)
    from deltalake import DeltaTable

    after_first = DeltaTable(str(lake / "messages")).version()
    write_store(user_messages(100, topic="TopicB"))
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)

    def count(query: str, **kw: Any) -> int:
        return int(run_sql(spark, str(lake), query, **kw).collect()[0][0])

    assert count("SELECT count(*) FROM messages") == 300
    assert count("SELECT count(*) FROM messages WHERE topic = 'TopicB'") == 100
    assert count("SELECT count(*) FROM messages", version=after_first) == 200
    assert count(f"SELECT count(*) FROM messages VERSION AS OF {after_first}") == 200
    assert count("SELECT count(*) FROM user_messages") == 300
    # Delta's own SQL on the registered table, as a Spark user types it.
    history = run_sql(spark, str(lake), "DESCRIBE HISTORY messages").collect()
    latest = DeltaTable(str(lake / "messages")).version()
    assert latest > after_first and [h["version"] for h in history] == list(range(latest, -1, -1))
    first_commit = [h for h in history if h["version"] == after_first][0]["timestamp"]
    assert count(f"SELECT count(*) FROM messages TIMESTAMP AS OF '{first_commit}'") == 200
    detail = run_sql(spark, str(lake), "DESCRIBE DETAIL messages").collect()[0]
    assert detail["format"] == "delta" and detail["partitionColumns"] == ["topic", "store_date"]
    rows = run_sql(spark, str(lake), "SELECT uniq_key FROM messages WHERE topic = 'TopicA' "
                   "AND array_contains(split(keys, ' '), 'order-7')").collect()
    assert [r["uniq_key"] for r in rows] == ["UNIQ00000007"]


def test_sql_command(spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write_store(user_messages(50))
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)
    done = subprocess.run(lakemq_command("sql", "--lake", str(lake), "--master", "local[1]",
                                         "SELECT tags, count(*) AS n FROM messages GROUP BY tags ORDER BY tags"),
                          capture_output=True, text=True, timeout=300, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tag0" in done.stdout and "17" in done.stdout and "3 row(s)" in done.stdout
    bad = subprocess.run(lakemq_command("sql", "--lake", str(lake), "--master", "local[1]", "SELEC nonsense"),
                         capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
    # lakemq's own report is one line (the JVM may print its start-up notices before it).
    assert bad.returncode == 1 and bad.stderr.strip().splitlines()[-1].startswith("error: Spark job failed")
