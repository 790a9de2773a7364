"""``lakemq tier run`` and ``tier status`` as a user runs them: the store is found as the broker
finds it (a missing one is an error naming the path), hot retention follows the broker's own
rules (nothing goes while the broker's conf has no lakeUri for this lake, unless asked; never
a file younger than fileReservedTime), and the progress and status say what is true."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from lake_helpers import store_writer, user_messages

from lakemq.cli import main
from lakemq.cli.broker_cmds import load_broker_configs
from lakemq.jobs.reindex import ReindexSettings
from lakemq.jobs.tier_steps import TierSettings
from lakemq.store.config import DEFAULT_STORE_ROOT
from lakemq.tiering.seal import commitlog_files


def _tier(*args: str) -> Any:
    return CliRunner().invoke(main, ["tier", *args], catch_exceptions=False)


@pytest.fixture(autouse=True)
def _logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEMQ_LOG_DIR", str(tmp_path / "logs"))


def test_broker_and_jobs_resolve_the_store_alike(tmp_path: Path) -> None:
    pinned = tmp_path / "pinned"
    conf = tmp_path / "pinned.conf"
    conf.write_text(f"storePathRootDir={pinned}\n")
    bare = tmp_path / "bare.conf"
    bare.write_text("brokerName=broker-a\n")
    for conf_path, data_dir, want in ((conf, None, pinned), (conf, tmp_path / "d", tmp_path / "d"),
                                      (bare, tmp_path / "d", tmp_path / "d"), (bare, None, Path(DEFAULT_STORE_ROOT))):
        _, store, _ = load_broker_configs(str(conf_path), data_dir=None if data_dir is None else str(data_dir))
        tier = TierSettings.from_mapping({"broker_conf": str(conf_path), "store_dir": data_dir})
        reindex = ReindexSettings.from_mapping({"broker_conf": str(conf_path), "store_dir": data_dir})
        assert Path(store.store_path_root_dir) == tier.store_dir == reindex.config.root_dir == want.resolve()


def test_a_missing_store_is_an_error_naming_the_path(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\n")
    missing = tmp_path / "not-there"
    for command in ("run", "status"):
        result = CliRunner().invoke(main, ["tier", command, "-c", str(conf), "--data-dir", str(missing),
                                           "--lake", str(tmp_path / "lake")])
        assert result.exit_code == 1, result.output
        assert f"no broker store at {missing}" in result.output and "--data-dir" in result.output
    (missing / "config").mkdir(parents=True)  # a directory, but no broker's store
    result = CliRunner().invoke(main, ["tier", "status", "-c", str(conf), "--data-dir", str(missing)])
    assert result.exit_code == 1 and "holds no commitlog/" in result.output


def test_tier_run_keeps_hot_files_as_the_broker_would_and_says_so(spark: Any, tmp_path: Path) -> None:
    data, lake = tmp_path / "data", tmp_path / "lake"
    store_writer(data)(user_messages(1200))
    files = [f.path.name for f in commitlog_files(data)]
    assert len(files) >= 4
    sealed = len(files) - 1  # the last file is sealed too (idle), but never deleted
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\nfileReservedTime=72\ntierSealIdleMs=1\n")  # no lakeUri
    common = ["-c", str(conf), "--data-dir", str(data), "--lake", str(lake)]

    first = _tier("run", *common, "--no-maintain")
    assert first.exit_code == 0, first.output
    assert f"deleted 0 local file(s); kept {sealed} verified local file(s): the broker's conf has no lakeUri" \
        in first.output
    assert [f.path.name for f in commitlog_files(data)] == files
    ranges = len(files)
    assert "joining the running Spark session" in first.output  # what it does while it starts
    for step in ("write", "commit", "verify"):
        assert f"{ranges}/{ranges}" in _bar_line(first.output, step), first.output

    asked = _tier("run", *common, "--no-maintain", "--delete-hot-files-without-cold-reads")
    assert asked.exit_code == 0, asked.output
    assert f"deleted 0 local file(s); kept {sealed} verified local file(s): written less than fileReservedTime " \
           "(72 h) ago" in asked.output

    conf.write_text(f"brokerName=broker-a\nfileReservedTime=0\ntierSealIdleMs=1\nlakeUri={lake}\n")
    reads = _tier("run", *common, "--no-maintain")
    assert reads.exit_code == 0, reads.output
    assert f"deleted {sealed} local file(s)" in reads.output
    assert [f.path.name for f in commitlog_files(data)] == files[-1:]

    status = _tier("status", *common)
    assert status.exit_code == 0, status.output
    # 80 columns hold no whole row: one "column: value" line per field, offsets never split
    states = [line.split(": ", 1)[1] for line in status.output.splitlines() if line.strip().startswith("state: ")]
    assert states == ["verified"] * ranges  # every range the manifest holds, local file or not
    local = [line.split(": ", 1)[1] for line in status.output.splitlines() if line.strip().startswith("local file: ")]
    assert local.count("deleted") == sealed and local.count("present") == 1
    assert "local CommitLog files: 1; " in status.output and f"manifest ranges: {ranges}" in status.output
    assert "untiered tail: 0 bytes, 0 messages" in status.output

    # Bytes that cannot be tiered yet: the run says which and until when, not just "0 ranges".
    store_writer(data)(user_messages(3))
    conf.write_text(f"brokerName=broker-a\nfileReservedTime=0\nlakeUri={lake}\n")  # tierSealIdleMs: 10 min
    waiting = _tier("run", *common, "--no-maintain")
    assert waiting.exit_code == 0, waiting.output
    assert "committed 0 range(s)" in waiting.output
    assert re.search(rf"not yet in the lake: [\d,]+ bytes \(3 messages\) in {files[-1]} wait for the file to fill or "
                     r"to idle for tierSealIdleMs \(10 min, at \d\d:\d\d:\d\d\)", waiting.output), waiting.output


def _bar_line(output: str, step: str) -> str:
    """The last progress line of ``step`` ("DATE TIME step done/total": stderr is no terminal)."""
    found = [line for line in output.splitlines() if line.split()[2:3] == [step]]
    assert found, f"no {step} bar in:\n{output}"
    return found[-1]
