"""One Markdown table row per fuzz run log (what scripts/fuzz.sh printed), for docs/FUZZING.md:
``python -m fuzz.report build/fuzz/logs/*.log``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

_FINAL = re.compile(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)/")
_DONE = re.compile(r"Done (\d+) runs in (\d+) second")
_RATE = re.compile(r"stat::average_exec_per_sec:\s+(\d+)")
_RSS = re.compile(r"stat::peak_rss_mb:\s+(\d+)")


def row(log: Path) -> str:
    text = log.read_text(errors="replace")
    final, done, rate, rss = (pattern.search(text) for pattern in (_FINAL, _DONE, _RATE, _RSS))
    if final is None or done is None:
        failure = "crash" if "Uncaught Python exception" in text else "timeout" if "ALARM" in text else "no result"
        return f"| {log.stem} | {failure}: see {log} | | | | | |"
    runs, cov, ft, corpus = final.groups()
    return (f"| {log.stem} | {int(runs):,} | {done.group(2)} | {rate.group(1) if rate else '?'} | {cov} | {ft} "
            f"| {corpus} | {rss.group(1) if rss else '?'} |")


def main(paths: list[str]) -> None:
    print("| target | executions | seconds | exec/s | cov | ft | corpus | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for path in paths:
        print(row(Path(path)))


if __name__ == "__main__":
    main(sys.argv[1:])
