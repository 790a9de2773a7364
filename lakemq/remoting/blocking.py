"""A remoting connection driven by the calling thread with a blocking socket, for blocking
faces that would otherwise hand every request to an event loop's thread and wait for it there
(two thread wake-ups and GIL hand-offs per request).

One BlockingConnection serves one thread, one request at a time: it writes the request's frame
and reads until that request's answer, through the same codec as the asyncio connection
(lakemq.remoting.codec). It sends no heartbeats, so a broker never sends requests on it; a
frame that is not the awaited answer (one that came after its request timed out) is dropped.
"""

from __future__ import annotations

import itertools
import logging
import socket
import struct
import time

from lakemq.errors import FrameError, RemotingConnectError, RemotingTimeoutError
from lakemq.remoting.client import parse_addr
from lakemq.remoting.codec import (
    DEFAULT_MAX_FRAME_LENGTH,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FrameDecoder,
    RemotingCommand,
    encode_frame,
)

__all__ = ["BlockingConnection"]

log = logging.getLogger(__name__)

_READ_SIZE = 256 * 1024
_TIMEVAL = struct.Struct("@ll")  # struct timeval, for SO_RCVTIMEO


class BlockingConnection:
    def __init__(self, addr: str, connect_timeout: float = 3.0,
                 max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        host, port = parse_addr(addr)
        try:
            self._sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as exc:
            raise RemotingConnectError(f"connect to {addr} failed: {exc}") from exc
        # Blocking mode, the read's time limit kept by the kernel (SO_RCVTIMEO): a socket
        # timeout would add a poll() before every read.
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._read_timeout = -1.0
        self.addr = addr
        self._decoder = FrameDecoder(max_frame_length)
        self._opaques = itertools.count(1)
        self._broken = False

    @property
    def is_open(self) -> bool:
        return not self._broken

    def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Write ``request`` (its opaque is assigned here) and read its answer; at most
        ``timeout`` seconds. RemotingConnectError when the connection fails (it is then
        closed), RemotingTimeoutError when the answer is late (the connection stays usable)."""
        if self._broken:
            raise RemotingConnectError(f"connection to {self.addr} is closed")
        request.opaque = opaque = next(self._opaques) & 0x7FFFFFFF
        request.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        deadline = time.monotonic() + timeout
        try:
            self._sock.sendall(encode_frame(request))
            while True:
                data = self._read(deadline, request.code)
                for command in self._decoder.feed(data):
                    if command.flag & FLAG_RESPONSE and command.opaque == opaque:
                        return command
                    log.debug("dropping a frame from %s that is not the answer to %d", self.addr, opaque)
        except (OSError, FrameError) as exc:
            self.close()
            raise RemotingConnectError(f"connection to {self.addr} failed: {exc}") from exc

    def _read(self, deadline: float, code: int) -> bytes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RemotingTimeoutError(f"no response from {self.addr} to code {code} in time")
        if abs(left - self._read_timeout) > 0.001:  # one setsockopt per new limit, not per read
            seconds = int(left)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                  _timeval(seconds, int((left - seconds) * 1e6)))
            self._read_timeout = left
        try:
            data = self._sock.recv(_READ_SIZE)
        except (BlockingIOError, TimeoutError):  # SO_RCVTIMEO ran out
            raise RemotingTimeoutError(f"no response from {self.addr} to code {code} in time") from None
        if not data:
            raise ConnectionResetError("closed by the peer")
        return data

    def close(self) -> None:
        self._broken = True
        try:
            self._sock.close()
        except OSError:
            pass


def _timeval(seconds: int, micros: int) -> bytes:
    return _TIMEVAL.pack(seconds, micros)
