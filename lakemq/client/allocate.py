"""Queue allocation strategies for clustering consumers: pure functions.

Every consumer of a group sorts the same queue list and the same consumer id list and runs
the same strategy, so each queue lands on exactly one consumer without any coordination.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from lakemq.common.message_queue import MessageQueue

__all__ = ["STRATEGIES", "AllocateStrategy", "allocate_averagely", "allocate_averagely_by_circle"]


class AllocateStrategy(Protocol):
    def __call__(
        self, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]: ...


def _index(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> int:
    if not current_cid:
        raise ValueError("current consumer id is empty")
    if current_cid not in cid_all:
        # RocketMQ logs and allocates nothing: the broker has not seen our heartbeat yet.
        return -1
    return list(cid_all).index(current_cid)


def allocate_averagely(
    current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """Contiguous pages: the first ``len(mq) % len(cid)`` consumers get one queue more.

    10 queues over 3 consumers -> [0..3], [4..6], [7..9]; 2 queues over 3 -> [0], [1], []."""
    index = _index(current_cid, mq_all, cid_all)
    if index < 0 or not mq_all:
        return []
    n_mq, n_cid = len(mq_all), len(cid_all)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_cid + 1
    else:
        average = n_mq // n_cid
    start = index * average if mod > 0 and index < mod else index * average + mod
    return list(mq_all[start : start + max(0, min(average, n_mq - start))])


def allocate_averagely_by_circle(
    current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """Dealt like cards: consumer i gets queues i, i + n, i + 2n, ..."""
    index = _index(current_cid, mq_all, cid_all)
    if index < 0:
        return []
    return list(mq_all[index :: len(cid_all)])


STRATEGIES: dict[str, AllocateStrategy] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
}
