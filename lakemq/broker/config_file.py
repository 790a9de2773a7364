"""Persisted JSON state of the broker (topics, consumer offsets, subscription groups).

Like RocketMQ's ConfigManager: the new content goes to a temporary file, is synced, the old
file becomes ``{file}.bak`` and the temporary file takes its name, then the directory is synced
(lakemq.common.durable), so a crash or a power cut at any point leaves either the old or the
new content readable. Loading falls back to the ``.bak`` copy. Writers of one file take turns:
pool threads persist the same table at once (two heartbeats each creating a group), and the
newest content must also be the last one renamed into place.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from lakemq.common.durable import write_file_durably
from lakemq.errors import CorruptFileError, FrameError
from lakemq.remoting import fastjson

__all__ = ["file_lock", "load_json", "save_json"]

log = logging.getLogger(__name__)

_WRITERS_LOCK = threading.Lock()
_WRITERS: dict[Path, threading.RLock] = {}


def load_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (or its ``.bak``), or None when neither exists. Files an
    Apache RocketMQ broker wrote load too (fastjson's bare integer keys).

    A file that exists but does not parse raises CorruptFileError when no good backup exists:
    starting with an empty offset table would silently rewind every consumer."""
    errors: list[str] = []
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            text = candidate.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CorruptFileError(f"cannot read {candidate}: {exc.strerror}") from exc
        if not text.strip():
            errors.append(f"{candidate} is empty")
            continue
        try:
            data = fastjson.loads(text)  # strict JSON, or what a RocketMQ broker wrote (bare int keys)
        except FrameError as exc:
            errors.append(f"{candidate}: {exc}")
            continue
        if not isinstance(data, dict):
            errors.append(f"{candidate}: not a JSON object")
            continue
        if candidate != path:
            log.warning("loaded %s from its backup %s (%s)", path, candidate, "; ".join(errors))
        return data
    if errors:
        raise CorruptFileError("; ".join(errors))
    return None


def file_lock(path: Path) -> threading.RLock:
    """The lock writers of ``path`` take turns with (re-entrant); a caller holds it from
    encoding to saving so that the newest content is also the last one written."""
    with _WRITERS_LOCK:
        return _WRITERS.setdefault(path.absolute(), threading.RLock())


def save_json(path: Path, data: dict[str, Any]) -> None:
    # Compact: ``indent`` makes json fall back from its C encoder to the pure-Python one, 4-5x
    # slower; at 10,000 topics topics.json took 0.66 s instead of 0.14 s, once per new topic.
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    with file_lock(path):
        write_file_durably(path, text, backup=True)
