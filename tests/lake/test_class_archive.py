"""The driver's class-data-sharing archive: which sessions map it, that its key follows the
jars, and that the archive the set-up dumped is one this JVM accepts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakemq.jobs import class_archive
from lakemq.jobs.session import session_conf


@pytest.fixture
def archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAKEMQ_SPARK_CDS_DIR", str(tmp_path / "cds"))
    return tmp_path / "cds"


def test_a_session_maps_the_archive_of_its_own_jars_only(archives: Path, tmp_path: Path) -> None:
    jar = tmp_path / "extra.jar"
    jar.write_bytes(b"PK")
    settings = {"spark.jars": str(jar)}
    archive = class_archive.archive_for(settings)
    assert archive is not None and archive.parent == archives
    assert class_archive.java_options(settings) is None  # not dumped yet
    archives.mkdir()
    archive.write_bytes(b"archive")
    assert class_archive.java_options(settings) == f"-XX:SharedArchiveFile={archive} {class_archive._QUIET}"
    # Another jar set (or the same jar rewritten) has another key, so it maps nothing.
    assert class_archive.archive_for({}) != archive
    jar.write_bytes(b"PK changed")
    assert class_archive.archive_for(settings) != archive
    assert class_archive.java_options(settings) is None


def test_settings_that_choose_sharing_themselves_are_left_alone(archives: Path) -> None:
    archive = class_archive.archive_for({})
    assert archive is not None
    archives.mkdir()
    archive.write_bytes(b"archive")
    assert class_archive.java_options({}) is not None
    for chosen in ("-Xshare:off", "-XX:SharedArchiveFile=/elsewhere.jsa", "-XX:ArchiveClassesAtExit=/x.jsa"):
        assert class_archive.java_options({"spark.driver.extraJavaOptions": f"-Dx=1 {chosen}"}) is None
        assert class_archive.java_options({"spark.driver.defaultJavaOptions": chosen}) is None


def test_session_conf_appends_the_archive_to_the_driver_options(archives: Path) -> None:
    plain = session_conf(class_archive=False)
    archive = class_archive.archive_for(plain)
    assert archive is not None
    assert "SharedArchiveFile" not in session_conf().get("spark.driver.extraJavaOptions", "")
    archives.mkdir()
    archive.write_bytes(b"archive")
    options = session_conf()["spark.driver.extraJavaOptions"]
    assert options.startswith(plain.get("spark.driver.extraJavaOptions", ""))
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert "SharedArchiveFile" not in session_conf(class_archive=False).get("spark.driver.extraJavaOptions", "")


def test_stale_archives_go_and_live_builders_keep_theirs(archives: Path) -> None:
    archives.mkdir()
    current = archives / "driver-new.jsa"
    old = archives / "driver-old.jsa"
    orphan = archives / "driver-new.jsa.999999999.part"  # no such process
    building = archives / f"driver-new.jsa.{os.getpid()}.part"
    for path in (current, old, orphan, building):
        path.write_bytes(b"x")
    class_archive._remove_stale(current)
    assert sorted(p.name for p in archives.iterdir()) == sorted([current.name, building.name])


@pytest.mark.spark
def test_the_set_up_archive_is_accepted_by_the_driver_jvm(tmp_path: Path) -> None:
    """scripts/bootstrap.sh dumped the archive for these jars; a driver told to share classes or
    fail (-Xshare:on) starts from it and writes a Delta table. On a broken archive the same
    driver does not start, so -Xshare:on really checked it."""
    archive = class_archive.archive_for(session_conf(class_archive=False))
    assert archive is not None and archive.is_file(), f"no class archive at {archive}: run scripts/bootstrap.sh"
    script = (
        "import sys\n"
        "from lakemq.jobs.session import build_session, session_conf\n"
        "options = OPTIONS + ' -Xshare:on'\n"
        "spark = build_session(master='local[1]', conf={'spark.driver.extraJavaOptions': options})\n"
        "spark.range(3).write.format('delta').save(sys.argv[1])\n"
        "print(spark.read.format('delta').load(sys.argv[1]).count())\n"
    )
    good = subprocess.run([sys.executable, "-c", script.replace("OPTIONS", "session_conf()['spark.driver.extraJavaOptions']"),
                           str(tmp_path / "t1")], check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert good.returncode == 0 and good.stdout.strip().splitlines()[-1] == "3", good.stderr[-2000:]
    bad = tmp_path / "broken.jsa"  # not an archive: a bad magic number, refused before mapping
    bad.write_bytes(b"not a class archive\n" * 4096)
    refused = subprocess.run([sys.executable, "-c", script.replace("OPTIONS", repr(f"-XX:SharedArchiveFile={bad}")),
                              str(tmp_path / "t2")], check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert refused.returncode != 0 and not (tmp_path / "t2").exists()
    assert "shared archive file" in refused.stderr, refused.stderr[-2000:]
    assert not list(tmp_path.glob("hs_err_pid*.log")), "the JVM crashed instead of refusing the archive"
