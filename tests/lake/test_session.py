"""The Spark session builder: settings precedence, the shared test session, Delta detection."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from lakemq.errors import ConfigError
from lakemq.jobs.session import DELTA_EXTENSION, delta_jars, read_spark_defaults, session_conf


def test_defaults_file_then_env_then_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text("# comment\nspark.master   spark://h:7077\nspark.sql.shuffle.partitions 9\nspark.x=1\n")
    monkeypatch.delenv("LAKEMQ_SPARK_MASTER", raising=False)
    monkeypatch.delenv("LAKEMQ_SPARK_UI", raising=False)
    assert read_spark_defaults(conf) == {"spark.master": "spark://h:7077", "spark.sql.shuffle.partitions": "9",
                                         "spark.x": "1"}
    merged = session_conf(conf_file=conf)
    assert merged["spark.master"] == "spark://h:7077" and merged["spark.sql.shuffle.partitions"] == "9"
    monkeypatch.setenv("LAKEMQ_SPARK_MASTER", "local[3]")
    monkeypatch.setenv("LAKEMQ_SPARK_UI", "false")
    merged = session_conf(conf_file=conf)
    assert merged["spark.master"] == "local[3]" and merged["spark.ui.enabled"] == "false"
    merged = session_conf(conf_file=conf, master="local[1]", ui_enabled=True, conf={"spark.x": "2"})
    assert (merged["spark.master"], merged["spark.ui.enabled"], merged["spark.x"]) == ("local[1]", "true", "2")


def test_bad_defaults_file_is_a_config_error(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("spark.master\n")
    with pytest.raises(ConfigError, match="bad.conf:1"):
        read_spark_defaults(conf)
    with pytest.raises(ConfigError, match="cannot read"):
        read_spark_defaults(tmp_path / "missing.conf")


def test_delta_extension_follows_the_jars(tmp_path: Path) -> None:
    jar = tmp_path / "delta-spark_2.13-4.4.1.jar"
    jar.write_bytes(b"PK")
    with_jar = session_conf(conf={"spark.jars": str(jar)})
    assert with_jar["spark.sql.extensions"] == DELTA_EXTENSION
    if not delta_jars(session_conf()):
        assert "spark.sql.extensions" not in session_conf()


def test_shared_session_runs_python_workers_on_this_interpreter(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.master") == "local[2]"
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.sql.extensions") == DELTA_EXTENSION
    exe = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("sys").executable).collect()[0]
    assert exe == sys.executable


def test_delta_spark_reads_the_lake_natively(spark: Any, tmp_path: Path) -> None:
    assert spark.conf.get("spark.sql.extensions") == DELTA_EXTENSION
    spark.range(3).write.format("delta").save(str(tmp_path / "t"))
    assert spark.read.format("delta").load(str(tmp_path / "t")).count() == 3
