"""The fuzz targets (fuzz/, docs/FUZZING.md) in the suite: every seed and every input a fuzz run
once crashed on (tests/fuzz/regressions/TARGET) goes through its target with no error but the
decoder's documented ones, and each target runs RUNS inputs under atheris, a few seconds (with
the tree's compiled modules, not the instrumented build scripts/fuzz.sh makes)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.targets import TARGETS, load, run_one

ROOT = Path(__file__).resolve().parents[2]
# A count, not a time: on a busy machine the first input (which imports the target) can take
# seconds. MAX_SECONDS only bounds a run that has gone wrong.
RUNS = 2000
MAX_SECONDS = 120

pytestmark = pytest.mark.fuzz


def _inputs(target: str) -> list[Path]:
    folders = (ROOT / "fuzz" / "corpus" / target, Path(__file__).parent / "regressions" / target)
    return sorted(path for folder in folders if folder.is_dir() for path in folder.iterdir())


@pytest.mark.parametrize("target", TARGETS)
def test_corpus_and_regressions_replay(target: str) -> None:
    module = load(target)
    inputs = _inputs(target)
    assert inputs, f"no seeds for {target}"
    for path in inputs:
        run_one(module, path.read_bytes())


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed (dev dependency)")
@pytest.mark.parametrize("target", TARGETS)
def test_short_atheris_run(target: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fuzz.run", target, str(MAX_SECONDS), "--work", str(tmp_path), f"-runs={RUNS}"],
        check=False, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=2 * MAX_SECONDS)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert "Done " in log and "stat::number_of_executed_units" in log, log[-2000:]
    executed = int(log.split("stat::number_of_executed_units:")[1].split()[0])
    assert executed >= RUNS, log[-2000:]
