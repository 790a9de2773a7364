"""Types of the compiled module lakemq/store/_reads.pyx."""

from collections.abc import Callable
from typing import Any

def gather_records(entries: Any, codes: frozenset[int] | None, max_msg_nums: int, max_total_bytes: int,
                   max_phy: int, memory_limit: int, disk_bytes: int, disk_count: int, memory_bytes: int,
                   memory_count: int, view_of: Callable[[int], tuple[Any, int] | None]
                   ) -> tuple[bytes, int, int, int] | None: ...
