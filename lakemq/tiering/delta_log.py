"""A local lake's Delta logs across a power cut.

deltalake writes a commit (a staged file linked or renamed into ``_delta_log``) without
fsyncing it, nor the Parquet files it adds. On a local lake a power cut can then leave the
newest commit empty or torn, and the table unreadable ("no table metadata or protocol found").
So every lakemq writer of a Delta table makes the commit durable at once
(:func:`make_log_durable`), before anything (the manifest, hot retention) counts on it; and a
tier run starts by setting aside a torn commit at the log's end (:func:`repair_torn_log`):
nothing counted on it, its range is committed again. A torn commit before the log's end is
damage, not a cut, and is left for an operator. On an object store a commit is durable once
acknowledged, and neither does anything.
"""

from __future__ import annotations

import json
import logging
import os
import re
from urllib.parse import unquote

from lakemq.errors import LakeError
from lakemq.tiering.lake_fs import LakeLocation

__all__ = ["make_log_durable", "repair_torn_log"]

log = logging.getLogger(__name__)

_COMMIT = re.compile(r"\d{20}\.json")


def _log_dir(lake: LakeLocation, table: str) -> str:
    return os.path.join(lake.table_uri(table), "_delta_log")


def _actions(path: str) -> list[dict[str, object]] | None:
    """The commit's actions, or None when it is empty or torn."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
        actions = [json.loads(line) for line in lines]
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return actions if actions and all(isinstance(a, dict) for a in actions) else None


def make_log_durable(lake: LakeLocation, table: str, *, whole: bool = False) -> None:
    """Fsync the newest commit of ``table``, the data files it adds, the newest checkpoint,
    ``_last_checkpoint`` and their directories (every commit and checkpoint with ``whole``).
    Call it after each deltalake write: the call after the write that made an older
    checkpoint made that one durable, and readers start from the newest."""
    directory = _log_dir(lake, table)
    if not lake.is_local or not os.path.isdir(directory):
        return
    names = sorted(os.listdir(directory))
    commits = [n for n in names if _COMMIT.fullmatch(n)]
    paths: list[str] = []
    for name in commits[-1:]:
        for action in _actions(os.path.join(directory, name)) or []:
            add = action.get("add")
            if isinstance(add, dict) and isinstance(add.get("path"), str):
                paths.append(os.path.join(lake.table_uri(table), unquote(str(add["path"]))))
    chosen = commits if whole else commits[-1:]
    paths += [os.path.join(directory, n) for n in chosen]
    checkpoints = [n for n in names if ".checkpoint" in n]
    if checkpoints and not whole:
        newest = max(n[:20] for n in checkpoints)  # the version: every part of a multi-part one
        checkpoints = [n for n in checkpoints if n.startswith(newest)]
    paths += [os.path.join(directory, n) for n in [*checkpoints, "_last_checkpoint"]]
    lake.make_durable(p for p in paths if os.path.exists(p))


def repair_torn_log(lake: LakeLocation, table: str) -> list[str]:
    """Set aside (under ``{lake}/_torn/{table}``) the commits at the end of ``table``'s log
    that a power cut left empty or torn, and a torn ``_last_checkpoint``; then make the whole
    log durable. Returns the names set aside."""
    directory = _log_dir(lake, table)
    if not lake.is_local or not os.path.isdir(directory):
        return []
    commits = sorted(n for n in os.listdir(directory) if _COMMIT.fullmatch(n))
    torn = []
    while commits and _actions(os.path.join(directory, commits[-1])) is None:
        torn.append(commits.pop())
    damaged = [n for n in commits if _actions(os.path.join(directory, n)) is None]
    if damaged:
        raise LakeError(f"Delta log of {table} has unreadable commits before its end: {', '.join(damaged)}")
    last_checkpoint = os.path.join(directory, "_last_checkpoint")
    if os.path.exists(last_checkpoint) and _actions(last_checkpoint) is None:
        torn.append("_last_checkpoint")
    if torn:
        aside = os.path.join(lake.uri, "_torn", table)
        os.makedirs(aside, exist_ok=True)
        for name in torn:
            os.replace(os.path.join(directory, name), os.path.join(aside, name))
            log.warning("%s: %s was left torn by a power cut; set aside in %s (its range is committed again)",
                        table, name, aside)
    make_log_durable(lake, table, whole=True)
    return torn
