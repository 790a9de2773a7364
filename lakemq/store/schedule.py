"""ScheduleMessageService: delivers delayed messages when their time comes (RocketMQ 4.x).

A delayed message sits in SCHEDULE_TOPIC_XXXX, queue ``level - 1``, whose ConsumeQueue tags
code is its delivery time. One timer per level walks that queue from the level's offset:
a due message is read back, given its REAL_TOPIC / REAL_QID again, stripped of DELAY and put
anew; the first message not yet due sets when the level's timer fires next. The per-level
offsets are saved to ``config/delayOffset.json`` periodically and at shutdown, so after a
crash a message is delivered at least once (possibly twice, never lost).
"""

from __future__ import annotations

import heapq
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from lakemq.common.durable import write_file_durably
from lakemq.common.message import MessageConst, MessageExt, MessageExtBrokerInner, tags_hash_code
from lakemq.store.consume_queue import ConsumeQueue
from lakemq.store.delay_levels import SCHEDULE_TOPIC, DelayLevels
from lakemq.store.results import PutMessageResult
from lakemq.store.service_thread import ServiceThread

__all__ = ["ScheduleMessageService", "parse_delay_offsets", "read_delay_offsets", "restore_real_message"]

log = logging.getLogger(__name__)

DELAY_FOR_A_WHILE_MS: Final = 100  # nothing (more) in the queue: look again soon
DELAY_FOR_A_PERIOD_MS: Final = 10_000  # the re-put failed: retry the same message later
BATCH: Final = 32
_FASTJSON_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)\s*:")


def parse_delay_offsets(text: str) -> dict[int, int]:
    """delayOffset.json's table in ``text``, delay level -> the next offset of its queue to
    deliver (RocketMQ writes the keys as bare numbers); ValueError when it is not one."""
    try:
        raw = json.loads(_FASTJSON_INT_KEY.sub(r'\1"\2":', text)).get("offsetTable", {})
        return {int(k): int(v) for k, v in raw.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f"not a delay offset table: {exc}") from exc


def read_delay_offsets(path: Path) -> dict[int, int]:
    """parse_delay_offsets of the file; empty when the file does not exist. ValueError when it
    cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        return parse_delay_offsets(text)
    except ValueError as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc


def restore_real_message(msg: MessageExt) -> MessageExtBrokerInner:
    """The message as it was before the put-time rewrite: real topic and queue, no DELAY."""
    props = dict(msg.properties)
    props.pop(MessageConst.DELAY_TIME_LEVEL, None)
    topic = props.get(MessageConst.REAL_TOPIC, msg.topic)
    queue_id = int(props.get(MessageConst.REAL_QUEUE_ID, msg.queue_id))
    inner = MessageExtBrokerInner(
        topic=topic,
        body=msg.body,
        flag=msg.flag,
        properties=props,
        queue_id=queue_id,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_host=msg.store_host,
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
        tags_code=tags_hash_code(props.get(MessageConst.TAGS)),
    )
    return inner


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ScheduleMessageService(ServiceThread):
    def __init__(
        self,
        levels: DelayLevels,
        *,
        find_queue: Callable[[str, int], ConsumeQueue | None],
        read_message: Callable[[int, int], MessageExt | None],
        put_message: Callable[[MessageExtBrokerInner], PutMessageResult],
        offset_path: Path,
        persist_interval_ms: int = 10_000,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        super().__init__("ScheduleMessageService")
        self.levels = levels
        self._find_queue = find_queue
        self._read_message = read_message
        self._put_message = put_message
        self.offset_path = Path(offset_path)
        self._persist_interval_ms = persist_interval_ms
        self._now_ms = now_ms
        self.offset_table: dict[int, int] = {}
        self._lock = threading.Lock()

    # -- offsets -----------------------------------------------------------------------------

    def load(self) -> bool:
        """Read the offset table; a missing file means every level starts at 0."""
        try:
            table = read_delay_offsets(self.offset_path)
        except ValueError as exc:
            log.error("%s", exc)
            return False
        self.offset_table = self._levels_of(table)
        return True

    def _levels_of(self, table: dict[int, int]) -> dict[int, int]:
        return {k: v for k, v in table.items() if 1 <= k <= self.levels.max_level}

    def replace_offsets(self, text: str) -> None:
        """A slave takes its master's delayOffset.json (the text GET_ALL_DELAY_OFFSET
        answers) and persists it. Raises ValueError for text that is not such a table."""
        table = self._levels_of(parse_delay_offsets(text))
        with self._lock:
            self.offset_table = table
        self.persist()

    def offsets_text(self) -> str:
        """The table as delayOffset.json holds it (GET_ALL_DELAY_OFFSET's answer)."""
        with self._lock:
            data = {"offsetTable": {str(k): v for k, v in sorted(self.offset_table.items())}}
        return json.dumps(data, indent=2)

    def persist(self) -> None:
        """Write the table atomically and durably (RocketMQ's ConfigManager keeps a .bak; a
        rename is enough to never leave a torn file)."""
        write_file_durably(self.offset_path, self.offsets_text())

    def _set_offset(self, level: int, offset: int) -> None:
        with self._lock:
            self.offset_table[level] = offset

    # -- delivery ----------------------------------------------------------------------------

    def deliver_level(self, level: int) -> int:
        """Deliver what is due in ``level``'s queue; returns ms until this level's timer
        should fire again."""
        cq = self._find_queue(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return DELAY_FOR_A_WHILE_MS
        offset = max(self.offset_table.get(level, 0), cq.get_min_offset_in_queue())
        max_offset = cq.get_max_offset_in_queue()
        while offset < max_offset:
            units = cq.read_units(offset, BATCH)
            if not units:
                break
            for unit in units:
                if not unit.is_blank:
                    now = self._now_ms()
                    # A delivery time beyond now + the level's delay comes from a clock step.
                    due = unit.tags_code if unit.tags_code <= now + self.levels.delay_ms(level) else now
                    if due > now:
                        self._set_offset(level, offset)
                        return due - now
                    if not self._deliver(unit.commit_log_offset, unit.size, level, offset):
                        self._set_offset(level, offset)
                        return DELAY_FOR_A_PERIOD_MS
                offset += 1
                self._set_offset(level, offset)
        self._set_offset(level, offset)
        return DELAY_FOR_A_WHILE_MS

    def _deliver(self, commit_log_offset: int, size: int, level: int, offset: int) -> bool:
        msg = self._read_message(commit_log_offset, size)
        if msg is None:  # the record expired from the CommitLog: nothing left to deliver
            log.warning("delay level %d offset %d: record at %d is gone", level, offset, commit_log_offset)
            return True
        try:
            result = self._put_message(restore_real_message(msg))
        except Exception:
            log.exception("delay level %d offset %d: re-put failed", level, offset)
            return False
        if not result.is_ok:
            log.warning("delay level %d offset %d: re-put returned %s", level, offset, result.status)
        return result.is_ok

    def run(self) -> None:
        # Timers count elapsed time (monotonic): a step of the wall clock must not hold a level
        # back for the size of the step. Due times in the queue stay wall-clock (deliver_level).
        timers = [(0, level) for level in range(1, self.levels.max_level + 1)]
        heapq.heapify(timers)
        next_persist = _monotonic_ms() + self._persist_interval_ms
        while not self.stopped:
            now = _monotonic_ms()
            while timers and timers[0][0] <= now and not self.stopped:
                _, level = heapq.heappop(timers)
                try:
                    wait_ms = self.deliver_level(level)
                except Exception:
                    log.exception("delay level %d failed", level)
                    wait_ms = DELAY_FOR_A_PERIOD_MS
                heapq.heappush(timers, (_monotonic_ms() + wait_ms, level))
            if now >= next_persist:
                self._persist_quietly()
                next_persist = now + self._persist_interval_ms
            self.wait_for_running(max(0.001, (min(timers[0][0], next_persist) - _monotonic_ms()) / 1000))
        self._persist_quietly()

    def _persist_quietly(self) -> None:
        try:
            self.persist()
        except OSError as exc:
            log.error("cannot persist %s: %s", self.offset_path, exc)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        was_running = self._thread is not None
        super().shutdown(timeout_s)
        if not was_running:
            self._persist_quietly()
