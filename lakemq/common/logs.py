"""Logging set-up for lakemq processes: a rotating file per process.

Servers log what clients send (topics, groups, client ids, remarks). :class:`EscapingFormatter`
writes every control character of a message as an escape, so a client can neither forge a
log line (``\\n``) nor drive a terminal (``\\x1b``); :class:`LogLimiter` bounds how many lines a
flood of bad requests can write.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["EscapingFormatter", "LogLimiter", "close_logging", "default_log_dir", "escape_control", "setup_logging"]

# C0 controls, DEL, C1 controls and the Unicode line and paragraph separators.
_CONTROL = [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _CONTROL}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
_TRACEBACK_ESCAPES = {c: e for c, e in _ESCAPES.items() if c != ord("\n")}


def escape_control(text: str) -> str:
    """``text`` with each control character written as a backslash escape (one line)."""
    return text.translate(_ESCAPES)


class EscapingFormatter(logging.Formatter):
    """A record's message becomes one line, its control characters escaped; a traceback keeps
    its line breaks and loses its other control characters."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_control(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return super().formatException(ei).translate(_TRACEBACK_ESCAPES)


class LogLimiter:
    """Lets at most ``burst`` records through per ``period_s`` seconds; the first record of a
    later period says how many were held back. Safe from any thread."""

    def __init__(self, burst: int = 20, period_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.period_s = period_s
        self._clock = clock
        self._lock = threading.Lock()
        self._window_start = clock()
        self._count = 0
        self._dropped = 0

    def log(self, logger: logging.Logger, level: int, msg: str, *args: object, exc_info: bool = False) -> bool:
        """Log unless this period's budget is spent; True if logged."""
        if not logger.isEnabledFor(level):
            return False
        with self._lock:
            now = self._clock()
            dropped = 0
            if now - self._window_start >= self.period_s:
                dropped, self._dropped = self._dropped, 0
                self._window_start, self._count = now, 0
            if self._count >= self.burst:
                self._dropped += 1
                return False
            self._count += 1
        if dropped:
            msg += " (%d more like this not logged in the previous %.0f s)"
            args = (*args, dropped, self.period_s)
        logger.log(level, msg, *args, exc_info=exc_info)
        return True


def default_log_dir() -> Path:
    return Path(os.environ.get("LAKEMQ_LOG_DIR", Path.home() / "logs" / "lakemq"))


def setup_logging(name: str, log_dir: str | Path | None = None, level: str = "INFO") -> Path:
    """Send the process's log records to ``{log_dir}/{name}.log``; returns that path."""
    directory = Path(log_dir) if log_dir else default_log_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.log"
    root = logging.getLogger()
    root.setLevel(level)
    for handler in list(root.handlers):
        if getattr(handler, "_lakemq", False):
            root.removeHandler(handler)
    file_handler = logging.handlers.RotatingFileHandler(path, maxBytes=64 << 20, backupCount=5)
    file_handler.setFormatter(
        EscapingFormatter("%(asctime)s %(levelname)s [%(threadName)s] %(name)s - %(message)s")
    )
    file_handler._lakemq = True  # type: ignore[attr-defined]
    root.addHandler(file_handler)
    return path


def close_logging() -> None:
    """Close the log file setup_logging opened, before its directory goes: a record logged
    later (py4j closes its connections at interpreter exit) then finds no file to reopen."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_lakemq", False):
            root.removeHandler(handler)
            handler.close()
