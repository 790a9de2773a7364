"""BENCHMARKS.md is shared by every benchmark script: each rewrites only its own section."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["BENCHMARKS", "replace_section", "replace_section_text"]

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def replace_section_text(text: str, section: str) -> str:
    """``text`` with the section that has ``section``'s "## " heading replaced by ``section``
    (up to the next "## " heading), or ``section`` appended; every other section is kept."""
    heading = section.splitlines()[0].rstrip()
    if not heading.startswith("## "):
        raise ValueError(f"a section starts with a '## ' heading, not {heading!r}")
    pattern = re.compile(rf"^{re.escape(heading)}[ \t]*$.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section.rstrip("\n") + "\n\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    return text.rstrip("\n") + "\n"


def replace_section(section: str, document: Path = BENCHMARKS) -> None:
    """Rewrite ``section`` in ``document`` (created when missing)."""
    text = document.read_text() if document.exists() else "# Benchmarks\n"
    document.write_text(replace_section_text(text, section))
