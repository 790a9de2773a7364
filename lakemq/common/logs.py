"""Logging set-up for lakemq processes: a rotating file per process, warnings on stderr."""

from __future__ import annotations

import logging
import logging.handlers
import os
from pathlib import Path

__all__ = ["close_logging", "default_log_dir", "setup_logging"]


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
        logging.Formatter("%(asctime)s %(levelname)s [%(threadName)s] %(name)s - %(message)s")
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
