"""When ``tier serve`` starts its next pass: ``tierIntervalMs`` is the lake lag it aims for.

A pass commits what the broker had flushed when it began. A record flushed just after that
cut waits for the next pass to begin and then for that pass to end, so passes started one
interval apart give it a lag of the interval plus a pass. To keep every record within the
interval, the next pass begins one expected pass earlier: the expected pass is the longest of
the last few (a pass's cost follows the rows it commits and upkeep, which change slowly, and
the longest covers the odd slow one). A pass longer than that leaves no wait: passes then run
back to back, as they must.
"""

from __future__ import annotations

from collections import deque

__all__ = ["PassSchedule"]

# Passes remembered for the expected pass's length: a minute or more of history at the
# default interval, short enough to follow a change of load.
RECENT_PASSES = 5


class PassSchedule:
    """The wait before each pass, for a target lake lag of ``target_s`` seconds."""

    def __init__(self, target_s: float) -> None:
        if target_s <= 0:
            raise ValueError(f"target lag must be > 0 s, got {target_s}")
        self.target_s = target_s
        self._recent: deque[float] = deque(maxlen=RECENT_PASSES)

    @property
    def expected_pass_s(self) -> float:
        """The longest recent pass (0 before the first)."""
        return max(self._recent, default=0.0)

    def wait_after(self, pass_s: float) -> float:
        """Seconds to wait, after a pass of ``pass_s`` just ended, before the next one begins.

        A record flushed just after this pass's cut is committed when the next pass ends:
        ``pass_s + wait + next pass`` after the cut, which is kept to the target."""
        self._recent.append(pass_s)
        return max(0.0, self.target_s - pass_s - self.expected_pass_s)
