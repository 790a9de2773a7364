"""``lakemq`` commands run inside the test process, on the test's SparkSession.

A lake command in a process of its own spends 15-30 s of a loaded test machine starting a
driver JVM. The commands take the process's active session when there is one (and leave it
running), so a test that holds the ``spark`` fixture can run the command's own code, options
and output through click's CliRunner instead. Tests that are about the process itself (exit
status and stderr of a real process, being killed, a bare environment) still start one.
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from lakemq.cli import main
from tests.cluster import tier_run_args, write_tier_conf

__all__ = ["lakemq_in_process", "stderr_lines", "tier_run_in_process"]

_PROGRESS_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")


def stderr_lines(stderr: str) -> list[str]:
    """What lakemq and Spark printed on stderr, less the JVM's own start-up notice and the
    progress lines (timestamped: stderr is not a terminal)."""
    return [line for line in stderr.strip().splitlines()
            if not line.startswith("WARNING: Using incubator modules") and not _PROGRESS_LINE.match(line)]


def lakemq_in_process(spark: Any, *args: str, env: Mapping[str, str] | None = None,
                      input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``lakemq ARGS`` on ``spark`` (the active session), as a CompletedProcess: exit status,
    stdout and stderr apart. The command's log file is closed afterwards and every logger gets
    back the handlers it had, so later tests do not log into this test's directory."""
    assert spark is not None, "run in-process commands on the test's session (the spark fixture)"
    before = {id(logger): (list(logger.handlers), logger.level) for logger in _loggers()}
    try:
        result = CliRunner().invoke(main, list(args), env=dict(env or {}), input=input, catch_exceptions=False)
    finally:
        added: set[logging.Handler] = set()
        for logger in _loggers():
            handlers, level = before.get(id(logger), ([], logging.NOTSET))
            added.update(h for h in logger.handlers if h not in handlers)
            logger.handlers[:] = handlers
            logger.setLevel(level)
        for handler in added:
            handler.close()
    return subprocess.CompletedProcess(["lakemq", *args], result.exit_code, result.stdout, result.stderr)


def _loggers() -> list[logging.Logger]:
    """The root logger and every named one created so far."""
    named = logging.Logger.manager.loggerDict.values()
    return [logging.getLogger(), *(v for v in named if isinstance(v, logging.Logger))]


def tier_run_in_process(spark: Any, root: Path, store: Path, lake: Path, broker: str, *options: str,
                        broker_conf: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """tests.cluster.tier_run_process's ``lakemq tier run``, in this process on ``spark``."""
    conf = write_tier_conf(root, store, broker, broker_conf)
    return lakemq_in_process(spark, *tier_run_args(conf, lake, *options), env={"LAKEMQ_LOG_DIR": str(root / "tier-logs")})
