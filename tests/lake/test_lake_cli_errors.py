"""The lake commands as a new user meets them, before Spark starts: no lake is an error (never
the working directory), a lake that is a file is one, broker.conf is read as the broker reads
it, a damaged Delta log is the lake's fault in one line, progress shows in a pipe as it
happens, and what is not yet in the lake is said with its reason."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from lake_helpers import store_writer, user_messages
from rich.console import Console

from lakemq.broker.broker_conf import BROKER_CONF_PARTS
from lakemq.cli import main
from lakemq.cli.output import print_rows
from lakemq.cli.progress import JobProgress
from lakemq.common.config import snake_to_camel
from lakemq.errors import ConfigError, LakeError
from lakemq.jobs.reindex import ReindexSettings
from lakemq.jobs.tier_steps import TierSettings
from lakemq.launcher import lakemq_command
from lakemq.tiering.lake_fs import LakeLocation

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONF = ROOT / "conf" / "broker.conf"


@pytest.fixture(autouse=True)
def _logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEMQ_LOG_DIR", str(tmp_path / "logs"))


def _lakemq(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    store_writer(data)(user_messages(300))
    return data


def test_no_lake_is_an_error_naming_both_ways_never_the_working_directory(
        tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    assert "\nlakeUri=\n" in SHIPPED_CONF.read_text()  # the shipped conf names no lake
    for command in (["tier", "run"], ["tier", "status"]):
        result = _lakemq(*command, "-c", str(SHIPPED_CONF), "--data-dir", str(store))
        assert result.exit_code == 1, result.output
        assert "no lake is set: give --lake LAKE" in result.output and "lakeUri=LAKE in broker.conf" in result.output
    for sweep in ("delay", "transactions"):
        result = _lakemq("sweep", sweep, "-n", "127.0.0.1:1", "-c", str(SHIPPED_CONF))
        assert result.exit_code == 1 and "no lake is set" in result.output, result.output
    assert list(work.iterdir()) == []  # nothing was written where the command ran
    with pytest.raises(ConfigError, match="no lake is set"):
        _ = TierSettings.from_mapping({"broker_conf": str(SHIPPED_CONF), "store_dir": str(store)}).lake
    # the conf's lakeUri is the other way
    conf = tmp_path / "with-lake.conf"
    conf.write_text(f"lakeUri={tmp_path / 'lake'}\n")
    status = _lakemq("tier", "status", "-c", str(conf), "--data-dir", str(store))
    assert status.exit_code == 0, status.output
    assert f"lake {tmp_path / 'lake'}" in status.output


def test_a_lake_that_is_a_file_is_one_clear_error_for_every_lake_command(tmp_path: Path, store: Path) -> None:
    lake = tmp_path / "lake.txt"
    lake.write_text("not a lake\n")
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\n")
    commands = [
        ["tier", "status", "-c", str(conf), "--data-dir", str(store), "--lake", str(lake)],
        ["tier", "run", "-c", str(conf), "--data-dir", str(store), "--lake", str(lake)],
        ["sql", "--lake", str(lake), "SELECT 1"],
        ["sweep", "delay", "-n", "127.0.0.1:1", "--lake", str(lake)],
        ["sweep", "transactions", "-n", "127.0.0.1:1", "--lake", str(lake)],
        ["replay", "-n", "127.0.0.1:1", "-t", "TopicA", "--from", "0", "--to", "1", "--lake", str(lake),
         "--checkpoint", str(tmp_path / "cp.json")],
    ]
    for args in commands:
        result = _lakemq(*args)
        assert result.exit_code == 1, (args, result.output)
        assert f"error: the lake {lake} is a file, not a directory" in result.output, (args, result.output)
    with pytest.raises(LakeError, match="is a file, not a directory"):
        LakeLocation.of(str(lake))


def test_every_command_reads_broker_conf_as_the_broker_does(tmp_path: Path, store: Path) -> None:
    typo = tmp_path / "typo.conf"
    typo.write_text("flushDiskTyp=ASYNC_FLUSH\n")
    bad = tmp_path / "bad.conf"
    bad.write_text("flushDiskType=ASYNC\n")
    for conf, said in ((typo, "unknown config keys: flushDiskTyp"),
                       (bad, "config key flushDiskType: bad value 'ASYNC' (one of ASYNC_FLUSH, SYNC_FLUSH)")):
        for command in ("run", "status"):
            result = _lakemq("tier", command, "-c", str(conf), "--data-dir", str(store), "--lake", str(tmp_path / "l"))
            assert result.exit_code == 1 and said in result.output, result.output
        for load in (TierSettings.from_mapping, ReindexSettings.from_mapping):
            with pytest.raises(ConfigError, match=re.escape(said)):
                load({"broker_conf": str(conf), "store_dir": str(store)})
    with pytest.raises(ConfigError, match="unknown config keys: tierSealIdle"):
        TierSettings.from_mapping({"conf": {"tierSealIdle": "1"}, "store_dir": str(store)})  # a DAG's overrides too


def test_broker_conf_documents_every_key_every_part_reads() -> None:
    text = SHIPPED_CONF.read_text()
    spelled = {"brokerIp1": "brokerIP1", "brokerIp2": "brokerIP2"}
    missing = []
    for part in BROKER_CONF_PARTS:
        for name in (f.name for f in dataclasses.fields(part)):
            key = snake_to_camel(name)
            key = spelled.get(key, key)
            if not re.search(rf"^#?{re.escape(key)}=", text, re.MULTILINE):
                missing.append(key)
    assert not missing, f"conf/broker.conf lacks {missing}"


def test_a_bad_broker_conf_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    for text, said in (("flushDiskTyp=ASYNC_FLUSH\n", "error: unknown config keys: flushDiskTyp"),
                       ("brokerRole=MASTER\n", "(one of ASYNC_MASTER, SYNC_MASTER, SLAVE)")):
        conf = tmp_path / "broker.conf"
        conf.write_text(text)
        out = subprocess.run([sys.executable, "-c", "from lakemq.cli import main; main()", "broker", "-c", str(conf),
                              "--data-dir", str(tmp_path / "store")], capture_output=True, text=True, timeout=60,
                             check=False)
        assert out.returncode == 1
        assert len(out.stderr.strip().splitlines()) == 1 and said in out.stderr, out.stderr


def test_a_damaged_delta_log_is_the_lakes_fault_in_one_line(tmp_path: Path, store: Path) -> None:
    lake = tmp_path / "lake"
    _damaged_lake(lake)
    result = _lakemq("tier", "status", "--data-dir", str(store), "--lake", str(lake))
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if not re.match(r"\d{4}-\d\d-\d\d ", line)]
    assert len(errors) == 1, result.output
    assert errors[0].startswith(f"error: the lake's messages table ({lake / 'messages'}) cannot be read: ")
    assert "The lake is damaged, not lakemq" in errors[0] and "lakemq fault" not in errors[0]


def _damaged_lake(lake: Path) -> None:
    """A messages table whose second commit is not JSON."""
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(lake / "messages"), pa.table({"x": [1, 2]}))
    write_deltalake(str(lake / "messages"), pa.table({"x": [3]}), mode="append")
    (lake / "messages" / "_delta_log" / f"{1:020d}.json").write_text("{not json\n")


@pytest.mark.slow
def test_sql_on_a_damaged_delta_log_prints_one_line_and_logs_the_stack(tmp_path: Path) -> None:
    """Spark's stack traces go to spark-jvm.log, not the console (a process of its own: the
    JVM's console output is what is checked)."""
    lake = tmp_path / "lake"
    _damaged_lake(lake)
    out = subprocess.run(lakemq_command("sql", "--lake", str(lake), "SELECT count(*) FROM messages"),
                         capture_output=True, text=True, timeout=600, check=False,
                         env={**os.environ, "LAKEMQ_LOG_DIR": str(tmp_path / "logs")})
    assert out.returncode == 1
    # Spark's own --add-modules makes the JVM print one WARNING line before any logging starts
    lines = [line for line in out.stderr.splitlines() if line.strip() and "incubator modules" not in line
             and not re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", line)]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"error: cannot read the lake {lake}: ") and "the lake is damaged" in lines[0]
    assert "_delta_log" in (tmp_path / "logs" / "spark-jvm.log").read_text()


def test_status_shows_the_untiered_tail_and_why_it_waits(tmp_path: Path, store: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\n")  # tierSealIdleMs: 10 min
    result = _lakemq("tier", "status", "-c", str(conf), "--data-dir", str(store), "--lake", str(tmp_path / "lake"))
    assert result.exit_code == 0, result.output
    files = sorted((store / "commitlog").iterdir())
    tail = re.search(r"untiered tail: ([\d,]+) bytes, ([\d,]+) messages past the lake's end \(0 to (\d+)\)",
                     result.output)
    assert tail, result.output
    assert int(tail[2].replace(",", "")) == 300 and int(tail[1].replace(",", "")) == int(tail[3]) > 0
    last = files[-1].name
    assert re.search(rf"not yet in the lake: [\d,]+ bytes \([\d,]+ messages\) in {last} wait for the file to fill "
                     r"or to idle for tierSealIdleMs \(10 min, at \d\d:\d\d:\d\d\)", result.output), result.output
    # the full files wait for nothing but the next run
    assert f"in {files[0].name} are sealed by the next run (the file is full)" in result.output
    # progress in a pipe: timestamped lines
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d reading the manifest and the Delta log$", result.output, re.MULTILINE)


def test_tables_never_cut_or_split_an_offset_in_80_columns() -> None:
    rows = [(f"[{a}, {a + 1073741824})", f"{a:020d}", "verified", "265", "12", "present")
            for a in (0, 1073741824, 21474836480)]
    out = io.StringIO()
    print_rows(("range", "segment", "state", "rows", "delta version", "local file"), rows,
               console=Console(file=out, width=80))
    text = out.getvalue()
    for row in rows:
        for value in row[:2]:
            assert any(value in line for line in text.splitlines()), (value, text)


def test_progress_in_a_pipe_is_timestamped_lines_as_they_happen() -> None:
    out = io.StringIO()
    now = [0.0]
    with JobProgress(Console(file=out), interval_s=5.0, clock=lambda: now[0]) as progress:
        assert not progress.live
        progress.phase("starting Spark")
        assert out.getvalue().endswith(" starting Spark\n")  # written at once, not at exit
        for done in range(1, 11):
            now[0] += 1.0
            progress.step("commit", done, 10)
    lines = out.getvalue().splitlines()
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", line) for line in lines)
    assert [line.split(" ", 2)[2] for line in lines] == ["starting Spark", "commit 1/10", "commit 6/10",
                                                         "commit 10/10"]


def test_the_consoles_tiering_view_counts_the_untiered_tail(tmp_path: Path, store: Path) -> None:
    from lakemq.console.lake_view import broker_tiering

    view = broker_tiering(LakeLocation.of(str(tmp_path / "lake")), "broker-a", str(store))
    assert view.tail is not None and view.tail.messages == 300 and view.tail.lake_end == 0
    assert view.tail.bytes == view.tail.store_end > 0
    assert broker_tiering(LakeLocation.of(str(tmp_path / "lake")), "broker-a", None).tail is None
