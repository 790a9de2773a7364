"""Pulls below the hot ConsumeQueue's min offset, answered from the lake (``lakeUri``).

The store answers OFFSET_TOO_SMALL once hot retention has deleted tiered files (and, while
expiry is deleting them, OFFSET_FOUND_NULL or MESSAGE_WAS_REMOVING); with a lake the same
pull is served from the lake's records instead, through the broker's own filter
(tags hash code, then SQL92 on properties). ``next_begin_offset`` is the offset after the
last record looked at, so a consumer walks the lake range and then the hot range without a
gap. GET_MIN_OFFSET stays the hot min: RocketMQ clients use it to place a new group that
consumes from the first offset, and offsets below it still pull fine through this path.
"""

from __future__ import annotations

import time

from lakemq.broker.metrics import BrokerMetrics
from lakemq.common.message import tags_hash_code
from lakemq.store.filter import MessageFilter
from lakemq.store.get_results import GetMessageResult, GetMessageStatus
from lakemq.tiering.cold_read import ColdReader
from lakemq.tiering.lake_fs import LakeLocation

__all__ = ["ColdPuller"]


class ColdPuller:
    def __init__(self, lake_uri: str, broker: str, metrics: BrokerMetrics, *, block_size: int = 256) -> None:
        self.reader = ColdReader(LakeLocation.of(lake_uri), broker=broker, block_size=block_size)
        self._broker = broker
        self._metrics = metrics

    def pull(
        self, topic: str, queue_id: int, offset: int, end_offset: int, max_count: int, message_filter: MessageFilter,
        max_bytes: int, hot: GetMessageResult,
    ) -> GetMessageResult | None:
        """The lake's answer, from the records of ``[offset, end_offset)``, for a pull the store
        could not serve, or ``None`` when the lake does not hold ``offset`` (the store's answer
        then stands). Blocks: run it in a pool."""
        started = time.perf_counter()
        scan = self.reader.read(topic, queue_id, offset, end_offset, max(max_count, self.reader.block_size))
        if not scan:
            return None
        result = GetMessageResult(
            GetMessageStatus.FOUND, min_offset=hot.min_offset, max_offset=hot.max_offset
        )
        next_offset = offset
        for cold in scan:
            if result.msg_count >= max_count or (result.msg_count and result.buffer_total_size + len(cold.record) > max_bytes):
                break
            next_offset = cold.queue_offset + 1
            if not message_filter.is_matched_by_consume_queue(tags_hash_code(cold.tags)):
                continue
            if not message_filter.is_matched_by_commit_log(cold.record, cold.properties):
                continue
            result.add(cold.record)
        result.next_begin_offset = next_offset
        if not result.msg_count:
            result.status = GetMessageStatus.NO_MATCHED_MESSAGE
        self._metrics.cold_reads.labels(self._broker, topic).inc()
        self._metrics.cold_read_latency_seconds.labels(self._broker, topic).observe(time.perf_counter() - started)
        return result
