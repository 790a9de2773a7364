"""Handles on a lake's Delta tables kept for one run of commits.

A tier run commits each of its ranges to ``message_keys`` and then ``messages``, reading each
table's state (its app transaction, the commit's version) before and after. Loading a table's
snapshot anew (its newest checkpoint and the commits after it) took 15-20 ms on a 2-hour
soak's lake, four times a range, and grows with the checkpoint. A handle kept for the run is
brought up to date before each use instead, reading only the commits since (2-4 ms).
deltalake does not move a handle past the commits made through it, so every use asks afresh:
a handle is never staler than a new load would be.
"""

from __future__ import annotations

from typing import Any

from lakemq.tiering.damage import reading_table
from lakemq.tiering.lake_fs import LakeLocation

__all__ = ["TableHandles"]


class TableHandles:
    def __init__(self, lake: LakeLocation) -> None:
        self.lake = lake
        self._tables: dict[str, Any] = {}

    def fresh(self, name: str) -> Any:
        """The ``deltalake.DeltaTable`` of table ``name`` at its newest version."""
        from deltalake import DeltaTable

        with reading_table(self.lake, name):
            table = self._tables.get(name)
            if table is None:
                table = DeltaTable(self.lake.table_uri(name), storage_options=self.lake.delta_options())
                self._tables[name] = table
            else:
                table.update_incremental()
            return table
