"""Crash points for fault-injection tests of the tiering job.

With ``LAKEMQ_FAULT_STAGE=<stage>`` in its environment, a process kills itself with SIGKILL when
it reaches that stage, so tests can prove that a re-run converges to exactly one copy of every
row and that no local file goes before the lake holds it. Unset (always, in production) a
crash point is one dictionary look-up. Stages: ``before-write``, ``before-commit``,
``before-manifest``, ``during-retention``.
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point", "STAGES"]

STAGES = ("before-write", "before-commit", "before-manifest", "during-retention")


def crash_point(stage: str) -> None:
    if os.environ.get("LAKEMQ_FAULT_STAGE") == stage:
        os.kill(os.getpid(), signal.SIGKILL)
