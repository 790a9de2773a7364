"""Which messages a deleted CommitLog file took before consumers read them: what the store's
expiry must not delete quietly (MessageStore.set_unconsumed_judge)."""

from __future__ import annotations

from collections import Counter

from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.store.maintenance import RemovedRange, UnconsumedLoss

__all__ = ["unconsumed_losses"]


def unconsumed_losses(offsets: ConsumerOffsetManager, ranges: list[RemovedRange],
                      unread_topics: bool) -> list[UnconsumedLoss]:
    """Per topic, the removed messages at or past some group's committed offset (a queue the
    group never committed counts whole), the worst group per queue; with ``unread_topics``
    also every removed message of a topic no group has committed an offset for."""
    groups_of: dict[str, set[str]] = {}
    lost: Counter[str] = Counter()
    behind: dict[str, set[str]] = {}
    for r in ranges:
        groups = groups_of.get(r.topic)
        if groups is None:
            groups = groups_of[r.topic] = offsets.which_group_by_topic(r.topic)
        if not groups:
            if unread_topics:
                lost[r.topic] += r.end - r.begin
            continue
        worst = 0
        for group in groups:
            missed = r.end - max(r.begin, offsets.query_offset(group, r.topic, r.queue_id))
            if missed > 0:
                behind.setdefault(r.topic, set()).add(group)
                worst = max(worst, missed)
        lost[r.topic] += worst
    return [UnconsumedLoss(topic, n, tuple(sorted(behind.get(topic, ())))) for topic, n in sorted(lost.items()) if n]
