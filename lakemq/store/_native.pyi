"""Types of the compiled module lakemq/store/_native.pyx (see there and docs/NATIVE.md)."""

from collections.abc import Callable, Sequence
from mmap import mmap
from typing import Any, TypeVar

from lakemq.common.message import MessageExtBrokerInner
from lakemq.store.results import PutMessageResult

_R = TypeVar("_R")

def java_hash(text: str) -> int: ...

class PutMessageSpinLock:
    def __enter__(self) -> None: ...
    def __exit__(self, *exc: object) -> None: ...

class Records:
    count: int
    total: int
    first_queue_offset: int
    def write(self, mm: mmap, pos: int, physical_offset: int, now: int, store_ip: bytes, store_port: int,
              table: dict[tuple[str, int], int]) -> None: ...
    def msg_ids(self, prefix: bytes, physical_offset: int) -> str: ...

class RecordEncoder:
    def __init__(self, valid_topics: set[str], topic_parts: dict[str, bytes],
                 born_hosts: dict[str, tuple[bytes, int]], max_body: int, max_props: int, max_size: int,
                 properties_to_string: Callable[[dict[str, str]], str]) -> None: ...
    def gather(self, msgs: Sequence[MessageExtBrokerInner], slow: Callable[[MessageExtBrokerInner], Any],
               refused_bits: int, check_delay: bool) -> Records | PutMessageResult: ...

class IndexKeys:
    count: int
    @staticmethod
    def of(keys: list[str], phys: list[int], timestamps: list[int]) -> IndexKeys: ...
    def __len__(self) -> int: ...
    def phy(self, i: int) -> int: ...
    def timestamp(self, i: int) -> int: ...

class DispatchBatch:
    count: int
    end_pos: int
    stop: int
    topics: list[str]
    def __len__(self) -> int: ...
    def consume_queue_runs(self) -> tuple[list[tuple[str, int, int, bytes]], int | None]: ...
    def index_keys(self, last_indexed: int) -> IndexKeys: ...
    def requests(self, request_type: Callable[..., _R],
                 properties_of: Callable[[str], dict[str, str]]) -> list[_R]: ...

def scan_records(buf: bytes | bytearray | memoryview, pos: int, physical_offset: int, max_count: int, *,
                 check_crc: bool = False,
                 delay_tags_code: Callable[[str, int], int | None] | None = None) -> DispatchBatch: ...

def put_index_keys(mm: mmap, hash_slot_num: int, index_num: int, index_count: int, begin_timestamp: int,
                   keys: IndexKeys, start: int) -> tuple[int, int, int, int | None]: ...
