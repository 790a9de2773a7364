"""Topic configs of one broker: system topics, auto-creation through TBW102, persistence.

The table is persisted as ``{config_dir}/topics.json``::

    {"dataVersion": {"counter": 3, "timestamp": 1700000000000},
     "topicConfigTable": {"TopicTest": {"order": false, "perm": 6, "readQueueNums": 4,
                                        "topicFilterType": "SINGLE_TAG", "topicName": "TopicTest",
                                        "topicSysFlag": 0, "writeQueueNums": 4}, ...}}

which is also the ``topicConfigSerializeWrapper`` a broker registers with the NameServers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from lakemq.broker.config import BrokerConfig
from lakemq.broker.config_file import ConfigFile, json_text, load_json
from lakemq.common.constants import PermName
from lakemq.common.validation import check_topic
from lakemq.errors import InvalidNameError
from lakemq.remoting.bodies import DataVersion
from lakemq.store.timer_message import TIMER_TOPIC

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "BENCHMARK_TOPIC",
    "DLQ_GROUP_TOPIC_PREFIX",
    "NOT_ALLOWED_SEND_TOPICS",
    "OFFSET_MOVED_EVENT",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SCHEDULE_TOPIC",
    "SELF_TEST_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "TopicConfig",
    "TopicConfigManager",
    "dlq_topic",
    "reply_topic",
    "retry_topic",
]

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC_KEY_TOPIC: Final = "TBW102"  # the template producers name as defaultTopic
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
SCHEDULE_TOPIC_QUEUE_NUMS: Final = 18  # one queue per delay level
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC: Final = "BenchmarkTest"
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
# Producers may not write these directly: the broker itself fills them.
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TIMER_TOPIC}
)
_DEFAULT_QUEUE_NUMS: Final = 16
_MAX_QUEUE_NUMS: Final = 1024


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def reply_topic(cluster: str) -> str:
    """Where request() replies of a cluster go (RocketMQ: cluster + "_" + REPLY_TOPIC_POSTFIX)."""
    return f"{cluster}_REPLY_TOPIC"


@dataclass(frozen=True, slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = _DEFAULT_QUEUE_NUMS
    write_queue_nums: int = _DEFAULT_QUEUE_NUMS
    perm: int = PermName.PERM_READ | PermName.PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"  # or MULTI_TAG; informational, as in RocketMQ
    topic_sys_flag: int = 0
    order: bool = False

    def __post_init__(self) -> None:
        check_topic(self.topic_name)
        for name in ("read_queue_nums", "write_queue_nums"):
            value = getattr(self, name)
            if not 0 <= value <= _MAX_QUEUE_NUMS:
                raise InvalidNameError(f"{name} must be 0..{_MAX_QUEUE_NUMS}, got {value}")
        if self.perm & ~0xF:
            raise InvalidNameError(f"perm must combine 4 (read), 2 (write), 1 (inherit), got {self.perm}")
        if self.topic_filter_type not in ("SINGLE_TAG", "MULTI_TAG"):
            raise InvalidNameError(
                f"topicFilterType must be SINGLE_TAG or MULTI_TAG, got {self.topic_filter_type!r}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": self.topic_filter_type,
            "topicSysFlag": self.topic_sys_flag,
            "order": self.order,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        try:
            return cls(
                topic_name=str(data["topicName"]),
                read_queue_nums=int(data.get("readQueueNums", _DEFAULT_QUEUE_NUMS)),
                write_queue_nums=int(data.get("writeQueueNums", _DEFAULT_QUEUE_NUMS)),
                perm=int(data.get("perm", PermName.PERM_READ | PermName.PERM_WRITE)),
                topic_filter_type=str(data.get("topicFilterType", "SINGLE_TAG")),
                topic_sys_flag=int(data.get("topicSysFlag", 0)),
                order=bool(data.get("order", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidNameError(f"bad topic config {data!r}: {exc}") from exc


class TopicConfigManager:
    """Thread-safe table of topic configs; every change bumps the data version, is durable
    when the call that made it returns (group commit: changes made at once share one write of
    topics.json, :class:`ConfigFile`), and is then reported to ``on_change`` listeners (the
    broker re-registers with the NameServers so producers see an auto-created topic's route).
    A call that finds the topic it would create already there also waits until it is durable."""

    def __init__(self, config: BrokerConfig, config_dir: Path) -> None:
        self._config = config
        self.path = config_dir / "topics.json"
        self.file = ConfigFile(self.path, self._file_text)
        self._entries: dict[str, tuple[TopicConfig, str]] = {}  # name -> (config, its entry) as last written
        self._lock = threading.RLock()
        self._table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion.now()
        self.on_change: list[Callable[[TopicConfig], None]] = []
        for tc in self._system_topics():
            self._table[tc.topic_name] = tc

    def _system_topics(self) -> list[TopicConfig]:
        c = self._config
        rw = PermName.PERM_READ | PermName.PERM_WRITE
        topics = [
            TopicConfig(SELF_TEST_TOPIC, 1, 1),
            TopicConfig(BENCHMARK_TOPIC, _MAX_QUEUE_NUMS, _MAX_QUEUE_NUMS),
            TopicConfig(OFFSET_MOVED_EVENT, 1, 1),
            TopicConfig(SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUMS, SCHEDULE_TOPIC_QUEUE_NUMS),
            TopicConfig(TRANS_HALF_TOPIC, 1, 1),
            TopicConfig(TRANS_OP_HALF_TOPIC, 1, 1),
            TopicConfig(TIMER_TOPIC, 1, 1),
            TopicConfig(reply_topic(c.broker_cluster_name), 1, 1),
            TopicConfig(
                c.broker_cluster_name, perm=PermName.PERM_INHERIT | (rw if c.cluster_topic_enable else 0)
            ),
            TopicConfig(
                c.broker_name, 1, 1, perm=PermName.PERM_INHERIT | (rw if c.broker_topic_enable else 0)
            ),
        ]
        if c.auto_create_topic_enable:
            topics.append(
                TopicConfig(
                    AUTO_CREATE_TOPIC_KEY_TOPIC,
                    c.default_topic_queue_nums,
                    c.default_topic_queue_nums,
                    perm=PermName.PERM_INHERIT | rw,
                )
            )
        return topics

    # -- persistence -------------------------------------------------------------------

    def load(self) -> None:
        data = load_json(self.path)
        if data is None:
            return
        with self._lock:
            for name, raw in (data.get("topicConfigTable") or {}).items():
                tc = TopicConfig.from_json(raw)
                if tc.topic_name != name:
                    raise InvalidNameError(f"{self.path}: entry {name!r} holds topic {tc.topic_name!r}")
                self._table[name] = tc
            self.data_version = DataVersion.from_json(data.get("dataVersion") or {})

    def encode(self) -> dict[str, Any]:
        """The TopicConfigSerializeWrapper: persisted, and registered with the NameServers."""
        with self._lock:
            return {
                "topicConfigTable": {name: tc.to_json() for name, tc in self._table.items()},
                "dataVersion": self.data_version.to_json(),
            }

    def _file_text(self) -> str:
        """``json_text(self.encode())``, from each topic's entry as the previous write encoded
        it: configs are immutable, so an entry is encoded again only when its topic holds
        another config object. At 10,000 topics encoding every entry for each write took
        0.1-0.7 s."""
        with self._lock:
            table = sorted(self._table.items())
            version = self.data_version.to_json()
        known, entries = self._entries, {}  # only the file's writer (one at a time) comes here
        for name, tc in table:
            hit = known.get(name)
            entries[name] = (tc, hit[1] if hit is not None and hit[0] is tc else json_text({name: tc.to_json()})[1:-1])
        self._entries = entries
        body = ",".join(entry for _, entry in entries.values())
        return f'{{"dataVersion":{json_text(version)},"topicConfigTable":{{{body}}}}}'

    def persist(self) -> None:
        """Write the table now and return once it is durable."""
        self.file.changed()

    @property
    def pending(self) -> bool:
        """A change to the table is not durable yet."""
        return self.file.pending

    def sync(self) -> None:
        """Return once every change made so far is durable."""
        self.file.sync()

    def replace_from_master(self, wrapper: dict[str, Any]) -> bool:
        """A slave takes its master's table (GET_ALL_TOPIC_CONFIG's TopicConfigSerializeWrapper)
        when its data version differs, and persists it; True if it did. Raises
        InvalidNameError for a bad entry, before anything changes."""
        version = DataVersion.from_json(wrapper.get("dataVersion") or {})
        table = {}
        for name, raw in (wrapper.get("topicConfigTable") or {}).items():
            tc = TopicConfig.from_json(raw)
            if tc.topic_name != name:
                raise InvalidNameError(f"master's topic entry {name!r} holds topic {tc.topic_name!r}")
            table[name] = tc
        with self._lock:
            if version == self.data_version:
                return False
            self._table = table
            self.data_version = version
        self.persist()
        return True

    # -- queries -----------------------------------------------------------------------

    def select_topic_config(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

    def topic_configs(self) -> dict[str, TopicConfig]:
        with self._lock:
            return dict(self._table)

    # -- changes -----------------------------------------------------------------------

    def update_topic_config(self, tc: TopicConfig) -> TopicConfig:
        with self._lock:
            old = self._table.get(tc.topic_name)
            self._table[tc.topic_name] = tc
            self._next_version()
        self._changed(tc, "updated" if old else "created")
        return tc

    def learn_queues(self, queues: Iterable[tuple[str, int]]) -> list[TopicConfig]:
        """A slave's replicated log holds messages in these (topic, queue id)s: make each topic
        servable now if its config (from the master's sync) is missing or too narrow, with the
        highest queue id seen + 1 queues until the master's config arrives. Returns the new
        configs (one write of the table for all). The data version becomes one no master
        makes (stateVersion + 1), so the next sync takes the master's table again."""
        with self._lock:
            learned: dict[str, TopicConfig] = {}
            for topic, queue_id in queues:
                old = learned.get(topic) or self._table.get(topic)
                if old is not None and queue_id < old.read_queue_nums:
                    continue
                nums = queue_id + 1
                if old is None:
                    tc = TopicConfig(topic, nums, nums)
                else:
                    tc = replace(old, read_queue_nums=nums, write_queue_nums=max(nums, old.write_queue_nums))
                self._table[topic] = learned[topic] = tc
            if learned:
                self._next_version(from_log=True)
        if learned:
            self._changed(list(learned.values()), "learned from the replicated log")
        return list(learned.values())

    def is_system_topic(self, topic: str) -> bool:
        """One of the topics the broker makes itself (mqadmin may not delete them)."""
        return topic in {tc.topic_name for tc in self._system_topics()} or topic in NOT_ALLOWED_SEND_TOPICS

    def delete_topic_config(self, topic: str) -> TopicConfig | None:
        with self._lock:
            old = self._table.pop(topic, None)
            if old is not None:
                self.data_version = self.data_version.next()
        if old is not None:
            self.persist()
            log.info("topic %s deleted", topic)
        return old

    def create_topic_in_send_message_method(
        self, topic: str, default_topic: str, client_default_topic_queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """Create ``topic`` from the template ``default_topic`` (TBW102) on a producer's first
        send, as RocketMQ does; None when the template is missing or not inheritable."""
        check_topic(topic)
        with self._lock:
            existing = self._table.get(topic)
            made = None if existing is not None else self._from_template(
                topic, default_topic, client_default_topic_queue_nums, topic_sys_flag)
            if made is not None:
                self._table[topic] = made
                self._next_version()
        if existing is not None:
            self.sync()  # created by another call a moment ago: durable before it is used
            return existing
        if made is not None:
            self._changed(made, f"auto-created from {default_topic}")
        return made

    def _from_template(self, topic: str, default_topic: str, client_default_topic_queue_nums: int,
                       topic_sys_flag: int) -> TopicConfig | None:
        """The config ``topic`` inherits from ``default_topic``, or None (logged) when it may not."""
        with self._lock:
            template = self._table.get(default_topic)
            if template is None:
                log.warning(
                    "cannot auto-create topic %s: default topic %s does not exist", topic, default_topic
                )
                return None
            perm = template.perm
            if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self._config.auto_create_topic_enable:
                perm = PermName.PERM_READ | PermName.PERM_WRITE
            if not PermName.is_inherited(perm):
                log.warning(
                    "cannot auto-create topic %s: default topic %s has no inherit permission %s",
                    topic,
                    default_topic,
                    PermName.to_string(perm),
                )
                return None
            queue_nums = max(0, min(client_default_topic_queue_nums, template.write_queue_nums))
            return TopicConfig(
                topic,
                queue_nums,
                queue_nums,
                perm=perm & ~PermName.PERM_INHERIT,
                topic_filter_type=template.topic_filter_type,
                topic_sys_flag=topic_sys_flag,
            )

    def create_topic_in_send_message_back_method(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0, *, wait: bool = True
    ) -> TopicConfig:
        """Create a retry or DLQ topic (``%RETRY%group``, ``%DLQ%group``) if missing. Without
        ``wait`` the creation is not waited for: the caller calls :meth:`sync`."""
        with self._lock:
            existing = self._table.get(topic)
            if existing is None:
                tc = TopicConfig(topic, queue_nums, queue_nums, perm=perm, topic_sys_flag=topic_sys_flag)
                self._table[topic] = tc
                self._next_version()
        if existing is not None:
            if wait:
                self.sync()  # created by another call a moment ago: durable before it is used
            return existing
        self._changed(tc, "created for a consumer group", wait=wait)
        return tc

    def _next_version(self, *, from_log: bool = False) -> None:
        version = self.data_version.next()
        self.data_version = replace(version, state_version=version.state_version + 1) if from_log else version

    def _changed(self, changed: TopicConfig | list[TopicConfig], what: str, *, wait: bool = True) -> None:
        """After a change (made under the lock, outside it now): make it durable, sharing the
        write with changes made meanwhile (or, without ``wait``, leave that to the caller's
        sync), then tell the listeners."""
        self.file.changed(wait=wait)
        for tc in changed if isinstance(changed, list) else [changed]:
            log.info("topic %s %s: %s", tc.topic_name, what, tc)
            for listener in list(self.on_change):
                try:
                    listener(tc)
                except Exception:  # a listener's failure must not undo a persisted change
                    log.exception("topic change listener failed for %s", tc.topic_name)
