"""ConsumeQueueStore: every ConsumeQueue of the broker, keyed by topic and queue id.

It is the ConsumeQueue builder among the CommitLog dispatchers, and it applies recovery,
truncation, expiry and flushing to all queues at once.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from lakemq.common.validation import check_topic, is_valid_name
from lakemq.store._cq_runs import consume_queue_runs
from lakemq.store.commit_log_scan import DispatchBatch, DispatchRequest
from lakemq.store.consume_queue import MAX_QUEUE_ID, ConsumeQueue, check_queue_id
from lakemq.store.dispatch import gets_consume_queue_entry

__all__ = ["ConsumeQueueStore"]

log = logging.getLogger(__name__)


class ConsumeQueueStore:
    def __init__(self, root_dir: Path, mapped_file_size: int, store_timestamp_of: Callable[[int, int], int]) -> None:
        self.root_dir = Path(root_dir)
        self.mapped_file_size = mapped_file_size
        self._store_timestamp_of = store_timestamp_of
        self._table: dict[str, dict[int, ConsumeQueue]] = {}
        self._lock = threading.Lock()
        # Store time of the newest record given a ConsumeQueue entry (the checkpoint's logics time).
        self.last_dispatched_timestamp = 0
        # Told (topic, queue id) when dispatch makes a queue: a slave learns the topics its
        # replicated log holds from this. Called on the dispatching thread; must be quick.
        self.on_queue_created: Callable[[str, int], None] | None = None

    def _new(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(topic, queue_id, self.root_dir, self.mapped_file_size, self._store_timestamp_of)

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue if it exists; raises InvalidNameError / ValueError for a bad name or id."""
        queues = self._table.get(topic)
        if queues is not None and type(queue_id) is int:
            cq = queues.get(queue_id)
            if cq is not None:  # only checked names and ids are in the table
                return cq
        check_topic(topic)
        check_queue_id(queue_id)
        return self._table.get(topic, {}).get(queue_id)

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.find(topic, queue_id)
        if cq is not None:
            return cq
        with self._lock:
            queues = self._table.setdefault(topic, {})
            cq = queues.get(queue_id)
            if cq is not None:
                return cq
            cq = queues[queue_id] = self._new(topic, queue_id)
        listener = self.on_queue_created
        if listener is not None:
            try:
                listener(topic, queue_id)
            except Exception:  # the entry is written all the same
                log.exception("queue-created listener failed for %s queue %d", topic, queue_id)
        return cq

    def all(self) -> list[ConsumeQueue]:
        return [cq for queues in list(self._table.values()) for cq in list(queues.values())]

    # -- load and recovery -------------------------------------------------------------------

    def load(self) -> bool:
        """Open every ``{topic}/{queueId}`` directory; foreign entries are skipped with a
        warning, never followed."""
        if not self.root_dir.is_dir():
            return True
        for topic_dir in sorted(self.root_dir.iterdir()):
            if not topic_dir.is_dir() or topic_dir.is_symlink() or not is_valid_name(topic_dir.name):
                log.warning("skipping %s: not a topic directory", topic_dir)
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                name = queue_dir.name
                if (not queue_dir.is_dir() or queue_dir.is_symlink() or not name.isdigit()
                        or int(name) > MAX_QUEUE_ID or str(int(name)) != name):
                    log.warning("skipping %s: not a queue directory", queue_dir)
                    continue
                cq = self._new(topic_dir.name, int(name))
                if not cq.load():
                    return False
                self._table.setdefault(cq.topic, {})[cq.queue_id] = cq
        return True

    def recover(self) -> None:
        for cq in self.all():
            cq.recover()

    def max_physic_offset(self) -> int:
        """CommitLog end of the newest entry in any queue: where dispatch resumes."""
        return max((cq.max_physic_offset for cq in self.all()), default=0)

    def truncate_dirty(self, phy_offset: int) -> None:
        for cq in self.all():
            cq.truncate_dirty_logic_files(phy_offset)

    def correct_min_offset(self, phy_min_offset: int) -> None:
        for cq in self.all():
            cq.correct_min_offset(phy_min_offset)

    def offset_table(self) -> dict[tuple[str, int], int]:
        """(topic, queue id) -> next queue offset (RocketMQ's topicQueueTable), which the
        CommitLog put path continues from."""
        return {(cq.topic, cq.queue_id): cq.get_max_offset_in_queue() for cq in self.all()}

    # -- dispatch ----------------------------------------------------------------------------

    def dispatch(self, request: DispatchRequest) -> None:
        """The ConsumeQueue builder (a CommitLogDispatcher)."""
        if not gets_consume_queue_entry(request.sys_flag):
            return
        try:
            cq = self.find_or_create(request.topic, request.queue_id)
        except ValueError as exc:  # a record the put path would have refused: never a directory
            log.error("record at %d not queued: %s", request.commit_log_offset, exc)
            return
        cq.put_message_position_info(
            request.commit_log_offset, request.msg_size, request.tags_code, request.consume_queue_offset
        )
        self.last_dispatched_timestamp = request.store_timestamp

    def dispatch_batch(self, batch: DispatchBatch) -> None:
        """dispatch for consecutive records: each queue's run of entries (packed in C) is
        written together."""
        runs, last_timestamp = consume_queue_runs(batch)
        for topic, queue_id, first_queue_offset, units in runs:
            try:
                cq = self.find_or_create(topic, queue_id)
            except ValueError as exc:  # a record the put path would have refused: never a directory
                log.error("records of %r queue %d not queued: %s", topic, queue_id, exc)
                continue
            cq.put_message_position_infos(first_queue_offset, units)
        if last_timestamp is not None:
            self.last_dispatched_timestamp = last_timestamp

    # -- expiry, flush, lifecycle ------------------------------------------------------------

    def delete_expired(self, phy_min_offset: int) -> int:
        return sum(cq.delete_expired_file(phy_min_offset) for cq in self.all())

    def flush(self, least_pages: int = 0) -> bool:
        done = True
        for cq in self.all():
            done = cq.flush(least_pages) and done
        return done

    def delete_topics(self, topics: Iterable[str]) -> None:
        for topic in topics:
            check_topic(topic)
            with self._lock:
                queues = self._table.pop(topic, {})
            for cq in queues.values():
                cq.destroy()
            shutil.rmtree(self.root_dir / topic, ignore_errors=True)

    def shutdown(self) -> None:
        for cq in self.all():
            cq.shutdown()
