"""Types of the compiled module lakemq/store/_scan.pyx (see there and docs/NATIVE.md)."""

from collections.abc import Callable
from typing import TypeVar

_R = TypeVar("_R")

class DispatchBatch:
    count: int
    end_pos: int
    stop: int
    topics: list[str]
    def __len__(self) -> int: ...
    def arrivals(self) -> list[tuple[str, int, int, int, int]]: ...
    def requests(self, request_type: Callable[..., _R],
                 properties_of: Callable[[str], dict[str, str]]) -> list[_R]: ...

def scan_records(buf: bytes | bytearray | memoryview, pos: int, physical_offset: int, max_count: int, *,
                 check_crc: bool = False,
                 delay_tags_code: Callable[[str, int], int | None] | None = None) -> DispatchBatch: ...
