"""A Delta table deltalake cannot read is the lake's damage, said in one line.

deltalake's errors carry a Rust backtrace in their text (some 15 lines), and an uncaught one
read as a fault of lakemq. Reading a table through :func:`reading_table` turns them into a
LakeError naming the table and the damage; the whole error goes to the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from lakemq.errors import LakeError
from lakemq.tiering.lake_fs import LakeLocation

__all__ = ["damage_line", "reading_table"]

log = logging.getLogger(__name__)


def damage_line(lake: LakeLocation, table: str, exc: BaseException) -> str:
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return (f"the lake's {table} table ({lake.table_uri(table)}) cannot be read: {first}. The lake is damaged, "
            "not lakemq: restore the table (its _delta_log) from a copy")


@contextmanager
def reading_table(lake: LakeLocation, table: str) -> Iterator[None]:
    """Turn deltalake's errors inside the block (a commit conflict excepted: the caller
    retries those) into one LakeError line about ``table``."""
    from deltalake.exceptions import CommitFailedError, DeltaError

    try:
        yield
    except CommitFailedError:
        raise
    except DeltaError as exc:
        log.exception("the lake's %s table cannot be read", table)
        raise LakeError(damage_line(lake, table, exc)) from exc
