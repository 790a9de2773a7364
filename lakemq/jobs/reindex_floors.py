"""Where each queue must continue after its ConsumeQueue is rebuilt: never below an offset
already given to a message.

The CommitLog alone knows only the queues that still have records in it. Once its oldest
files are gone (expired, or tiered and deleted), a queue whose every record was in them
would come back empty and start again at 0, handing out offsets that rows in the lake,
consumer groups and the delay levels already hold. The other witnesses:

- the lake's manifest: the queue offset after each queue's last record in the lake
  (``Manifest.queue_ends``), and which CommitLog offsets those ends cover;
- ``config/consumerOffset.json``: no queue ended below an offset a group committed;
- ``config/delayOffset.json``: no delay level's queue (SCHEDULE_TOPIC_XXXX, queue level - 1)
  ended below the offset it delivered up to.

A rebuilt queue ending below its floor is continued at the floor
(:meth:`ConsumeQueue.continue_at`). CommitLog offsets below the first local file that no lake
range covers are *unknown*: queues whose records were all there cannot be found.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from lakemq.broker.config_file import load_json
from lakemq.broker.consumer_offset_manager import TOPIC_GROUP_SEPARATOR
from lakemq.store.config import StoreConfig
from lakemq.store.delay_levels import SCHEDULE_TOPIC
from lakemq.store.schedule import read_delay_offsets
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import Manifest

__all__ = ["QueueFloors", "queue_floors"]

log = logging.getLogger(__name__)

Queue = tuple[str, int]


@dataclass(slots=True)
class QueueFloors:
    floors: dict[Queue, int] = field(default_factory=dict)  # the lowest next offset each queue may have
    why: dict[Queue, str] = field(default_factory=dict)  # the witness of each floor
    unknown_below: int = 0  # CommitLog offsets [0, unknown_below) that no witness covers
    lake: str = ""  # the lake read, or "" when none was configured

    def raise_to(self, queue: Queue, offset: int, why: str) -> None:
        if offset > self.floors.get(queue, 0):
            self.floors[queue] = offset
            self.why[queue] = why

    def of_topic(self, topic: str | None) -> dict[Queue, int]:
        return {q: f for q, f in self.floors.items() if topic in (None, q[0])}


def queue_floors(config: StoreConfig, commitlog_start: int, lake: LakeLocation | None, broker: str) -> QueueFloors:
    """The floors from every witness; ``commitlog_start`` is the first local CommitLog offset."""
    found = QueueFloors(lake=lake.uri if lake is not None else "")
    offsets = load_json(config.config_dir / "consumerOffset.json") or {}
    for key, queues in (offsets.get("offsetTable") or {}).items():
        topic, _, group = str(key).rpartition(TOPIC_GROUP_SEPARATOR)
        for queue_id, offset in queues.items():
            found.raise_to((topic, int(queue_id)), int(offset), f"group {group}'s committed offset")
    for level, offset in read_delay_offsets(config.delay_offset_path).items():
        found.raise_to((SCHEDULE_TOPIC, level - 1), offset, f"delay level {level}'s delivered offset")
    covered_to = 0
    if lake is not None:
        manifest = Manifest.open(lake, broker)
        for topic, queues in manifest.queue_ends.items():
            for queue_id, end in queues.items():
                found.raise_to((topic, int(queue_id)), end, "the lake's last row of the queue")
        start, end = manifest.queue_ends_cover()
        covered_to = end if start == 0 else 0
        uncovered = [e for e in manifest.entries if not e.queue_ends_recorded]
        if uncovered:
            log.warning("%d lake range(s) of %s were tiered before queue ends were recorded (first [%d, %d))",
                        len(uncovered), broker, uncovered[0].range_start, uncovered[0].range_end)
    found.unknown_below = 0 if commitlog_start <= covered_to else commitlog_start
    return found
