"""Spark SQL over the lake through Delta's catalog: the tables and views, time travel (option,
VERSION AS OF, TIMESTAMP AS OF), Delta's own commands, and `lakemq sql` as a user runs it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from lake_helpers import WriteStore, user_messages

from lakemq.jobs.compact import compact
from lakemq.jobs.sql import run_sql
from lakemq.launcher import reserved_port, spawn
from tests.cli_in_process import lakemq_in_process, stderr_lines
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
    first_commit = next(h for h in history if h["version"] == after_first)["timestamp"]
    assert count(f"SELECT count(*) FROM messages TIMESTAMP AS OF '{first_commit}'") == 200
    detail = run_sql(spark, str(lake), "DESCRIBE DETAIL messages").collect()[0]
    assert detail["format"] == "delta" and detail["partitionColumns"] == ["topic", "store_date"]
    rows = run_sql(spark, str(lake), "SELECT uniq_key FROM messages WHERE topic = 'TopicA' "
                   "AND array_contains(split(keys, ' '), 'order-7')").collect()
    assert [r["uniq_key"] for r in rows] == ["UNIQ00000007"]
    # Registering again keeps the catalog's views as they are, and puts back one that a user
    # dropped or that holds another definition.
    created = {v: _view_created(spark, v) for v in ("user_messages", "transactions")}
    spark.sql("DROP VIEW schedule_messages")
    spark.sql("CREATE OR REPLACE VIEW user_messages AS SELECT 1 AS x")
    assert count("SELECT count(*) FROM user_messages") == 300
    assert count("SELECT count(*) FROM schedule_messages") == 0
    assert _view_created(spark, "transactions") == created["transactions"]
    assert _view_created(spark, "user_messages") > created["user_messages"]


def _query_when_open(port: int, env: dict[str, str], out: dict[str, subprocess.CompletedProcess[str]]) -> None:
    """Wait for ``port`` to accept a connection, then at once ask for a lake table through it."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)  # polling a port that is not open yet
    out["at open"] = subprocess.run(lakemq_command("sql", "--remote", f"sc://127.0.0.1:{port}",
                                                   "SELECT count(*) AS n FROM user_messages"),
                                    check=False, capture_output=True, text=True, timeout=120, env=env)


def _view_created(spark: Any, name: str) -> int:
    """When the session catalog's view ``name`` was (re)created, in epoch ms."""

    ident = spark.sparkContext._jvm.org.apache.spark.sql.catalyst.TableIdentifier(name)
    return int(spark._jsparkSession.sessionState().catalog().getTableMetadata(ident).createTime())




@pytest.mark.timeout(600)  # three JVMs: a query, a shell, a server
def test_sql_command_shell_and_server(spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write_store(user_messages(50))
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "LAKEMQ_LOG_DIR": str(tmp_path / "logs"),
           "LAKEMQ_SPARK_DEFAULTS": os.environ["LAKEMQ_SPARK_DEFAULTS"]}
    # One statement: a typo is one line on stderr (no Spark WARN lines, no Java stack); details in the log.
    bad = subprocess.run(lakemq_command("sql", "--lake", str(lake), "--master", "local[1]", "SELEC nonsense"),
                         check=False, capture_output=True, text=True, timeout=300, env=env)
    assert bad.returncode == 1
    assert stderr_lines(bad.stderr) == [stderr_lines(bad.stderr)[-1]], bad.stderr[-3000:]
    assert stderr_lines(bad.stderr)[-1].startswith("error: query failed: [PARSE_SYNTAX_ERROR]")
    assert "PARSE_SYNTAX_ERROR" in (tmp_path / "logs" / "lakemq-sql.log").read_text()
    # Without a query: statements from stdin on one session; a bad one does not stop the rest.
    # Delta's own commands on the catalog's table names, as a Spark user types them (the
    # command in this process, on the test's session: tests/cli_in_process.py).
    shell = lakemq_in_process(spark, "sql", "--lake", str(lake), "--master", "local[1]",
                              env={"COLUMNS": "200", "LAKEMQ_LOG_DIR": str(tmp_path / "logs")},
                              input="SELECT tags, count(*) AS n FROM messages\n GROUP BY tags ORDER BY tags;\n"
                                    "SELEC oops;\nSELECT max(queue_offset) AS top FROM user_messages;\n"
                                    "OPTIMIZE messages ZORDER BY (queue_offset);\n"
                                    "MERGE INTO messages t USING (SELECT 'UNIQ00000007' AS k) s ON t.uniq_key = s.k\n"
                                    " WHEN MATCHED THEN UPDATE SET tags = 'merged-tag';\n"
                                    "VACUUM messages RETAIN 168 HOURS;\n"
                                    "SELECT uniq_key, tags FROM messages WHERE tags = 'merged-tag';\n")
    assert shell.returncode == 1, shell.stderr[-3000:]
    assert "tag0" in shell.stdout and "17" in shell.stdout and "3 row(s)" in shell.stdout
    assert "top" in shell.stdout and "12" in shell.stdout and "1 row(s)" in shell.stdout
    assert "zOrderStats" in shell.stdout and "num_updated_rows" in shell.stdout
    assert re.search(r"UNIQ00000007\s*│\s*merged-tag", shell.stdout), shell.stdout[-3000:]
    from deltalake import DeltaTable

    operations = [h["operation"] for h in DeltaTable(str(lake / "messages")).history()]
    assert operations[:4] == ["VACUUM END", "VACUUM START", "MERGE", "OPTIMIZE"], operations
    errors = stderr_lines(shell.stderr)
    assert len(errors) == 2 and errors[0].startswith("error: query failed: [PARSE_SYNTAX_ERROR]")
    assert errors[1].startswith("error: 1 statement(s) failed")
    # A Spark Connect server keeps the session; `lakemq sql --remote` runs without a JVM of its own.
    # Its port opens only when the lake's tables are registered: a client that connects at
    # the first moment it can finds them.
    port = reserved_port()
    first: dict[str, subprocess.CompletedProcess[str]] = {}
    watcher = threading.Thread(target=_query_when_open, args=(port, env, first), daemon=True)
    watcher.start()
    server = spawn("sql-server", ["sql-server", "--lake", str(lake), "--master", "local[1]", "--port", str(port)],
                   tmp_path / "server", re.compile(r"ready on (sc://\S+) "), timeout=240)
    try:
        # In a pipe (stdout and stderr to one file) each stretch of the start is a line as it
        # begins, in order, before the ready line.
        lines = (tmp_path / "server" / "sql-server.out").read_text().splitlines()
        ready = next(i for i, line in enumerate(lines) if line.startswith("lakemq sql-server ready on "))
        said = [line.split(" ", 2)[2] for line in lines[:ready]
                if re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", line)]
        assert said == ["starting Spark (local[1])", "registering the lake's tables",
                        f"opening Spark Connect on 127.0.0.1:{port}"], lines
        watcher.join(timeout=120)
        assert first["at open"].returncode == 0, first["at open"].stderr[-3000:]
        assert "50" in first["at open"].stdout
        # A failed remote query is one line, as a local one (no JSON log record, no JVM stack).
        typo = subprocess.run(lakemq_command("sql", "--remote", server.addr, "SELECT * FROM no_such_table"),
                              check=False, capture_output=True, text=True, timeout=120, env=env)
        assert typo.returncode == 1
        assert len(stderr_lines(typo.stderr)) == 1, typo.stderr[-3000:]
        assert stderr_lines(typo.stderr)[0].startswith("error: query failed: [TABLE_OR_VIEW_NOT_FOUND]")
        remote = subprocess.run(lakemq_command("sql", "--remote", server.addr,
                                               "SELECT count(*) AS n FROM user_messages"),
                                check=False, capture_output=True, text=True, timeout=120, env=env)
        assert remote.returncode == 0, remote.stderr[-3000:] + server.logs()
        assert "50" in remote.stdout and "1 row(s)" in remote.stdout
        history = subprocess.run(lakemq_command("sql", "--remote", server.addr, "DESCRIBE HISTORY messages"),
                                 check=False, capture_output=True, text=True, timeout=120, env=env)
        assert history.returncode == 0, history.stderr[-3000:]
        assert "operation" in history.stdout and "CREATE TABLE" in history.stdout
    finally:
        assert server.stop() == 0
