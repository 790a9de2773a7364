"""The POP invisibility state, in memory, and the journal records that change it.

Per ``(group, topic, queueId)`` (``topic`` may be a pop retry topic): ``next``, the offset the
next pop reads from, and the deliveries in flight, by queue offset. A delivery in flight is
hidden until its deadline (``pop_time + invisible_ms``); it ends with an ack, a revive (copied
to the pop retry topic or the DLQ), or a forward to the DLQ. FIFO deliveries are never
revived: an expired one is popped again in place, which keeps a message group's order.

A revive is journaled in three steps: a ``rev`` record (the deliveries it is about to end and
where each target queue ended), the copies, then their ``done`` records and an ``end``. A
``rev`` without its ``end`` (a crash in between) stays in :attr:`PopState.reviving` until the
service settles it from the copies it finds.

Every change is first a journal record (lakemq.broker.pop.journal, the revive topic in the
CommitLog), then applied here by :meth:`PopState.apply`; replaying the journal over the last
snapshot rebuilds the same state after a restart or a kill -9.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from lakemq.errors import CorruptFileError

__all__ = ["InFlight", "PopState", "QueueKey", "QueueState"]

QueueKey = tuple[str, str, int]  # group, topic, queue id


@dataclass(slots=True)
class InFlight:
    pop_time: int
    invisible_ms: int
    attempt: int  # 1 for a first delivery
    commit_log_offset: int
    ck_offset: int  # the first offset of the pop that delivered it (for its handle)
    fifo: bool

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms


@dataclass(slots=True)
class QueueState:
    next: int
    inflight: dict[int, InFlight] = field(default_factory=dict)

    def floor(self) -> int:
        """The lowest offset not yet done: what the group's consumer offset may say."""
        return min(self.inflight, default=self.next)

    def blocked_fifo(self, now: int) -> bool:
        """A FIFO delivery of this queue is still hidden: nothing more may go out."""
        return any(e.fifo and e.deadline > now for e in self.inflight.values())

    def expired_fifo(self, now: int) -> list[int]:
        return sorted(o for o, e in self.inflight.items() if e.fifo and e.deadline <= now)


class PopState:
    def __init__(self) -> None:
        self.queues: dict[QueueKey, QueueState] = {}
        self.reviving: dict[int, dict[str, Any]] = {}  # revive id -> its rev record, until its end
        # (deadline, key, offset, pop_time) of non-FIFO deliveries; stale entries are skipped.
        self._deadlines: list[tuple[int, QueueKey, int, int]] = []

    def queue(self, key: QueueKey) -> QueueState | None:
        return self.queues.get(key)

    def start_queue(self, key: QueueKey, next_offset: int) -> QueueState:
        qs = self.queues.get(key)
        if qs is None:
            qs = self.queues[key] = QueueState(next_offset)
        return qs

    def find(self, key: QueueKey, offset: int) -> InFlight | None:
        qs = self.queues.get(key)
        return qs.inflight.get(offset) if qs is not None else None

    # -- journal records -------------------------------------------------------------------

    def apply(self, record: dict[str, Any]) -> None:
        """Apply one journal record (its JSON object); raises CorruptFileError if malformed."""
        try:
            kind = record["k"]
            if kind == "rev":
                self.reviving[int(record["x"])] = record
                return
            if kind == "end":
                self.reviving.pop(int(record["x"]), None)
                return
            group = record["g"]
            if kind == "pop":
                pop_time, invisible, fifo = int(record["p"]), int(record["i"]), bool(record["f"])
                for topic, qid, nxt, entries in record["c"]:
                    key = (group, topic, int(qid))
                    qs = self.start_queue(key, int(nxt))
                    qs.next = max(qs.next, int(nxt))
                    ck_offset = min(int(e[0]) for e in entries) if entries else 0
                    for offset, clo, attempt in entries:
                        self._hide(key, qs, int(offset), InFlight(pop_time, invisible, int(attempt), int(clo),
                                                                  ck_offset, fifo))
            elif kind == "chg":
                key = (group, record["t"], int(record["q"]))
                entry = self.find(key, int(record["o"]))
                if entry is not None:
                    entry.pop_time, entry.invisible_ms = int(record["p"]), int(record["i"])
                    if not entry.fifo:
                        heapq.heappush(self._deadlines, (entry.deadline, key, int(record["o"]), entry.pop_time))
            elif kind == "done":
                done = self.queues.get((group, record["t"], int(record["q"])))
                if done is not None:
                    for offset in record["o"]:
                        done.inflight.pop(int(offset), None)
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptFileError(f"bad POP journal record {record!r}: {exc}") from exc

    def _hide(self, key: QueueKey, qs: QueueState, offset: int, entry: InFlight) -> None:
        qs.inflight[offset] = entry
        if not entry.fifo:
            heapq.heappush(self._deadlines, (entry.deadline, key, offset, entry.pop_time))

    def due(self, now: int, limit: int) -> list[tuple[QueueKey, int, InFlight]]:
        """Up to ``limit`` non-FIFO deliveries whose deadline passed, earliest first."""
        out: list[tuple[QueueKey, int, InFlight]] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now and len(out) < limit:
            _deadline, key, offset, pop_time = heapq.heappop(heap)
            entry = self.find(key, offset)
            if entry is not None and entry.pop_time == pop_time:
                out.append((key, offset, entry))
        return out

    def due_again(self, key: QueueKey, offset: int, entry: InFlight) -> None:
        """A delivery :meth:`due` gave out that could not be revived: due at the next look."""
        heapq.heappush(self._deadlines, (entry.deadline, key, offset, entry.pop_time))

    def next_deadline(self) -> int | None:
        """The earliest deadline of a non-FIFO delivery (perhaps of one already over)."""
        return self._deadlines[0][0] if self._deadlines else None

    # -- snapshot --------------------------------------------------------------------------

    def encode(self) -> list[dict[str, Any]]:
        return [
            {"g": g, "t": t, "q": q, "n": qs.next,
             "f": [[o, e.pop_time, e.invisible_ms, e.attempt, e.commit_log_offset, e.ck_offset, e.fifo]
                   for o, e in sorted(qs.inflight.items())]}
            for (g, t, q), qs in self.queues.items()
        ]

    @classmethod
    def decode(cls, queues: list[dict[str, Any]]) -> PopState:
        state = cls()
        try:
            for item in queues:
                key = (str(item["g"]), str(item["t"]), int(item["q"]))
                qs = state.start_queue(key, int(item["n"]))
                for o, pop_time, invisible, attempt, clo, ck_offset, fifo in item["f"]:
                    state._hide(key, qs, int(o), InFlight(int(pop_time), int(invisible), int(attempt), int(clo),
                                                          int(ck_offset), bool(fifo)))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptFileError(f"bad POP snapshot: {exc}") from exc
        return state
