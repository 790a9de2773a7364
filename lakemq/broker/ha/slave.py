"""A slave's link to its master (RocketMQ's HAService.HAClient, on the broker's event loop).

The slave connects to the master's HA listener, reports its CommitLog max offset, and
writes what the master sends into its own CommitLog at the same offsets (the store then
dispatches ConsumeQueue and IndexFile entries from it). It reports its max offset again after
every write and every ``haSendHeartbeatInterval``. A transfer that does not start where the
slave's log ends, bytes that are not CommitLog records, or ``haHousekeepingInterval`` of
silence from the master drop the link; the slave then connects again.

Only whole records go into the CommitLog: the master cuts its transfers anywhere, so the
part of a record still in flight waits in memory. The slave's log therefore always ends on a
record boundary, where a restart resumes (the bytes in memory are sent again), and the
offsets it reports are record ends, which is what a SYNC_MASTER waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol, cast

from lakemq.broker.ha.config import HaConfig
from lakemq.broker.ha.wire import REPORT, TransferReader, complete_records
from lakemq.errors import FrameError, StoreError

__all__ = ["CommitLogReplica", "HaClient"]

log = logging.getLogger(__name__)

_CONNECT_TIMEOUT_S = 3.0


class CommitLogReplica(Protocol):
    """The store as a slave writes it (MessageStore)."""

    def get_max_phy_offset(self) -> int: ...
    def append_to_commit_log(self, offset: int, data: bytes | bytearray | memoryview) -> int: ...


class HaClient:
    """Keeps one link to the master open while it knows the master's address."""

    def __init__(self, store: CommitLogReplica, config: HaConfig, master_address: str = "") -> None:
        self.store = store
        self.config = config
        self.master_address = master_address
        self._address_changed = asyncio.Event()
        self._link: _SlaveLink | None = None
        self._task: asyncio.Task[None] | None = None
        self.received_bytes = 0  # CommitLog bytes taken from masters, over every link

    @property
    def connected(self) -> bool:
        return self._link is not None and not self._link.lost

    def update_master_address(self, address: str) -> None:
        """The master's HA address (configured, or from the NameServer's answer)."""
        if address and address != self.master_address:
            log.info("HA: master address %s -> %s", self.master_address or "(none)", address)
            self.master_address = address
            self._address_changed.set()
            if self._link is not None:
                self._link.close()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ha-client")

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._link is not None:
            self._link.close()
            await self._link.lost_future

    async def _run(self) -> None:
        # RocketMQ retries a failed connect every 5 s; heartbeats shorter than that retry sooner.
        retry_s = min(5.0, self.config.ha_send_heartbeat_interval / 1000)
        failing = ""
        while True:
            address = self.master_address
            if not address:
                self._address_changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._address_changed.wait(), retry_s)
                continue
            host, _, port = address.rpartition(":")
            loop = asyncio.get_running_loop()
            try:
                _, link = await asyncio.wait_for(
                    loop.create_connection(lambda: _SlaveLink(self), host, int(port)), _CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
                if reason != failing:  # each new reason once, not every retry
                    log.warning("HA: cannot connect to master %s: %s; retrying every %.1f s", address, reason,
                                retry_s)
                failing = reason
                self._address_changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._address_changed.wait(), retry_s)
                continue
            failing = ""
            self._link = link
            opened = time.time()
            try:
                await link.lost_future
            finally:
                self._link = None
            if time.time() - opened < retry_s and self.master_address == address:
                # A link dropped at once (refused bytes, a master that refuses this slave):
                # not again in a tight loop.
                await asyncio.sleep(retry_s)


class _SlaveLink(asyncio.Protocol):
    def __init__(self, client: HaClient) -> None:
        self._client = client
        self._reader = TransferReader()
        self._transport: asyncio.Transport | None = None
        self._reported = -1
        self._last_write = self._last_read = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self.lost = False
        self.lost_future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both have what is used here.
        self._transport = cast(asyncio.Transport, transport)
        max_offset = self._client.store.get_max_phy_offset()
        # An empty slave takes whatever file start the master begins at.
        self._reader.expect(max_offset if max_offset > 0 else None)
        log.info("HA: connected to master %s; this slave is at offset %d", self._client.master_address, max_offset)
        self._report(max_offset)
        self._tick()

    def data_received(self, data: bytes) -> None:
        self._last_read = time.monotonic()
        reader, store = self._reader, self._client.store
        try:
            reader.feed(data)
            while end := complete_records(reader.data):  # file by file: a blank record ends one
                offset = reader.data_offset
                assert offset is not None
                with memoryview(reader.data)[:end] as records:
                    store.append_to_commit_log(offset, records)
                reader.consumed(end)
                self._client.received_bytes += end
        except (FrameError, StoreError) as exc:
            log.error("HA: dropping the link to master %s: %s", self._client.master_address, exc)
            self.close()
            return
        max_offset = store.get_max_phy_offset()
        if max_offset > self._reported:
            self._report(max_offset)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._timer is not None:
            self._timer.cancel()
        log.info("HA: link to master %s closed%s", self._client.master_address, f": {exc}" if exc else "")
        if not self.lost_future.done():
            self.lost_future.set_result(None)

    def close(self) -> None:
        """At once, dropping what is unsent: a peer that stopped reading (a partition) would
        keep a graceful close waiting for its buffer forever."""
        if self._transport is not None:
            self._transport.abort()

    def _report(self, offset: int) -> None:
        assert self._transport is not None
        if self._transport.is_closing():
            return
        self._transport.write(REPORT.pack(offset))
        self._reported = offset
        self._last_write = time.monotonic()

    def _tick(self) -> None:
        """Every heartbeat interval: report if nothing was reported meanwhile, and close the
        link if the master has been silent for the housekeeping interval."""
        config = self._client.config
        heartbeat_s = config.ha_send_heartbeat_interval / 1000
        now = time.monotonic()
        if now - self._last_read >= config.ha_housekeeping_interval / 1000:
            log.warning("HA: master %s silent for %.1f s: closing the link", self._client.master_address,
                        now - self._last_read)
            self.close()
            return
        if now - self._last_write >= heartbeat_s:
            self._report(self._client.store.get_max_phy_offset())
        self._timer = asyncio.get_running_loop().call_later(
            min(heartbeat_s, config.ha_housekeeping_interval / 1000) / 2, self._tick)
