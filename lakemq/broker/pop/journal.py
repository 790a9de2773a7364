"""The POP journal: check point, change and done records in the CommitLog's revive topic,
and the snapshot that bounds their replay.

Every change to the POP state is one message of ``rmq_sys_REVIVE_LOG_{cluster}`` (RocketMQ's
revive topic), queue 0, whose body is a JSON list of records (lakemq.broker.pop.state): a pop
writes one message holding the check points of every queue it read, so a pop is in the journal
whole or not at all. The put is the store's ordinary put, so a record is exactly as durable as
a message sent to the broker (under SYNC_FLUSH flushed before the put returns; under either
mode it survives a kill -9 in the page cache) and replicates to slaves with the rest.

The snapshot (``{config_dir}/popState.json``, written as the other config files: tmp file
fsynced, renamed, directory fsynced) holds the whole state and ``reviveOffset``, the journal's
queue offset it covers up to. Start-up loads it, replays the journal from there, and writes a
new snapshot at once: the CommitLog's recovery may have cut records the old snapshot had
seen (a power cut under ASYNC_FLUSH), and their queue offsets are about to be given to new
records, which a replay from the old ``reviveOffset`` would skip. Snapshots are also what keeps
in-flight state once the CommitLog files holding its records are cleaned up.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Final

from lakemq.broker.config_file import load_json, save_json
from lakemq.broker.pop.state import PopState
from lakemq.common.codes import ResponseCode
from lakemq.common.message import MessageExtBrokerInner
from lakemq.common.record import decode_record
from lakemq.errors import CorruptFileError, for_code
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus

__all__ = ["REVIVE_GROUP", "PopJournal", "revive_topic"]

log = logging.getLogger(__name__)

REVIVE_GROUP: Final = "CID_RMQ_SYS_REVIVE_GROUP"  # RocketMQ's name for the revive topic's reader
_REVIVE_QUEUE = 0
_DISPATCH_WAIT_S = 120.0


def revive_topic(cluster: str) -> str:
    return f"rmq_sys_REVIVE_LOG_{cluster}"


class PopJournal:
    """Writes journal records and replays them; used from one thread (the POP thread)."""

    def __init__(self, store: MessageStore, cluster: str, snapshot_path: Path) -> None:
        self._store = store
        self.topic = revive_topic(cluster)
        self._snapshot_path = snapshot_path
        self.end = 0  # the journal's queue offset after the last record applied
        self._snapshot_end = -1

    def write(self, records: list[dict[str, Any]]) -> None:
        """Store ``records`` as one journal message; raises BrokerError when the store refuses
        (then nothing of them may be applied)."""
        inner = MessageExtBrokerInner(
            topic=self.topic,
            body=json.dumps(records, separators=(",", ":")).encode(),
            queue_id=_REVIVE_QUEUE,
            born_timestamp=int(time.time() * 1000),
            born_host=self._store.store_host,
            store_host=self._store.store_host,
        )
        result = self._store.put(MessagesPut.of(inner))
        if result.status is not PutMessageStatus.PUT_OK or result.append_result is None:
            raise for_code(ResponseCode.SYSTEM_ERROR,
                           f"POP journal write failed: {result.status.name} {result.remark}".strip())
        self.end = result.append_result.logics_offset + 1

    def recover(self) -> PopState:
        """The state the snapshot and the journal after it describe; the caller settles its
        unfinished revives, then writes a new snapshot (:meth:`snapshot` with ``force``)."""
        data = load_json(self._snapshot_path)
        state = PopState()
        start = 0
        if data is not None:
            try:
                start = int(data["reviveOffset"])
                state = PopState.decode(data["queues"])
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptFileError(f"{self._snapshot_path}: {exc}") from exc
        self._wait_dispatched()
        applied = self._replay(state, start)
        log.info("POP state recovered: %d queues from %s, %d journal records replayed from offset %d",
                 len(state.queues), self._snapshot_path.name, applied, start)
        return state

    def snapshot(self, state: PopState, *, force: bool = False) -> None:
        if (self.end == self._snapshot_end and not force) or state.reviving:
            return  # an unsettled revive lives in the journal only
        save_json(self._snapshot_path, {"reviveOffset": self.end, "queues": state.encode()})
        self._snapshot_end = self.end

    def _wait_dispatched(self) -> None:
        """The revive topic's ConsumeQueue is complete only once dispatch has caught up."""
        deadline = time.monotonic() + _DISPATCH_WAIT_S
        while self._store.dispatch_behind_bytes() > 0:
            if time.monotonic() > deadline:
                raise for_code(ResponseCode.SERVICE_NOT_AVAILABLE, "dispatch did not catch up: POP state unknown")
            time.sleep(0.01)

    def _replay(self, state: PopState, start: int) -> int:
        store, offset, applied = self._store, start, 0
        end = store.get_max_offset_in_queue(self.topic, _REVIVE_QUEUE)
        if end < start:
            # The CommitLog lost records the snapshot had seen (the snapshot is ahead): the
            # snapshot stands, and the journal goes on from where the queue now ends.
            log.warning("POP journal ends at %d, before its snapshot's %d: the snapshot stands", end, start)
        while offset < end:
            got = store.get_message(REVIVE_GROUP, self.topic, _REVIVE_QUEUE, offset, 256, None, 4 << 20)
            if got.status is GetMessageStatus.OFFSET_TOO_SMALL:
                log.warning("POP journal records %d..%d are gone: replay starts at %d",
                            offset, got.next_begin_offset, got.next_begin_offset)
            elif got.status is not GetMessageStatus.FOUND:
                raise CorruptFileError(f"POP journal unreadable at {offset}: {got.status.name}")
            for record in got.buffers:
                for change in json.loads(decode_record(record).body):
                    state.apply(change)
                    applied += 1
            if got.next_begin_offset <= offset:
                break
            offset = got.next_begin_offset
        self.end = end
        return applied
