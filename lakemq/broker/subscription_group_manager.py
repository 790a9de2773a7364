"""Consumer group configs (RocketMQ SubscriptionGroupConfig), auto-created on first use.

Persisted as ``{config_dir}/subscriptionGroup.json``
(``{"subscriptionGroupTable": {group: {...}}, "dataVersion": {...}}``), by group commit: a
change is durable when the call that made it returns, and changes made at once share one
write (:class:`lakemq.broker.config_file.ConfigFile`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from lakemq.broker.config import BrokerConfig
from lakemq.broker.config_file import ConfigFile, json_text, load_json
from lakemq.common.constants import MASTER_ID
from lakemq.common.validation import GROUP_MAX_LENGTH, check_group, is_valid_name
from lakemq.errors import InvalidNameError
from lakemq.remoting.bodies import DataVersion

__all__ = ["SYSTEM_GROUPS", "SubscriptionGroupConfig", "SubscriptionGroupManager"]

log = logging.getLogger(__name__)

# Groups RocketMQ's admin tools and self tests use; present on every broker.
SYSTEM_GROUPS: Final = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_SYS_RMQ_TRANS")

_FIELDS: Final = (
    ("group_name", "groupName"),
    ("consume_enable", "consumeEnable"),
    ("consume_from_min_enable", "consumeFromMinEnable"),
    ("consume_broadcast_enable", "consumeBroadcastEnable"),
    ("retry_queue_nums", "retryQueueNums"),
    ("retry_max_times", "retryMaxTimes"),
    ("broker_id", "brokerId"),
    ("which_broker_when_consume_slowly", "whichBrokerWhenConsumeSlowly"),
    ("notify_consumer_ids_changed_enable", "notifyConsumerIdsChangedEnable"),
    ("consume_message_orderly", "consumeMessageOrderly"),
)

_INT_FIELDS: Final = frozenset(
    {"retry_queue_nums", "retry_max_times", "broker_id", "which_broker_when_consume_slowly"}
)


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {value!r}")
        return value.lower() == "true"
    return bool(value)


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16  # then the message goes to %DLQ%group
    broker_id: int = MASTER_ID
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    # RocketMQ 5's consumeMessageOrderly: the group's 5.x consumers get FIFO delivery (the
    # Settings exchange tells them; lakemq.broker.grpc.telemetry).
    consume_message_orderly: bool = False

    def __post_init__(self) -> None:
        check_group(self.group_name)
        if self.retry_queue_nums < 0 or self.retry_max_times < 0:
            raise InvalidNameError("retryQueueNums and retryMaxTimes must be >= 0")

    def to_json(self) -> dict[str, Any]:
        return {camel: getattr(self, snake) for snake, camel in _FIELDS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubscriptionGroupConfig:
        values: dict[str, Any] = {}
        for snake, camel in _FIELDS:
            if camel in data:
                values[snake] = data[camel]
        try:
            values["group_name"] = str(values["group_name"])
            for key, value in values.items():
                if key in _INT_FIELDS:
                    values[key] = int(value)
                elif key != "group_name":
                    values[key] = _as_bool(value)
            return cls(**values)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidNameError(f"bad subscription group config {data!r}: {exc}") from exc


class SubscriptionGroupManager:
    def __init__(self, config: BrokerConfig, config_dir: Path) -> None:
        self._config = config
        self.path = config_dir / "subscriptionGroup.json"
        self.file = ConfigFile(self.path, lambda: json_text(self.encode()))
        self._lock = threading.Lock()
        self._table: dict[str, SubscriptionGroupConfig] = {
            g: SubscriptionGroupConfig(g) for g in SYSTEM_GROUPS
        }
        self.data_version = DataVersion.now()

    def load(self) -> None:
        data = load_json(self.path)
        if data is None:
            return
        with self._lock:
            for name, raw in (data.get("subscriptionGroupTable") or {}).items():
                self._table[name] = SubscriptionGroupConfig.from_json(raw)
            self.data_version = DataVersion.from_json(data.get("dataVersion") or {})

    def encode(self) -> dict[str, Any]:
        with self._lock:
            return {
                "subscriptionGroupTable": {g: c.to_json() for g, c in self._table.items()},
                "dataVersion": self.data_version.to_json(),
            }

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
        """A slave takes its master's groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG's
        SubscriptionGroupWrapper) when their data version differs, and persists them; True if
        it did. Raises InvalidNameError for a bad entry, before anything changes."""
        version = DataVersion.from_json(wrapper.get("dataVersion") or {})
        table = {str(name): SubscriptionGroupConfig.from_json(raw)
                 for name, raw in (wrapper.get("subscriptionGroupTable") or {}).items()}
        with self._lock:
            if version == self.data_version:
                return False
            self._table = table
            self.data_version = version
        self.persist()
        return True

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config if it exists; never creates one (no file write)."""
        return self._table.get(group)

    def find_subscription_group_config(self, group: str, *, wait: bool = True) -> SubscriptionGroupConfig | None:
        """The group's config; auto-created (and persisted) when enabled and the name is valid.
        Without ``wait`` a creation is not waited for: the caller calls :meth:`sync`."""
        existing = self._table.get(group)
        if existing is not None or not self._config.auto_create_subscription_group:
            return existing
        if not is_valid_name(group, GROUP_MAX_LENGTH):
            return None
        with self._lock:
            found = self._table.get(group)
            created = found is None
            if found is None:
                found = self._table[group] = SubscriptionGroupConfig(group)
                self.data_version = self.data_version.next()
        try:
            if created:
                log.info("subscription group %s auto-created", group)
                self.file.changed(wait=wait)
            elif wait:
                self.sync()  # created by another call a moment ago: durable before it is used
        except OSError as exc:  # a full disk must not fail the pull: auto-creation repeats after a restart
            log.error("auto-created subscription group %s not persisted: %s", group, exc)
        return found

    def update_subscription_group_config(self, config: SubscriptionGroupConfig) -> None:
        with self._lock:
            self._table[config.group_name] = config
            self.data_version = self.data_version.next()
        self.persist()

    def delete_subscription_group_config(self, group: str) -> bool:
        with self._lock:
            removed = self._table.pop(group, None) is not None
            if removed:
                self.data_version = self.data_version.next()
        if removed:
            self.persist()
        return removed

    def groups(self) -> dict[str, SubscriptionGroupConfig]:
        with self._lock:
            return dict(self._table)
