"""CPU time of a server's processes from /proc/PID/stat (utime + stime), for the benchmark's
broker CPU per message: what the server spent, whoever drove it and whatever else ran."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["process_cpu_seconds", "process_cpu_split"]

_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_split(pids: Iterable[int]) -> tuple[float, float]:
    """User and system CPU seconds of the live processes ``pids`` (all their threads)."""
    user = system = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # exited: its time is no longer counted anywhere we can read
        fields = stat[stat.rindex(")") + 2:].split()  # after the parenthesised command
        user += int(fields[11])  # utime, stime: fields 14 and 15 of stat
        system += int(fields[12])
    return user / _TICKS, system / _TICKS


def process_cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of the live processes ``pids`` (all their threads)."""
    return sum(process_cpu_split(pids))
