"""The tree passes its linter (ruff, pinned in pyproject.toml) and the package its type check
(`mypy --strict lakemq`, pyproject's [tool.mypy]): a finding fails the suite where it is made,
not sessions later."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_mypy_strict_on_the_package() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy", "lakemq"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
