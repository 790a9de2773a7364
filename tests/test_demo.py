"""The README's main job, run as a user runs it: ``lakemq demo`` in a subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lakemq.launcher import lakemq_command

# Spark runs in a child process (the lake jobs).
pytestmark = pytest.mark.spark


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    proc = subprocess.run(lakemq_command("demo", "--work-dir", str(work), "--messages", "400", "--master", "local[2]"),
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "produced 400, consumed 400, 400 rows in the lake" in proc.stdout
    assert "order-42" in proc.stdout  # the key look-up found its row
    assert (work / "lake" / "messages" / "_delta_log").is_dir()
