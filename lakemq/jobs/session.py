"""The SparkSession every lakemq job runs in.

Settings come, weakest first, from built-in defaults, ``conf/spark-defaults.conf`` (Spark's
``key value`` lines; ``LAKEMQ_SPARK_DEFAULTS`` names another file), the environment
(``LAKEMQ_SPARK_MASTER``, ``LAKEMQ_SPARK_UI``) and the caller's arguments. Python workers run
this interpreter, so they import the same lakemq and pyarrow as the driver.

Delta Lake's jars (delta-spark) and Hadoop's S3 connector (hadoop-aws) come from Maven
through ``scripts/jvm_deps.sh spark-lake`` into ``build/jvm/spark-lake/lib``
(``LAKEMQ_SPARK_LAKE_JARS`` names another directory). When they are there they go on
``spark.jars`` and Delta's SQL extension and catalog are switched on; without them a job that
reads the lake fails with a :class:`~lakemq.errors.ConfigError` saying how to fetch them.

Logging: the driver JVM logs through ``conf/log4j2.properties`` (warnings to
``spark-jvm.log`` in lakemq's log directory, only errors on the console), and PySpark's own
error loggers write to the process's lakemq log file instead of printing JSON to stderr.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from lakemq.common.logs import default_log_dir
from lakemq.errors import ConfigError
from lakemq.jobs.class_archive import java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULTS", "build_session", "default_conf_file", "delta_jars", "is_remote", "lake_jars",
           "lakemq_error_line", "read_spark_defaults", "require_delta", "route_pyspark_loggers", "session_conf",
           "spark_error_line", "spark_errors"]

DEFAULTS: Mapping[str, str] = {
    "spark.master": "local[*]",
    "spark.app.name": "lakemq",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
JARS_GROUP = "spark-lake"
_ROOT = Path(__file__).resolve().parents[2]
LOG4J_CONF = _ROOT / "conf" / "log4j2.properties"
# PySpark prints these as JSON with the whole Java stack on stderr for every failed query.
_PYSPARK_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def lake_jars() -> list[str]:
    """The jars ``scripts/jvm_deps.sh spark-lake`` fetched (delta-spark, hadoop-aws, AWS SDK)."""
    named = os.environ.get("LAKEMQ_SPARK_LAKE_JARS")
    lib = Path(named) if named else _ROOT / "build" / "jvm" / JARS_GROUP / "lib"
    return sorted(str(p) for p in lib.glob("*.jar"))


def default_conf_file() -> Path:
    named = os.environ.get("LAKEMQ_SPARK_DEFAULTS")
    if named:
        return Path(named)
    return _ROOT / "conf" / "spark-defaults.conf"


def read_spark_defaults(path: str | Path) -> dict[str, str]:
    """Spark's defaults format: ``key value`` (or ``key=value``) per line, ``#`` comments."""
    conf: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read Spark defaults {path}: {exc.strerror}") from exc
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        key, value = (parts[0], parts[1].strip()) if len(parts) == 2 else line.partition("=")[::2]
        if not key or not value:
            raise ConfigError(f"{path}:{lineno}: expected 'key value', got {line!r}")
        conf[key.strip()] = value.strip()
    return conf


def delta_jars(conf: Mapping[str, str]) -> list[str]:
    """The delta-spark jars Spark would load: in pyspark's (or SPARK_HOME's) jars directory,
    or listed in ``spark.jars``."""
    import pyspark

    found: list[str] = []
    homes = [os.path.dirname(pyspark.__file__), os.environ.get("SPARK_HOME", "")]
    for home in filter(None, homes):
        found += glob.glob(os.path.join(home, "jars", "delta-spark_*.jar"))
    for jar in filter(None, (j.strip() for j in conf.get("spark.jars", "").split(","))):
        if os.path.basename(jar).startswith("delta-spark_") and os.path.exists(jar.removeprefix("file:")):
            found.append(jar)
    return sorted(set(found))


def session_conf(
    *,
    master: str | None = None,
    app_name: str | None = None,
    ui_enabled: bool | None = None,
    conf: Mapping[str, str] | None = None,
    conf_file: str | Path | None = None,
    class_archive: bool = True,
) -> dict[str, str]:
    """The merged settings :func:`build_session` applies (pure, so it is testable). With
    ``class_archive``, the driver maps the class archive built for these settings, if any
    (:mod:`lakemq.jobs.class_archive`)."""
    merged = dict(DEFAULTS)
    path = Path(conf_file) if conf_file is not None else default_conf_file()
    if conf_file is not None or path.exists():
        merged.update(read_spark_defaults(path))
    if os.environ.get("LAKEMQ_SPARK_MASTER"):
        merged["spark.master"] = os.environ["LAKEMQ_SPARK_MASTER"]
    if os.environ.get("LAKEMQ_SPARK_UI"):
        merged["spark.ui.enabled"] = os.environ["LAKEMQ_SPARK_UI"].lower()
    merged.update(conf or {})
    if master:
        merged["spark.master"] = master
    if app_name:
        merged["spark.app.name"] = app_name
    if ui_enabled is not None:
        merged["spark.ui.enabled"] = str(ui_enabled).lower()
    if LOG4J_CONF.exists():
        merged.setdefault("spark.driver.extraJavaOptions",
                          f"-Dlog4j2.configurationFile={LOG4J_CONF.as_uri()} -Dlakemq.log.dir={default_log_dir()}")
    jars = [j for j in merged.get("spark.jars", "").split(",") if j.strip()]
    merged_jars = jars + [j for j in lake_jars() if j not in jars]
    if merged_jars:
        merged["spark.jars"] = ",".join(merged_jars)
    if delta_jars(merged):
        merged.setdefault("spark.sql.extensions", DELTA_EXTENSION)
        merged.setdefault("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
    sharing = class_archive and java_options(merged)
    if sharing:
        merged["spark.driver.extraJavaOptions"] = f"{merged.get('spark.driver.extraJavaOptions', '')} {sharing}".strip()
    return merged


def build_session(
    *,
    master: str | None = None,
    app_name: str | None = None,
    ui_enabled: bool | None = None,
    conf: Mapping[str, str] | None = None,
    conf_file: str | Path | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession. The ``commitlog`` data source is registered
    by whoever reads it (:func:`lakemq.jobs.sources.register_sources`): no job does, and the
    registration costs the JVM 2-3 s at every start."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    settings = session_conf(master=master, app_name=app_name, ui_enabled=ui_enabled, conf=conf, conf_file=conf_file)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    route_pyspark_loggers()
    return spark


def is_remote(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no JVM, no SparkContext here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def route_pyspark_loggers() -> None:
    """PySpark's query-error loggers to this process's lakemq log file (or nowhere)."""
    from pyspark.logger import PySparkLogger

    ours = [h for h in logging.getLogger().handlers if getattr(h, "_lakemq", False)] or [logging.NullHandler()]
    for name in _PYSPARK_ERROR_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        for handler in ours:
            logging.Logger.addHandler(logger, handler)  # PySparkLogger.addHandler would make it JSON


def require_delta(spark: SparkSession) -> None:
    """Fail with one clear line when the session cannot read Delta tables."""
    if DELTA_EXTENSION not in (spark.conf.get("spark.sql.extensions", "") or ""):
        raise ConfigError("Spark has no Delta Lake jars: run `bash scripts/jvm_deps.sh spark-lake` "
                          "(or scripts/bootstrap.sh with LAKEMQ_JVM_GROUPS=spark-lake)")


def spark_errors() -> tuple[type[Exception], ...]:
    """What a failed Spark call raises: PySpark's errors, or a Java error py4j did not convert."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return PySparkException, Py4JJavaError


_LAKEMQ_ERROR = re.compile(r"lakemq\.errors\.\w+: (.+)")


def lakemq_error_line(exc: BaseException) -> str | None:
    """The message of a lakemq error raised in Python code Spark ran (a data source, a UDF),
    which Spark reports inside its own error with the worker's traceback; None if none is."""
    java = getattr(exc, "java_exception", None)
    text = f"{exc}\n{java.toString() if java is not None else ''}"
    found = _LAKEMQ_ERROR.findall(text)
    return str(found[-1]).strip() if found else None


def spark_error_line(exc: BaseException) -> str:
    """The one line of a Spark error worth showing (the Java exception's, not py4j's call site)."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
