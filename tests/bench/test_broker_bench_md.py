"""bench/broker_bench.py rewrites only its own section of BENCHMARKS.md."""

from __future__ import annotations

from bench.broker_bench import SECTION, replace_section


def test_replaces_only_its_section_and_appends_when_missing() -> None:
    body = f"{SECTION}\n\nnew figures\n"
    before = f"# Benchmarks\n\n## Peers\n\npeer table\n\n{SECTION}\n\nold figures\n\n## Store (x)\n\nstore table\n"
    after = replace_section(before, body)
    assert after == f"# Benchmarks\n\n## Peers\n\npeer table\n\n{SECTION}\n\nnew figures\n\n## Store (x)\n\nstore table\n"
    last = replace_section(f"# Benchmarks\n\n{SECTION}\n\n### sub\n\nold\n", body)
    assert last == f"# Benchmarks\n\n{body}"
    assert replace_section("# Benchmarks\n\n## Peers\n\np\n", body) == f"# Benchmarks\n\n## Peers\n\np\n\n{body}"
