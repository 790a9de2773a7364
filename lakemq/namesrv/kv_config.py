"""KVConfigManager: the name server's namespaced key/value settings (ORDER_TOPIC_CONFIG and
the like), persisted to kvConfig.json as RocketMQ's ``{"configTable": {namespace: {k: v}}}``.

Writes go to a temporary file that replaces the old one, so a crash leaves either the old or
the new table. Safe to call from any thread.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from lakemq.common.durable import write_file_durably
from lakemq.errors import ConfigError

__all__ = ["NAMESPACE_ORDER_TOPIC_CONFIG", "KVConfigManager"]

log = logging.getLogger(__name__)

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        if not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            table = data.get("configTable") or {}
            loaded = {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()}
        except (OSError, ValueError, AttributeError) as exc:
            raise ConfigError(f"cannot load {self.path}: {exc}") from exc
        with self._lock:
            self._table = loaded
        log.info("loaded %d kv namespaces from %s", len(loaded), self.path)

    def put(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            self._table.setdefault(namespace, {})[key] = value
            self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        with self._lock:
            table = self._table.get(namespace)
            if table is None or table.pop(key, None) is None:
                return
            if not table:
                del self._table[namespace]
            self._persist()

    def namespace(self, namespace: str) -> dict[str, str]:
        with self._lock:
            return dict(self._table.get(namespace, {}))

    def _persist(self) -> None:
        write_file_durably(self.path, json.dumps({"configTable": self._table}, indent=4, sort_keys=True))
