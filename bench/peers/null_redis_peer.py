"""A Python server that answers redis-py's XADD as redis-server does and stores nothing but an
append-only file: the least any Python server must do for redis's durability, driven by the
same client as redis itself (bench/ceiling_bench.py's redis part).

It runs on the event loop lakemq's broker runs (uvloop where installed), parses requests with
hiredis' C reader (the fastest usual RESP parser in Python), and does what redis-server does
per event-loop turn (its ``beforeSleep``): the bytes the turn received are written to the file
with one ``write``, fsync'ed with one ``fdatasync`` under ``appendfsync always`` (once a second
on another thread under ``everysec``), and only then is each connection's reply written, one
write per connection. No stream is kept: an XADD is answered with a fresh entry id.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import cast

from bench.peers.base import Durability
from bench.peers.process import free_port, wait_until
from bench.peers.redis_peer import RedisPeer

__all__ = ["NullRedisAlwaysPeer", "NullRedisEverysecPeer"]

_OK = b"+OK\r\n"
_PONG = b"+PONG\r\n"
_HELLO_3 = b"%1\r\n$5\r\nproto\r\n:3\r\n"  # redis-py 8 speaks RESP3 and checks this field


class _AppendOnlyFile:
    """The bytes received, written and (``always``) fsync'ed once per turn before the turn's
    XADD replies go out."""

    def __init__(self, loop: asyncio.AbstractEventLoop, path: Path, always: bool) -> None:
        self._loop = loop
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._always = always
        self._buffer: list[bytes] = []
        self._replies: dict[asyncio.Transport, list[bytes]] = {}
        self._due = False
        if not always:
            threading.Thread(target=self._fsync_every_second, daemon=True).start()

    def log(self, data: bytes) -> None:
        """Requests as they came (redis logs only writes; here XADDs are nearly all the bytes)."""
        self._buffer.append(data)

    def holds(self, transport: asyncio.Transport) -> bool:
        return transport in self._replies

    def reply_when_durable(self, transport: asyncio.Transport, reply: bytes) -> None:
        held = self._replies.get(transport)
        if held is None:
            self._replies[transport] = [reply]
        else:
            held.append(reply)
        if not self._due:
            self._due = True
            self._loop.call_soon(self._before_sleep)

    def _before_sleep(self) -> None:
        self._due = False
        os.write(self._fd, b"".join(self._buffer))
        self._buffer.clear()
        if self._always:
            os.fdatasync(self._fd)
        replies, self._replies = self._replies, {}
        for transport, held in replies.items():
            if not transport.is_closing():
                transport.write(b"".join(held))

    def _fsync_every_second(self) -> None:
        while True:
            time.sleep(1.0)
            os.fdatasync(self._fd)


class _RespProtocol(asyncio.Protocol):
    def __init__(self, aof: _AppendOnlyFile) -> None:
        import hiredis

        self._aof = aof
        self._reader = hiredis.Reader()
        self._transport: asyncio.Transport | None = None
        self._ms = 0
        self._seq = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        reader, transport = self._reader, self._transport
        assert transport is not None
        reader.feed(data)
        self._aof.log(data)
        replies: list[bytes] = []
        durable = False  # an XADD's reply (and any after it) waits for the turn's write
        while (command := reader.gets()) is not False:
            name = command[0].upper()
            if name == b"XADD":
                replies.append(self._entry_id())
                durable = True
            elif name == b"PING":
                replies.append(_PONG)
            elif name == b"HELLO":
                replies.append(_HELLO_3)
            else:  # XGROUP CREATE, CLIENT SETINFO: accepted
                replies.append(_OK)
        if not replies:
            return
        if durable or self._aof.holds(transport):  # replies keep their order
            self._aof.reply_when_durable(transport, b"".join(replies))
        else:
            transport.write(b"".join(replies))

    def _entry_id(self) -> bytes:
        ms = time.time_ns() // 1_000_000
        if ms <= self._ms:
            self._seq += 1
        else:
            self._ms, self._seq = ms, 0
        entry = f"{self._ms}-{self._seq}".encode()
        return b"$%d\r\n%s\r\n" % (len(entry), entry)


def serve(port: int, path: Path, always: bool) -> None:
    from lakemq.remoting.event_loop import new_event_loop

    loop = new_event_loop()
    aof = _AppendOnlyFile(loop, path, always)
    server = loop.run_until_complete(loop.create_server(lambda: _RespProtocol(aof), "127.0.0.1", port))
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.run_forever()
    server.close()
    loop.close()


class _NullRedisPeer(RedisPeer):
    """redis-py against the Python server above instead of redis-server."""

    def start(self, workdir: Path) -> None:
        self.port = free_port()
        proc = self.spawn("null-redis", [
            sys.executable, "-m", "bench.peers.null_redis_peer", str(self.port),
            str(workdir / "appendonly.aof"), self.appendfsync,
        ], env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        wait_until(self._pings, 20, f"the null RESP server on 127.0.0.1:{self.port}", proc.alive)


class NullRedisEverysecPeer(_NullRedisPeer):
    key = "null-redis-everysec"
    title = "Python null RESP server, AOF everysec"
    durability = Durability.ASYNC
    settings = "an append-only file written each turn, fdatasync once a second"
    appendfsync = "everysec"


class NullRedisAlwaysPeer(_NullRedisPeer):
    key = "null-redis-always"
    title = "Python null RESP server, AOF always"
    durability = Durability.SYNC
    settings = "an append-only file written and fdatasync'ed each turn before the replies"
    appendfsync = "always"


if __name__ == "__main__":
    serve(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "always")
