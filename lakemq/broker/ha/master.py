"""The HA listener: a master pushes its CommitLog to every slave that connects (RocketMQ's
HAService.AcceptSocketService and HAConnection, on the broker's event loop).

Per connection the slave's first report says where to start (0: at the start of the
master's last CommitLog file); from there a writer task sends what the CommitLog holds, at
most ``haTransferBatchSize`` bytes per transfer and never across a file, and an empty
transfer after ``haSendHeartbeatInterval`` without one. When it has sent everything it waits
to be woken (:meth:`HaServer.notify`, called when new records were dispatched) or 100 ms, as
RocketMQ's writer does. Every later report is the slave's acknowledgement
(:class:`ReplicationProgress`). A report beyond the master's own max offset (the slave holds
bytes the master lacks) or silence for ``haHousekeepingInterval`` closes the link.

A SYNC_FLUSH master ships only what its group commit has synced (``flushed_only``): a slave
never holds bytes its master could lose in a power cut, so after a cut of both machines the
slave is never ahead of the recovered master and resumes by itself (docs/REPLICATION.md, "a
slave ahead of its master"). The writer is then woken after each flush as well.

An ASYNC_FLUSH SYNC_MASTER back from an abnormal exit holds its puts until a slave's first
report, and copies what a slave holds past its end first (``catch_up``, lakemq.broker.ha.catch_up).
Such a master serves a link, and counts its reports, only once the link's slave is in its
durable roster of slaves (``roster``, lakemq.broker.ha.roster), so that after a cut it waits
for every slave that may hold what it acknowledged.

Every broker listens, as RocketMQ's do; a slave's listener serves its own CommitLog.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Protocol, cast

from lakemq.broker.ha.catch_up import MasterCatchUp
from lakemq.broker.ha.config import HaConfig
from lakemq.broker.ha.progress import ReplicationProgress, SlaveLink
from lakemq.broker.ha.roster import SlaveRoster
from lakemq.broker.ha.wire import TRANSFER_HEADER, ReportReader
from lakemq.common.aio import wait_event

__all__ = ["CommitLogSource", "HaServer"]

log = logging.getLogger(__name__)

# A writer with nothing to send looks again this often even unwoken (RocketMQ: 100 ms).
_IDLE_POLL_S = 0.1


class CommitLogSource(Protocol):
    """The store as a master reads it for its slaves (MessageStore)."""

    def get_commit_log_data(self, offset: int) -> memoryview | None: ...
    def get_max_phy_offset(self) -> int: ...
    def get_min_phy_offset(self) -> int: ...
    def get_flushed_phy_offset(self) -> int: ...

    @property
    def commit_log_file_size(self) -> int: ...


class HaServer:
    def __init__(self, store: CommitLogSource, config: HaConfig, progress: ReplicationProgress,
                 host: str, port: int, *, flushed_only: bool = False, catch_up: MasterCatchUp | None = None,
                 roster: SlaveRoster | None = None) -> None:
        self.store = store
        self.config = config
        self.progress = progress
        # SYNC_FLUSH: ship only synced bytes, so a power cut of both machines cannot leave
        # the slave holding bytes the master lost (which would stop replication).
        self.flushed_only = flushed_only
        self.catch_up = catch_up  # puts held after an abnormal exit until a slave reported
        self.roster = roster  # a link is served once its slave is recorded
        self._ahead_logged: set[int] = set()  # a refused slave's offsets, each logged once
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._connections: set[_HaConnection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._wake_pending = False

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("HA server is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def address(self) -> str:
        return f"{self._host}:{self.port}"

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._server = await self._loop.create_server(
            lambda: _HaConnection(self), self._host, self._port, reuse_address=True)
        log.info("HA listening on %s", self.address)

    async def shutdown(self) -> None:
        if self.catch_up is not None:
            await self.catch_up.shutdown()
        if self._server is None:
            return
        self._server.close()
        for connection in list(self._connections):
            connection.close()
        await asyncio.gather(*(c.closed() for c in list(self._connections)))
        await self._server.wait_closed()
        self._server = None

    def notify(self) -> None:
        """New CommitLog bytes may be there: wake every idle writer (loop thread)."""
        self.progress.sample()
        for connection in self._connections:
            connection.wake()

    def notify_threadsafe(self, *_: object) -> None:
        """notify from any thread: the store's dispatch (new records) and a SYNC_MASTER put,
        which waits for the writers. At once on the loop's own thread, which appends and
        dispatches its own puts (a hand-off to the running thread would cost an eventfd write
        and read per put); from another, handed to the loop, at most one hand-off pending."""
        if threading.get_ident() == self._loop_thread:
            self.notify()
            return
        loop = self._loop
        if self._wake_pending or loop is None:
            return
        self._wake_pending = True
        try:
            loop.call_soon_threadsafe(self._notify_handed)
        except RuntimeError:  # the loop is closed: shutting down
            pass

    def slave_ahead(self, addr: str, offset: int, max_offset: int) -> None:
        """A slave holds bytes past this broker's end: refused (the link closes), never cut."""
        if offset in self._ahead_logged:  # the slave reconnects every few seconds
            log.debug("HA: slave %s still ahead at offset %d; refused again", addr, offset)
            return
        self._ahead_logged.add(offset)
        log.error(
            "HA: slave %s holds CommitLog offsets %d to %d (%d bytes) past this broker's end %d: this broker "
            "does not have them (a power cut took what it had not flushed, or its store was replaced), and "
            "they may hold acknowledged messages; refusing the link, the slave keeps them. Nothing is cut "
            "automatically: make that slave the master (brokerId=0, a master brokerRole); this broker's "
            "CommitLog may differ from it from offset %d on (what it stored since its restart), so move this "
            "store aside and start this broker as the new master's slave on a copy of its commitlog/ "
            "(docs/REPLICATION.md, \"a slave ahead of its master\")",
            addr, max_offset, offset, offset - max_offset, max_offset, max_offset)

    def notify_flushed(self) -> None:
        """A flush moved the flushed offset (any thread): a ``flushed_only`` writer may send
        more. Nothing to wake without a slave: a SYNC_FLUSH broker alone pays no hand-off."""
        if self._connections:
            self.notify_threadsafe()

    def _notify_handed(self) -> None:
        # Only the hand-off clears its flag: a direct notify meanwhile must not let a second
        # hand-off be queued behind this one.
        self._wake_pending = False
        self.notify()


class _HaConnection(asyncio.Protocol):
    def __init__(self, server: HaServer) -> None:
        self._server = server
        self._reports = ReportReader()
        self._transport: asyncio.Transport | None = None
        self._link: SlaveLink | None = None
        self._writer: asyncio.Task[None] | None = None
        self._admission: asyncio.Task[None] | None = None  # the roster recording this link's slave
        self._admitted = False
        self._held_offset = -1  # the latest report while the admission runs
        self._more = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = asyncio.get_running_loop().create_future()
        self._last_read = time.monotonic()
        self._housekeeping: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both have what is used here.
        self._transport = stream = cast(asyncio.Transport, transport)
        stream.set_write_buffer_limits(high=4 * self._server.config.ha_transfer_batch_size + TRANSFER_HEADER.size)
        peer = transport.get_extra_info("peername")
        addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._link = self._server.progress.link_opened(addr)
        self._server._connections.add(self)
        log.info("HA: slave %s connected", addr)
        self._schedule_housekeeping()

    def data_received(self, data: bytes) -> None:
        self._last_read = time.monotonic()
        offset = self._reports.feed(data)
        if offset is not None:
            self._on_report(offset)

    def _on_report(self, offset: int) -> None:
        if self._link is None:
            return
        if self._admission is not None and not self._admitted:
            self._held_offset = offset
            return
        server, link = self._server, self._link
        max_offset = server.store.get_max_phy_offset()
        if not link.reported and server.catch_up is not None and \
                server.catch_up.first_report(offset, max_offset):
            self.close()  # ahead: its bytes are being copied, its next link finds the two equal
            return
        if offset > max_offset:
            # Before on_report, even for a first report: the slave's offset must not count as an
            # acknowledgement of puts this broker makes at offsets the slave holds other bytes at.
            server.slave_ahead(link.addr, offset, max_offset)
            self.close()
            return
        first = not link.reported
        if first and server.roster is not None and not self._admitted:
            # Not an acknowledgement before the slave is recorded: a cut could then make the
            # master forget the one slave holding what it acknowledged.
            self._held_offset = offset
            self._admission = asyncio.get_running_loop().create_task(self._admit(server.roster),
                                                                     name=f"ha-admit-{link.addr}")
            return
        server.progress.on_report(link, offset)
        if first:
            self._writer = asyncio.get_running_loop().create_task(self._push(offset), name=f"ha-push-{link.addr}")

    def connection_lost(self, exc: Exception | None) -> None:
        server, link = self._server, self._link
        server._connections.discard(self)
        if link is not None:
            server.progress.link_closed(link)
            log.info("HA: slave %s disconnected%s", link.addr, f": {exc}" if exc else "")
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        for task in (self._writer, self._admission):
            if task is not None:
                task.cancel()
        self._writable.set()
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- the link ------------------------------------------------------------------------

    def wake(self) -> None:
        self._more.set()

    def close(self) -> None:
        """At once, dropping what is unsent: a peer that stopped reading (a partition) would
        keep a graceful close waiting for its buffer forever."""
        if self._transport is not None:
            self._transport.abort()

    async def closed(self) -> None:
        await self._closed

    async def _admit(self, roster: SlaveRoster) -> None:
        try:
            await roster.admit()
        except Exception:  # the roster could not be written: the link must not count
            log.exception("HA: recording the slave of link %s failed: closing it", self._link.addr if self._link else "?")
            self.close()
            return
        self._admitted = True
        if not self._closed.done():
            self._on_report(self._held_offset)

    def _schedule_housekeeping(self) -> None:
        interval = self._server.config.ha_housekeeping_interval / 1000
        self._housekeeping = asyncio.get_running_loop().call_at(self._last_read + interval, self._check_silence)

    def _check_silence(self) -> None:
        silent = time.monotonic() - self._last_read
        if silent >= self._server.config.ha_housekeeping_interval / 1000:
            addr = self._link.addr if self._link else "?"
            log.warning("HA: slave %s silent for %.1f s: closing the link", addr, silent)
            self.close()
            return
        self._schedule_housekeeping()

    async def _push(self, request_offset: int) -> None:
        store, config = self._server.store, self._server.config
        transport = self._transport
        assert transport is not None
        if request_offset == 0:
            max_offset = store.get_max_phy_offset()
            next_offset = max_offset - max_offset % store.commit_log_file_size
        else:
            next_offset = request_offset
        link = self._link
        log.info("HA: sending to slave %s from offset %d (it asked for %d)",
                 link.addr if link else "?", next_offset, request_offset)
        batch = config.ha_transfer_batch_size
        heartbeat_s = config.ha_send_heartbeat_interval / 1000
        last_write = time.monotonic()
        warned_gone = False
        while not transport.is_closing():
            if not self._writable.is_set():
                await self._writable.wait()
                continue
            self._more.clear()  # before looking: a wake from now on is not lost
            limit = store.get_flushed_phy_offset() - next_offset if self._server.flushed_only else batch
            data = store.get_commit_log_data(next_offset) if limit > 0 else None
            if data is not None and len(data):
                size = min(len(data), batch, limit)
                chunk = bytes(data[:size])  # the mapping is not held by the transport's buffer
                data.release()
                transport.write(TRANSFER_HEADER.pack(next_offset, size))
                transport.write(chunk)
                next_offset += size
                last_write = time.monotonic()
                await asyncio.sleep(0)  # let the loop serve others between transfers
                continue
            if data is not None:
                data.release()
            elif limit > 0 and not warned_gone and next_offset < store.get_min_phy_offset():
                warned_gone = True
                log.error("HA: slave %s needs offset %d, below this broker's min offset %d (those files "
                          "were deleted): it cannot catch up; start it with an empty store",
                          link.addr if link else "?", next_offset, store.get_min_phy_offset())
            now = time.monotonic()
            if now - last_write >= heartbeat_s:
                transport.write(TRANSFER_HEADER.pack(next_offset, 0))
                last_write = now
            wait = min(_IDLE_POLL_S, max(0.0, heartbeat_s - (now - last_write)))
            await wait_event(self._more, wait)
