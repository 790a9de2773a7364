"""The oldest message some consumer group has not consumed: what the store's expiry must not
delete quietly (MessageStore.set_unconsumed_probe)."""

from __future__ import annotations

from lakemq.broker.consumer_offset_manager import TOPIC_GROUP_SEPARATOR, ConsumerOffsetManager
from lakemq.store.maintenance import Unconsumed
from lakemq.store.message_store import MessageStore

__all__ = ["oldest_unconsumed"]


def oldest_unconsumed(store: MessageStore, offsets: ConsumerOffsetManager) -> Unconsumed | None:
    """Over every committed offset: the message at it (or at the queue's min offset, if that
    is later), when the queue holds one; the one lowest in the CommitLog wins."""
    oldest: Unconsumed | None = None
    for key, queues in offsets.encode()["offsetTable"].items():
        topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
        for queue_id, committed in queues.items():
            try:
                cq = store.consume_queues.find(topic, int(queue_id))
            except ValueError:  # a name the store refuses has no queue
                continue
            if cq is None:
                continue
            offset = max(committed, cq.get_min_offset_in_queue())
            if offset >= cq.get_max_offset_in_queue():
                continue
            unit = next((u for u in cq.read_units(offset, 64) if not u.is_blank), None)  # past a gap's blanks
            if unit is None:
                continue
            if oldest is None or unit.commit_log_offset < oldest.commit_log_offset:
                oldest = Unconsumed(unit.commit_log_offset, group, topic, int(queue_id), offset)
    return oldest
