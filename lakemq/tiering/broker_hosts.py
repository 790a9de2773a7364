"""Which store hosts are one broker's in the lake: the union of its segment commits' hosts.

Every broker tiers into the one ``messages`` table and their queue and CommitLog offsets
overlap; a row's ``store_host`` is what names its broker. Each segment commit records the
hosts of its range (:data:`lakemq.tiering.tables.META_STORE_HOSTS`), so the Delta log alone
tells a broker's hosts, several when its address changed. Commits written before hosts were
recorded leave the answer incomplete; readers then cannot tell brokers apart by host alone.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from lakemq.tiering.damage import reading_table
from lakemq.tiering.lake_fs import LakeLocation
from lakemq.tiering.manifest import commit_hosts
from lakemq.tiering.tables import MESSAGES_TABLE, META_BROKER

__all__ = ["BrokerHosts", "HostsSeen"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HostsSeen:
    hosts: frozenset[str]  # the store hosts its commits record
    complete: bool  # every commit of the broker recorded its hosts (True when it has none)


class BrokerHosts:
    """A broker's hosts as the log says now; the log is read again only past the version seen,
    so a cold reader can ask on every lake read."""

    def __init__(self, lake: LakeLocation, broker: str) -> None:
        self.lake = lake
        self.broker = broker
        self._table: Any = None
        self._version = -1
        self._hosts: set[str] = set()
        self._complete = True
        self._lock = threading.Lock()

    def current(self) -> HostsSeen:
        with self._lock:
            self._refresh()
            return HostsSeen(frozenset(self._hosts), self._complete)

    def _refresh(self) -> None:
        from deltalake import DeltaTable

        uri = self.lake.table_uri(MESSAGES_TABLE)
        with reading_table(self.lake, MESSAGES_TABLE):
            if self._table is None:
                if not DeltaTable.is_deltatable(uri, storage_options=self.lake.delta_options()):
                    return
                self._table = DeltaTable(uri, storage_options=self.lake.delta_options())
            else:
                self._table.update_incremental()
            version = self._table.version()
            if version < self._version:  # the table made again: read it whole
                self._version, self._hosts, self._complete = -1, set(), True
            if version == self._version:
                return
            commits = self._table.history(None if self._version < 0 else version - self._version)
        seen = {int(c["version"]) for c in commits}
        if self._version >= 0 and not set(range(self._version + 1, version + 1)) <= seen:
            self._table, self._version, self._hosts, self._complete = None, -1, set(), True
            self._refresh()  # the newest commits did not come back: read the whole history
            return
        for commit in commits:
            if commit.get(META_BROKER) != self.broker or int(commit["version"]) <= self._version:
                continue
            hosts = commit_hosts(commit)
            if hosts is None:
                self._complete = False
            else:
                self._hosts.update(hosts)
        self._version = version
        log.debug("store hosts of %s at version %d: %s (complete: %s)", self.broker, version,
                  sorted(self._hosts), self._complete)
