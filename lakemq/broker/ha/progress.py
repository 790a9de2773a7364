"""What a master knows of its slaves: every HA link, the offset each slave acknowledged, and
how far behind each is in bytes and in seconds.

Updated on the broker's event loop only; metrics scrapes and admin requests read it from
other threads, where they see whole ints (a link's fields are single attribute writes).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ReplicationProgress", "SlaveLink"]

log = logging.getLogger(__name__)

# Samples of (time, master max offset) kept for the lag in seconds; past this many, every
# other one is dropped: the span stays, the resolution halves.
_MAX_SAMPLES = 4096


@dataclass(eq=False, slots=True)
class SlaveLink:
    """One slave's HA connection, as the master sees it."""

    addr: str  # the slave's end of the connection, ip:port
    request_offset: int = -1  # its first report: where it asked the bytes from (-1: none yet)
    ack_offset: int = -1  # its latest report: everything below is in its CommitLog

    @property
    def reported(self) -> bool:
        return self.request_offset >= 0


class ReplicationProgress:
    """The master's table of slave links. ``acked_offset`` is the highest offset any slave
    acknowledged (RocketMQ's push2SlaveMaxOffset: it never goes back); ``ack_listeners`` are
    told when it grows, ``connection_listeners`` how many slaves are connected when that
    changes, on the loop."""

    def __init__(self, max_offset: Callable[[], int]) -> None:
        self._max_offset = max_offset
        self.links: list[SlaveLink] = []
        self.acked_offset = 0
        self.ack_listeners: list[Callable[[int], None]] = []
        self.connection_listeners: list[Callable[[int], None]] = []
        # (monotonic time, master max offset) whenever the max grew: when the oldest byte a
        # slave lacks was written, to within the sampling.
        self._sample_times: list[float] = []
        self._sample_offsets: list[int] = []

    # -- links -------------------------------------------------------------------------

    def link_opened(self, addr: str) -> SlaveLink:
        link = SlaveLink(addr)
        self.links = [*self.links, link]  # replaced, never mutated: readers on other threads
        return link

    def link_closed(self, link: SlaveLink) -> None:
        self.links = [x for x in self.links if x is not link]
        if link.reported:
            self._tell(self.connection_listeners, self.connected)

    def on_report(self, link: SlaveLink, offset: int) -> None:
        first = link.request_offset < 0
        if first:
            link.request_offset = offset
        link.ack_offset = offset
        if offset > self.acked_offset:
            self.acked_offset = offset
            self._tell(self.ack_listeners, offset)
        if first:
            self._tell(self.connection_listeners, self.connected)
        self._prune()

    @staticmethod
    def _tell(listeners: list[Callable[[int], None]], value: int) -> None:
        for listener in listeners:
            try:
                listener(value)
            except Exception:  # one broken listener must not stop the others
                log.exception("replication listener failed")

    @property
    def connected(self) -> int:
        """Slaves whose link has reported at least once."""
        return sum(1 for link in self.links if link.reported)

    def slave_ok(self, put_end: int, fall_behind_max: int) -> bool:
        """RocketMQ's isSlaveOK: a slave is connected and less than ``fall_behind_max`` bytes
        behind ``put_end``; otherwise a SYNC_MASTER send is SLAVE_NOT_AVAILABLE at once."""
        return self.connected > 0 and put_end - self.acked_offset < fall_behind_max

    # -- lag ---------------------------------------------------------------------------

    def sample(self) -> None:
        """Note the master's max offset now (called whenever new bytes may have arrived)."""
        offset = self._max_offset()
        offsets = self._sample_offsets
        if offsets and offset <= offsets[-1]:
            return
        offsets.append(offset)
        self._sample_times.append(time.monotonic())
        if len(offsets) > _MAX_SAMPLES:
            del offsets[1::2]
            del self._sample_times[1::2]

    def _prune(self) -> None:
        """Drop the samples every connected slave is past (nothing to date any more)."""
        acked = [link.ack_offset for link in self.links if link.reported]
        if not acked:
            return
        keep_from = bisect.bisect_right(self._sample_offsets, min(acked))
        if keep_from > 0:
            del self._sample_offsets[:keep_from]
            del self._sample_times[:keep_from]

    def lag_bytes(self, link: SlaveLink) -> int:
        return max(0, self._max_offset() - max(link.ack_offset, 0))

    def lag_seconds(self, link: SlaveLink) -> float:
        """Age of the oldest byte the slave has not acknowledged (0 when it has them all)."""
        ack = max(link.ack_offset, 0)
        if ack >= self._max_offset():
            return 0.0
        times, offsets = list(self._sample_times), list(self._sample_offsets)
        # The first sample that saw the max past the ack: that byte existed by then.
        i = bisect.bisect_right(offsets, ack)
        if i >= len(times) or i >= len(offsets):
            return 0.0  # written after the last sample: younger than any sampling interval
        return max(0.0, time.monotonic() - times[i])

    def snapshot(self) -> list[tuple[SlaveLink, int, float]]:
        """(link, lag bytes, lag seconds) of every link that reported, oldest link first."""
        return [(link, self.lag_bytes(link), self.lag_seconds(link)) for link in self.links if link.reported]
