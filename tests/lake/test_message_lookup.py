"""Finding messages in the lake by key and unique key, alone and beside the hot tier
(`lakemq admin message query --lake`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from lake_helpers import BORN_MS, WriteStore, user_messages

from lakemq.client import Message, SyncProducer
from lakemq.jobs.compact import compact
from lakemq.jobs.message_lookup import find_messages, find_messages_on_driver
from tests.cli_in_process import lakemq_in_process
from tests.cluster import lakemq_command, start_cluster


def _cli(spark: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """The command, run in this process on the test's session (tests/cli_in_process.py)."""
    return lakemq_in_process(spark, "admin", "message", "query", "--master", "local[1]", *args, env={"COLUMNS": "250"})


def _tiers(stdout: str) -> list[str]:
    """The tier of each message printed, in a table ("│ lake │") or one field a line ("tier: lake")."""
    return re.findall(r"(?:^\s*tier: |│\s*)(hot|lake)\b", stdout, re.MULTILINE)


@pytest.fixture
def lake(spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    write_store(user_messages(200))
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)
    return lake


def test_find_by_key_unique_key_time_and_limit(spark: Any, lake: Path) -> None:
    by_key = find_messages(spark, str(lake), topic="TopicA", key="k3")
    assert [m.uniq_key for m in by_key] == [f"UNIQ{i:08d}" for i in range(3, 200, 10)]
    assert by_key[0].keys == ("order-3", "k3") and by_key[0].body.startswith(b"m3:") and by_key[0].tags == "tag0"
    assert [m.commitlog_offset for m in by_key] == sorted(m.commitlog_offset for m in by_key)

    (one,) = find_messages(spark, str(lake), topic="TopicA", unique_key="UNIQ00000042")
    assert one.keys == ("order-42", "k2") and one.queue_id == 2 and one.properties["UNIQ_KEY"] == "UNIQ00000042"

    # The newest ``limit``, oldest first, through the index and straight from messages alike.
    newest = [f"UNIQ{i:08d}" for i in range(163, 200, 10)]
    assert [m.uniq_key for m in find_messages(spark, str(lake), topic="TopicA", key="k3", limit=4)] == newest
    keys_index = lake / "message_keys"
    shutil.move(keys_index, lake / "index-away")
    try:
        assert [m.uniq_key for m in find_messages(spark, str(lake), topic="TopicA", key="k3", limit=4)] == newest
    finally:
        shutil.move(lake / "index-away", keys_index)
    assert find_messages(spark, str(lake), topic="TopicB", key="k3") == []
    stored = by_key[0].store_timestamp
    assert find_messages(spark, str(lake), topic="TopicA", key="k3", begin_ms=0, end_ms=stored - 1) == []
    with pytest.raises(ValueError):
        find_messages(spark, str(lake), topic="TopicA")
    assert BORN_MS < stored


def test_cli_searches_the_lake_when_the_cluster_is_gone(spark: Any, lake: Path) -> None:
    found = _cli(spark, "-n", "127.0.0.1:1", "--lake", str(lake), "--topic", "TopicA", "--key", "k3")
    assert found.returncode == 0, found.stderr[-2000:]
    assert "note: hot tier not searched" in found.stderr
    assert "20 message(s)" in found.stdout and "UNIQ00000193" in found.stdout and _tiers(found.stdout) == ["lake"] * 20
    missing = _cli(spark, "-n", "127.0.0.1:1", "--lake", str(lake), "--topic", "TopicA", "--key", "nope")
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines()[-1] == "error: no message of TopicA with key nope (hot tier and lake)"
    without_lake = subprocess.run(lakemq_command("admin", "message", "query", "-n", "127.0.0.1:1", "--topic",
                                                 "TopicA", "--key", "k3"),
                                  check=False, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert without_lake.returncode == 1 and len(without_lake.stderr.strip().splitlines()) == 1


def test_cli_merges_hot_tier_and_lake(spark: Any, lake: Path, tmp_path: Path) -> None:
    with start_cluster(tmp_path / "cluster") as cluster:
        with SyncProducer("pg-lookup", namesrv_addr=cluster.namesrv_addr) as producer:
            producer.create_topic("TopicA", 1)
            hot = Message("TopicA", b"fresh-from-the-broker")
            hot.keys = ["k3"]
            producer.send(hot)
        found = _cli(spark, "-n", cluster.namesrv_addr, "--lake", str(lake), "--topic", "TopicA", "--key", "k3")
        cut = _cli(spark, "-n", cluster.namesrv_addr, "--lake", str(lake), "--topic", "TopicA", "--key", "k3",
                   "--max", "3")
        # A lake that fails mid-search (a data file lost): the hot tier's answer is still shown.
        broken = tmp_path / "broken-lake"
        shutil.copytree(lake, broken)
        next((broken / "messages").rglob("*.parquet")).unlink()
        partial = _cli(spark, "-n", cluster.namesrv_addr, "--lake", str(broken), "--topic", "TopicA", "--key", "k3")
    assert partial.returncode == 1 and "fresh-from-the-broker" in partial.stdout and "1 message(s)" in partial.stdout
    assert partial.stderr.strip().splitlines()[-1].startswith("error: the lake was not searched, only the hot tier")
    assert found.returncode == 0, found.stderr[-2000:]
    assert "21 message(s)" in found.stdout and found.stdout.count("fresh-from-the-broker") == 1
    assert _tiers(found.stdout) == ["lake"] * 20 + ["hot"]  # oldest first: the hot one is new
    # --max keeps the newest of both tiers together, as either tier alone does.
    assert _tiers(cut.stdout) == ["lake", "lake", "hot"] and "UNIQ00000193" in cut.stdout
    assert "UNIQ00000183" in cut.stdout and "UNIQ00000173" not in cut.stdout
    assert cut.stdout.strip().splitlines()[-1].startswith("the newest 3 message(s) shown, oldest first")


def test_the_driver_reads_what_spark_finds_and_defers_to_it_without_the_index(spark: Any, lake: Path) -> None:
    """find_messages_on_driver (delta-rs and pyarrow, no Spark) answers as find_messages does;
    without a complete index it says Spark is needed."""
    asks: list[dict[str, Any]] = [
        {"key": "k3"}, {"key": "k3", "limit": 4}, {"unique_key": "UNIQ00000042"}, {"key": "nope"},
        {"key": "k3", "begin_ms": 0, "end_ms": BORN_MS - 1}, {"key": "a b"},
    ]
    for ask in asks:
        on_driver = find_messages_on_driver(str(lake), topic="TopicA", **ask)
        assert on_driver == find_messages(spark, str(lake), topic="TopicA", **ask), ask
    assert len(find_messages_on_driver(str(lake), topic="TopicA", key="k3") or []) == 20
    assert find_messages_on_driver(str(lake), topic="TopicB", key="k3") == []
    shutil.move(lake / "message_keys", lake / "index-away")
    assert find_messages_on_driver(str(lake), topic="TopicA", key="k3") is None


def test_cli_answers_from_the_index_without_starting_spark(lake: Path, tmp_path: Path) -> None:
    """With the lake's index complete, `admin message query --lake` reads the few rows itself:
    it answers with no Java to start a Spark driver on."""
    import os

    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java"), "PATH": "/usr/bin:/bin", "COLUMNS": "250",
           "LAKEMQ_LOG_DIR": str(tmp_path / "logs")}
    env.pop("SPARK_HOME", None)
    found = subprocess.run(lakemq_command("admin", "message", "query", "-n", "127.0.0.1:1",
                                          "--lake", str(lake), "--topic", "TopicA", "--key", "k3"),
                           check=False, capture_output=True, text=True, timeout=120, env=env)
    assert found.returncode == 0, found.stderr[-2000:]
    assert "20 message(s)" in found.stdout and _tiers(found.stdout) == ["lake"] * 20
