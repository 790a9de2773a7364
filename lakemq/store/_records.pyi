"""Types of the compiled module lakemq/store/_records.pyx (see there and docs/NATIVE.md)."""

from collections.abc import Callable, Sequence
from mmap import mmap
from typing import Any

from lakemq.common.message import MessageExtBrokerInner
from lakemq.store.results import PutMessageResult

class Records:
    count: int
    total: int
    first_queue_offset: int
    body_bytes: int
    def write(self, mm: mmap, pos: int, physical_offset: int, now: int, store_ip: bytes, store_port: int,
              table: dict[tuple[str, int], int]) -> None: ...
    def msg_ids(self, prefix: bytes, physical_offset: int) -> str: ...

class RecordEncoder:
    def __init__(self, valid_topics: set[str], topic_parts: dict[str, bytes],
                 born_hosts: dict[str, tuple[bytes, int]], max_body: int, max_props: int, max_size: int,
                 properties_to_string: Callable[[dict[str, str]], str]) -> None: ...
    def gather(self, msgs: Sequence[MessageExtBrokerInner], slow: Callable[[MessageExtBrokerInner], Any],
               refused_bits: int, check_delay: bool) -> Records | PutMessageResult: ...
    def gather_batch(self, data: bytes, topic: str, queue_id: int, sys_flag: int, born_ts: int, born_host: str,
                     reconsume: int, suffix: bytes) -> Records | None: ...
    def gather_one(self, body: bytes, properties: str, topic: str, queue_id: int, flag: int, sys_flag: int,
                   born_ts: int, born_host: str, reconsume: int, suffix: bytes,
                   refused_bits: int) -> Records | None: ...
