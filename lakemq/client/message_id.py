"""UNIQ_KEY generation (RocketMQ's MessageClientIDSetter), the msg id a producer returns.

16 bytes as 32 upper-case hex digits::

    +--------+-------+-----------+----------------------+---------+
    | ip (4) | pid 2 | random 4  | ms since month start | counter |
    |        |       | (per proc)|  (4, local time)     |   (2)   |
    +--------+-------+-----------+----------------------+---------+

The Java client puts its class loader's hash where we put a per-process random number; both
just separate two clients in one process space.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import random
import socket
import struct
import threading
import time
from typing import Literal

from lakemq.common.record import decode_message_id
from lakemq.errors import RecordError

__all__ = ["MessageIdGenerator", "create_uniq_id", "ip_from_id", "local_ip", "message_id_kind", "pid_from_id",
           "time_from_id"]

_FIX = struct.Struct(">4sHi")
_TAIL = struct.Struct(">IH")


def local_ip() -> str:
    """The address this host would use to reach the outside, else loopback. No packet is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def _month_bounds(now_ms: int) -> tuple[int, int]:
    now = dt.datetime.fromtimestamp(now_ms / 1000).astimezone()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = (start + dt.timedelta(days=32)).replace(day=1)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


class MessageIdGenerator:
    def __init__(self, ip: str | None = None, pid: int | None = None, salt: int | None = None) -> None:
        fixed = _FIX.pack(
            socket.inet_aton(ip or local_ip()),
            (os.getpid() if pid is None else pid) & 0xFFFF,
            random.getrandbits(31) if salt is None else salt,
        )
        self._prefix = fixed.hex().upper()
        self._counter = itertools.count()  # next() on it is atomic: no lock per id
        self._lock = threading.Lock()
        # (month start, next month start), replaced whole: a reader sees one month or the other.
        self._month = _month_bounds(int(time.time() * 1000))

    def create(self, now_ms: int | None = None) -> str:
        current = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        start, next_start = self._month
        if current >= next_start or current < start - 1_000_000:
            with self._lock:
                self._month = _month_bounds(current)
                start = self._month[0]
        diff = current - start
        # A clock stepped back by NTP gives a small negative diff; RocketMQ clamps it to 0. The
        # field holds the low 32 bits (Java's int cast), read back unsigned: past day 24 of a
        # month the span no longer fits 31 bits.
        if -1_000_000 < diff < 0:
            diff = 0
        diff &= 0xFFFFFFFF
        return self._prefix + _TAIL.pack(diff, next(self._counter) & 0xFFFF).hex().upper()


_DEFAULT: MessageIdGenerator | None = None


def create_uniq_id() -> str:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = MessageIdGenerator()
    return _DEFAULT.create()


def ip_from_id(msg_id: str) -> str:
    return socket.inet_ntoa(bytes.fromhex(msg_id)[:4])


def pid_from_id(msg_id: str) -> int:
    return int.from_bytes(bytes.fromhex(msg_id)[4:6], "big")


def time_from_id(msg_id: str, now_ms: int | None = None) -> int:
    """Epoch ms the id was made (within this or the previous month, as RocketMQ guesses)."""
    current = int(time.time() * 1000) if now_ms is None else now_ms
    span = int.from_bytes(bytes.fromhex(msg_id)[10:14], "big")
    start, _ = _month_bounds(current)
    if start + span >= current:
        start, _ = _month_bounds(start - 1)
    return start + span


def message_id_kind(text: str) -> Literal["offset", "unique"] | None:
    """Which id ``text`` is: an offset message id (store host + CommitLog offset, what
    VIEW_MESSAGE_BY_ID takes), a unique key (UNIQ_KEY, the id a producer gets back), or
    neither. Both are 32 hex digits; a unique key's pid and random bytes read as a port
    above 65535."""
    if len(text) != 32:
        return None
    try:
        decode_message_id(text)
    except RecordError:
        try:
            bytes.fromhex(text)
        except ValueError:
            return None
        return "unique"
    return "offset"
