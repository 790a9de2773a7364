"""Every benchmark script rewrites only its own section of BENCHMARKS.md (bench/markdown.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.markdown import replace_section, replace_section_text

SECTION = "## Broker (bench/broker_bench.py)"


def test_replaces_only_its_section_and_appends_when_missing() -> None:
    body = f"{SECTION}\n\nnew figures\n"
    before = f"# Benchmarks\n\n## Peers\n\npeer table\n\n{SECTION}\n\nold figures\n\n## Store (x)\n\nstore table\n"
    after = replace_section_text(before, body)
    assert after == f"# Benchmarks\n\n## Peers\n\npeer table\n\n{SECTION}\n\nnew figures\n\n## Store (x)\n\nstore table\n"
    last = replace_section_text(f"# Benchmarks\n\n{SECTION}\n\n### sub\n\nold\n", body)
    assert last == f"# Benchmarks\n\n{body}"
    assert replace_section_text("# Benchmarks\n\n## Peers\n\np\n", body) == f"# Benchmarks\n\n## Peers\n\np\n\n{body}"


def test_a_section_needs_its_heading(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        replace_section_text("# Benchmarks\n", "no heading\n")
    doc = tmp_path / "BENCHMARKS.md"
    replace_section(f"{SECTION}\n\nfigures\n", doc)
    assert doc.read_text() == f"# Benchmarks\n\n{SECTION}\n\nfigures\n"
