"""Test aid: a stepped wall clock for a lakemq process under test (tests/faults/test_clock_step.py).

With this directory on PYTHONPATH and ``LAKEMQ_TEST_CLOCK_FILE=<path>`` in its environment, a
Python process's ``time.time()`` and ``time.time_ns()`` add the offset in milliseconds that the
file holds (re-read every 20 ms), as an NTP step or an operator's ``date -s`` moves the system
clock. The monotonic clock is left alone, as the kernel leaves it.

libfaketime would do this from outside, but Debian's build (0.9.10) breaks Python there: with
the monotonic clock left alone ``time.sleep`` fails with EINVAL, and with it faked
``threading.Event.wait`` never returns.
"""

from __future__ import annotations

import os
import time

_PATH = os.environ.get("LAKEMQ_TEST_CLOCK_FILE")
_REREAD_S = 0.02

if _PATH:
    _real_time_ns = time.time_ns
    _offset = {"ns": 0, "read_at": float("-inf")}

    def _offset_ns() -> int:
        now = time.monotonic()
        if now - _offset["read_at"] >= _REREAD_S:
            try:
                with open(_PATH, encoding="ascii") as f:
                    _offset["ns"] = int(f.read()) * 1_000_000
            except (OSError, ValueError):
                pass  # mid-rewrite: keep the last offset
            _offset["read_at"] = now
        return int(_offset["ns"])

    def _stepped_time_ns() -> int:
        return _real_time_ns() + _offset_ns()

    def _stepped_time() -> float:
        return _stepped_time_ns() / 1e9

    time.time_ns = _stepped_time_ns
    time.time = _stepped_time
