"""Committed consume offsets: ``topic@group -> {queueId: offset}``.

Persisted as ``{config_dir}/consumerOffset.json`` (``{"offsetTable": {"TopicTest@g1":
{"0": 12, "1": 7}}}``, RocketMQ's layout with JSON-legal string keys) every
``flushConsumerOffsetInterval`` and at shutdown, so offsets survive a restart. A topic or
group name enters the table only if it follows RocketMQ's rules (the key is file content, and
``@`` separates its parts).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Final

from lakemq.broker.config_file import file_lock, load_json, save_json
from lakemq.common.validation import GROUP_MAX_LENGTH, check_group, check_topic, is_valid_name
from lakemq.errors import CorruptFileError

__all__ = ["TOPIC_GROUP_SEPARATOR", "ConsumerOffsetManager"]

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR: Final = "@"


def _valid_key(key: str) -> bool:
    topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
    return is_valid_name(topic) and is_valid_name(group, GROUP_MAX_LENGTH)


class ConsumerOffsetManager:
    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / "consumerOffset.json"
        self._lock = threading.Lock()
        self._table: dict[str, dict[int, int]] = {}
        self._dirty = False
        # What a slave's fast sync asks for: each topic@group's last commit, numbered, newest
        # last, so the commits since a number are read from the end. The epoch names this
        # numbering; a slave that knows another (the master restarted) takes the whole table.
        self.epoch = secrets.token_hex(8)
        self._seq = 0
        self._changed: OrderedDict[str, int] = OrderedDict()

    def load(self) -> None:
        data = load_json(self.path)
        if data is None:
            return
        table: dict[str, dict[int, int]] = {}
        try:
            for key, offsets in (data.get("offsetTable") or {}).items():
                table[key] = {int(qid): int(off) for qid, off in offsets.items()}
        except (AttributeError, TypeError, ValueError) as exc:
            raise CorruptFileError(f"{self.path}: bad offset table: {exc}") from exc
        for key in [k for k in table if not _valid_key(k)]:
            # Written by a broker that took any name: no consumer can pull with such a group.
            log.warning("%s: ignoring offsets of %r, not a valid topic@group", self.path, key)
            del table[key]
        with self._lock:
            self._table = table

    def encode(self) -> dict[str, Any]:
        with self._lock:
            return {
                "offsetTable": {
                    key: {str(q): o for q, o in offsets.items()} for key, offsets in self._table.items()
                }
            }

    def persist(self, *, force: bool = False) -> bool:
        """Write the table if it changed since the last write (or ``force``); True if written."""
        with self._lock:
            if not (self._dirty or force):
                return False
            self._dirty = False
        try:
            with file_lock(self.path):  # the flush thread and shutdown may persist at once
                save_json(self.path, self.encode())
        except OSError:
            with self._lock:
                self._dirty = True
            raise
        return True

    def put_from_master(self, wrapper: dict[str, Any]) -> None:
        """A slave takes its master's offsets (GET_ALL_CONSUMER_OFFSET's offsetTable): each
        topic@group the master has replaces the slave's; others stay (committed here while
        the master was away). Raises CorruptFileError for a bad table, changing nothing."""
        self._put(wrapper)
        self.persist()

    def _put(self, wrapper: dict[str, Any]) -> None:
        try:
            table = {str(key): {int(q): int(o) for q, o in offsets.items()}
                     for key, offsets in (wrapper.get("offsetTable") or {}).items()}
        except (AttributeError, TypeError, ValueError) as exc:
            raise CorruptFileError(f"master's offset table: {exc}") from exc
        if not table:
            return
        with self._lock:
            self._table.update(table)
            self._dirty = True

    def changes_since(self, epoch: str, since: int) -> tuple[int, dict[str, Any]]:
        """The offsets of every topic@group committed after number ``since`` of ``epoch``
        (all of them for another epoch), as GET_ALL_CONSUMER_OFFSET's wrapper, and the number
        to ask from next time."""
        with self._lock:
            if epoch != self.epoch:
                keys: list[str] = list(self._table)
            else:
                keys = []
                for key, seq in reversed(self._changed.items()):
                    if seq <= since:
                        break
                    keys.append(key)
            table = {key: {str(q): o for q, o in self._table[key].items()} for key in keys}
            return self._seq, {"offsetTable": table}

    def put_changes_from_master(self, wrapper: dict[str, Any]) -> None:
        """put_from_master for the fast sync's few changes: written with the next periodic
        persist, not at once (the master holds them; a restarted slave asks again)."""
        self._put(wrapper)

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Raises InvalidNameError for a topic or group name that breaks the rules."""
        key = topic + TOPIC_GROUP_SEPARATOR + group
        if key not in self._table:  # names already in the table were checked when they entered
            check_topic(topic)
            check_group(group)
        with self._lock:
            offsets = self._table.setdefault(key, {})
            previous = offsets.get(queue_id)
            offsets[queue_id] = offset
            self._dirty = True
            self._seq += 1
            self._changed[key] = self._seq
            self._changed.move_to_end(key)
        if previous is not None and offset < previous:
            log.info(
                "offset of %s queue %d moved back %d -> %d by %s",
                key,
                queue_id,
                previous,
                offset,
                client_host,
            )

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        with self._lock:
            return self._table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}).get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        with self._lock:
            return dict(self._table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}))

    def which_topic_by_consumer(self, group: str) -> set[str]:
        with self._lock:
            return {
                k.rpartition(TOPIC_GROUP_SEPARATOR)[0]
                for k in self._table
                if k.rpartition(TOPIC_GROUP_SEPARATOR)[2] == group
            }

    def which_group_by_topic(self, topic: str) -> set[str]:
        with self._lock:
            return {
                k.rpartition(TOPIC_GROUP_SEPARATOR)[2]
                for k in self._table
                if k.rpartition(TOPIC_GROUP_SEPARATOR)[0] == topic
            }

    def remove_group(self, group: str) -> None:
        with self._lock:
            for key in [k for k in self._table if k.rpartition(TOPIC_GROUP_SEPARATOR)[2] == group]:
                del self._table[key]
                self._changed.pop(key, None)
                self._dirty = True

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            for key in [k for k in self._table if k.rpartition(TOPIC_GROUP_SEPARATOR)[0] == topic]:
                del self._table[key]
                self._changed.pop(key, None)
                self._dirty = True
