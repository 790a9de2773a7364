"""A class-data-sharing (CDS) archive of the Spark driver's classes, so each job's JVM starts
faster.

Every lakemq job is a short-lived driver JVM that loads some 25,000 classes (Spark, Scala,
Delta) before its first query; parsing and verifying them costs seconds per job. Java 17 can
dump the classes a JVM loaded into an archive at exit (``-XX:ArchiveClassesAtExit``) and map
that archive into later JVMs (``-XX:SharedArchiveFile``). :func:`build` runs one warm-up job
(Delta writes, a MERGE, reads, SQL) with the first flag; :func:`java_options` gives every later
session the second.

An archive is only valid for the JVM and class path it was dumped with, so its file name
carries a key over the java binary, pyspark's jars and the lake jars. A key that no longer
matches simply finds no archive; a mismatch the key misses is caught by the JVM itself, which
then starts without sharing (``-Xshare:auto``, its default) and silently
(``-Xlog:cds=off``).

``python -m lakemq.jobs.class_archive`` builds the archive when it is missing (``--force``:
again); scripts/bootstrap.sh runs it after fetching the ``spark-lake`` jars.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["archive_dir", "archive_for", "build", "java_options"]

_ROOT = Path(__file__).resolve().parents[2]
# The JVM's own messages about an archive that does not fit: the JVM falls back by itself.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off -Xlog:class+path=off"
_ARCHIVE_FLAGS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare:off")


def archive_dir() -> Path:
    """Where archives live: ``LAKEMQ_SPARK_CDS_DIR``, else build/jvm/spark-lake/cds (which
    scripts/jvm_deps.sh clears when it fetches other jars)."""
    named = os.environ.get("LAKEMQ_SPARK_CDS_DIR")
    return Path(named) if named else _ROOT / "build" / "jvm" / "spark-lake" / "cds"


def _java() -> Path | None:
    """The java Spark's launcher runs: JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and os.path.exists(found) else None


def _key(spark_jars: str) -> str | None:
    """What the archive depends on: the JVM binary and every jar the driver loads."""
    import pyspark

    java = _java()
    if java is None:
        return None
    digest = hashlib.sha256()
    digest.update(f"{java}:{java.stat().st_mtime_ns}\n".encode())
    spark_lib = Path(pyspark.__file__).parent / "jars"
    named = [Path(j.strip().removeprefix("file:")) for j in spark_jars.split(",") if j.strip()]
    for jar in sorted(spark_lib.glob("*.jar")) + named:
        try:
            stat = jar.stat()
        except OSError:
            return None
        digest.update(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def archive_for(settings: Mapping[str, str]) -> Path | None:
    """The archive file for these session settings' JVM and jars (it may not exist yet)."""
    key = _key(settings.get("spark.jars", ""))
    return archive_dir() / f"driver-{key}.jsa" if key else None


def java_options(settings: Mapping[str, str]) -> str | None:
    """The driver JVM flags that map the archive, or None when there is none for these
    settings, or the settings already choose an archive (or none) themselves."""
    chosen = f"{settings.get('spark.driver.defaultJavaOptions', '')} {settings.get('spark.driver.extraJavaOptions', '')}"
    if any(flag in chosen for flag in _ARCHIVE_FLAGS):
        return None
    archive = archive_for(settings)
    if archive is None or not archive.is_file():
        return None
    return f"-XX:SharedArchiveFile={archive} {_QUIET}"


def _warm_up(archive: Path) -> None:
    """One job touching what lakemq's jobs touch, in a JVM that dumps its classes at exit."""
    from lakemq.jobs.session import build_session, session_conf

    options = session_conf(class_archive=False).get("spark.driver.extraJavaOptions", "")
    spark = build_session(master="local[1]", app_name="lakemq-class-archive", ui_enabled=False,
                          conf={"spark.driver.extraJavaOptions": f"{options} -XX:ArchiveClassesAtExit={archive}"})
    with tempfile.TemporaryDirectory(prefix="lakemq-cds-") as scratch:
        table = f"delta.`{scratch}/t`"
        rows = spark.range(2000).selectExpr("id", "cast(id % 7 as string) AS part", "unhex(hex(id)) AS body",
                                            "map('k', cast(id as string)) AS props", "current_timestamp() AS ts")
        rows.write.format("delta").partitionBy("part").save(f"{scratch}/t")
        rows.limit(10).write.format("delta").mode("append").save(f"{scratch}/t")
        spark.sql(f"MERGE INTO {table} t USING (SELECT id, 'x' AS part FROM range(5)) s ON t.id = s.id "
                  "WHEN MATCHED THEN UPDATE SET t.part = s.part WHEN NOT MATCHED THEN INSERT (id, part) VALUES (s.id, s.part)")
        read = spark.read.format("delta").load(f"{scratch}/t")
        read.where("id > 5 AND props['k'] LIKE '1%'").groupBy("part").count().orderBy("part").collect()
        read.select("id", "body").limit(100).toArrow()
        spark.sql(f"DESCRIBE HISTORY {table}").collect()
        spark.sql(f"OPTIMIZE {table}").collect()
        spark.sql(f"SELECT * FROM {table} VERSION AS OF 0 WHERE part = '3'").count()
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    jvm = gateway.proc  # the driver JVM's process (spark-submit execs java)
    spark.stop()
    # The JVM exits when its stdin ends and writes the archive as it exits: wait for that.
    jvm.stdin.close()
    if jvm.wait(timeout=600) != 0:
        raise RuntimeError(f"the driver JVM exited {jvm.returncode} while writing the archive")


def build(*, force: bool = False, announce: bool = False) -> Path | None:
    """Dump the archive for the default session settings unless it is there; returns its path
    (None when no java is found). The warm-up runs in a child process, whose JVM writes the
    archive when it exits; the file is moved into place only once complete."""
    from lakemq.jobs.session import session_conf

    archive = archive_for(session_conf(class_archive=False))
    if archive is None or (archive.is_file() and not force):
        return archive
    if announce:
        print(f"class archive: dumping the Spark driver's classes into {archive} (once; a minute or two)", flush=True)
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.part")
    log = archive.with_name("build.log")
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run([sys.executable, "-m", "lakemq.jobs.class_archive", "--warm-up", str(partial)],
                              stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the warm-up job failed (exit {done.returncode}); see {log}")
    os.replace(partial, archive)
    _remove_stale(archive)
    return archive


def _remove_stale(current: Path) -> None:
    """Archives of other keys, and partial ones whose builder is gone (they are 200 MB each)."""
    for path in current.parent.glob("driver-*.jsa*"):
        if path == current:
            continue
        builder = path.name.split(".")[-2] if path.name.endswith(".part") else ""
        if builder.isdigit() and _alive(int(builder)):
            continue
        path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> int:
    if argv[:1] == ["--warm-up"]:
        _warm_up(Path(argv[1]))
        return 0
    try:
        archive = build(force="--force" in argv, announce=True)
    except RuntimeError as exc:
        print(f"class archive: {exc}", file=sys.stderr)
        return 1
    if archive is None:
        print("class archive: no java found, none built", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
