"""What a lake command is doing while it works, shown as it happens.

Spark takes 10-90 s to start and a tiering pass minutes to run; a silent command looks hung.
Every lake command reports through one :class:`JobProgress`: phases (``starting Spark``,
``reading the lake's tables``) and counted steps (``commit 3/5``). On a terminal that is rich's
live progress display; when stderr is not a terminal (a pipe, CI, an Airflow log) each phase
and step is a plain timestamped line written when it happens (a counted step at most every
``interval_s`` and when it completes), never saved up for the exit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from rich.console import Console
from rich.filesize import decimal
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

__all__ = ["JobProgress"]


def _amount(done: int, total: int | None, unit: str) -> str:
    if unit == "bytes":
        return f"{decimal(done)}/{decimal(total)}" if total else decimal(done)
    return f"{done}/{total}" if total is not None else str(done)


class JobProgress:
    """Progress of one command on stderr (rich on a terminal, timestamped lines otherwise)."""

    def __init__(self, console: Console | None = None, *, interval_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self.interval_s = interval_s
        self._clock = clock
        self._bar: Progress | None = None
        self._phase: TaskID | None = None
        self._steps: dict[str, TaskID] = {}
        self._said: dict[str, tuple[float, int]] = {}  # step -> (when, done) last written as a line

    def __enter__(self) -> Self:
        if self.live:
            self._bar = Progress(TextColumn("{task.description:<10}"), BarColumn(),
                                 TextColumn("{task.fields[amount]}"), TimeElapsedColumn(), console=self.console)
            self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._end_phase()
        if self._bar is not None:
            self._bar.stop()

    def phase(self, text: str) -> None:
        """A stretch of work without a count (``starting Spark``); it ends when the next one
        starts, a counted step reports, or the command ends."""
        self._end_phase()
        if self._bar is None:
            self._line(text)
            return
        self._phase = self._bar.add_task(text, total=None, amount="")

    def step(self, name: str, done: int, total: int | None, unit: str = "") -> None:
        """``done`` of ``total`` items (or bytes, with ``unit="bytes"``) of step ``name``."""
        self._end_phase()
        if self._bar is not None:
            fields: dict[str, Any] = {"amount": _amount(done, total, unit)}
            if name not in self._steps:
                self._steps[name] = self._bar.add_task(name, total=total, **fields)
            self._bar.update(self._steps[name], completed=done, total=total, **fields)
            return
        now = self._clock()
        said = self._said.get(name)
        if said is None or (done != said[1] and (done == total or now - said[0] >= self.interval_s)):
            self._said[name] = (now, done)
            self._line(f"{name} {_amount(done, total, unit)}")

    def counter(self, name: str, unit: str = "") -> Callable[[int, int], None]:
        """``step`` for a job's ``progress(done, total)`` callback."""
        return lambda done, total: self.step(name, done, total, unit)

    def _end_phase(self) -> None:
        if self._phase is not None and self._bar is not None:
            self._bar.update(self._phase, total=1, completed=1)
        self._phase = None

    def _line(self, text: str) -> None:
        self.console.out(f"{datetime.now():%Y-%m-%d %H:%M:%S} {text}", highlight=False)
        self.console.file.flush()
