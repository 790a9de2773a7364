"""The README's main job, run as a user runs it: ``lakemq demo`` in a subprocess. Its output
is clean (no Spark console lines, no logging errors at exit), every progress bar reaches its
total, ids are whole in a pipe, and ``--keep`` leaves a lake that ``lakemq sql`` reads, with
every SQL example of the README and docs/."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lakemq.launcher import lakemq_command
from tests.cli_in_process import lakemq_in_process, stderr_lines


@pytest.mark.slow
def test_demo_runs_end_to_end_and_keeps_its_lake(spark: Any, tmp_path: Path) -> None:
    kept = tmp_path / "kept-lake"
    proc = subprocess.run(lakemq_command("demo", "--keep", str(kept), "--messages", "400", "--master", "local[2]"), check=False,
                          capture_output=True, text=True, timeout=400)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert f"produced 400, consumed 400, 400 rows in the lake at {kept}" in proc.stdout
    assert "order-42" in proc.stdout  # the key look-up found its row
    for noise in ("WARN", "Logging error", "Traceback", "log4j", "incubator"):
        assert noise not in output, output[-3000:]
    bars = re.findall(r"^(\w+)\s+\S+\s+(\d+)/(\d+)", proc.stdout, re.MULTILINE)
    assert {step for step, _, _ in bars} >= {"produce", "consume", "write", "commit", "verify"}
    assert all(done == total for _, done, total in bars), bars
    assert (kept / "messages" / "_delta_log").is_dir()
    assert re.search(r"sql --lake \S*kept-lake", proc.stdout)
    # The printed query, in this process on the test's session (tests/cli_in_process.py).
    query = lakemq_in_process(spark, "sql", "--lake", str(kept), "SELECT count(*) AS n FROM messages")
    assert query.returncode == 0, query.stderr[-3000:]
    assert re.search(r"\b400\b", query.stdout)
    # The look-up's ids, whole in the pipe's 80 columns (never cut with "…" or folded).
    ids = lakemq_in_process(spark, "sql", "--lake", str(kept), "SELECT msg_id FROM messages WHERE keys LIKE '%order-42%'")
    found = re.findall(r"\b[0-9A-F]{32}\b", ids.stdout)
    assert found and all(msg_id in proc.stdout for msg_id in found), proc.stdout[-3000:]
    # Every `lakemq sql --lake /data/lake "..."` example of the docs works on the demo's lake.
    docs = Path(__file__).resolve().parents[1]
    examples = [q for doc in [docs / "README.md", *sorted((docs / "docs").glob("*.md"))]
                for q in re.findall(r'lakemq sql --lake /data/lake "([^"]+)"', doc.read_text())]
    assert len(examples) >= 5 and any("VERSION AS OF" in q for q in examples)
    ran = lakemq_in_process(spark, "sql", "--lake", str(kept), input="".join(f"{q};\n" for q in examples))
    assert ran.returncode == 0 and not stderr_lines(ran.stderr), ran.stderr[-3000:]
