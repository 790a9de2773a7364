"""A SYNC_MASTER that may have lost acknowledged messages takes them back from its slave
before it accepts a put.

An ASYNC_FLUSH SYNC_MASTER answers a send once its slave has the bytes, flushed or not on
either side. A power cut of the master's machine alone takes what the master had not flushed,
while the slave, running on, holds it: acknowledged messages only the slave has. If the
master went on, its next puts would take those CommitLog and queue offsets with other
messages. So after an abnormal exit such a master starts with its puts held (MessageStore
refuses them, SERVICE_NOT_AVAILABLE) until a slave's first report says where the slave ends:

- at or before the master's end: the slave holds nothing the master lacks; puts resume;
- past it: the master follows that slave's HA listener as a slave would (HaClient), copying
  the slave's bytes up to the reported end into its CommitLog at the same offsets (dispatch
  builds ConsumeQueues and index from them), then resumes puts with each queue's next offset
  after them; the slave's next link finds the two equal. Until then its links are refused.

The slave's HA address is its runtime info's ``haServerAddr``, found through the NameServer's
cluster info (the link itself shows only the slave's host). docs/REPLICATION.md, "a slave
ahead of its master", says why this rather than RocketMQ 5's cut-back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from lakemq.broker.ha.config import HaConfig
from lakemq.broker.ha.slave import CommitLogReplica, HaClient
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import LakeMQError
from lakemq.remoting import fastjson
from lakemq.remoting.bodies import KVTable
from lakemq.remoting.client import RemotingClient
from lakemq.remoting.codec import RemotingCommand

__all__ = ["MasterCatchUp", "slave_ha_address"]

log = logging.getLogger(__name__)

_RETRY_S = 2.0  # a slave's address not found yet: ask again this often


class HeldStore(CommitLogReplica, Protocol):
    """The store of a master whose puts are held (MessageStore)."""

    def release_puts(self) -> None: ...


class MasterCatchUp:
    """Decides, at a slave's first report, whether the held puts may resume or the slave's
    extra bytes must be copied first (on the broker's event loop)."""

    def __init__(self, store: HeldStore, config: HaConfig,
                 find_address: Callable[[str], Awaitable[str | None]]) -> None:
        self._store = store
        self._config = config
        self._find_address = find_address
        self.pending = True  # puts held, nothing decided yet
        self._task: asyncio.Task[None] | None = None

    def first_report(self, host: str, offset: int, max_offset: int) -> bool:
        """A slave at ``host`` first reported ``offset``; True: refuse its link (it is ahead,
        and its bytes are being copied)."""
        if not self.pending:
            return False
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._settle(host, offset, max_offset),
                                                                name="ha-master-catch-up")
        return offset > max_offset

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _settle(self, host: str, target: int, max_offset: int) -> None:
        try:
            if target > max_offset:
                await self._copy(host, max_offset, target)
            # Dispatch and the queue offsets in a thread: the copied bytes may be many.
            await asyncio.to_thread(self._store.release_puts)
        except Exception:  # a bug must not leave the master silently refusing every put
            log.exception("HA: catching up from slave %s failed; puts stay held", host)
            raise
        self.pending = False
        log.warning("HA: a slave reported offset %d; this master ends at %d: accepting puts",
                    target, self._store.get_max_phy_offset())

    async def _copy(self, host: str, start: int, target: int) -> None:
        log.error("HA: slave at %s holds CommitLog offsets %d to %d (%d bytes) past this master's end after an "
                  "abnormal exit (a power cut took what it had not flushed): they may be acknowledged messages; "
                  "copying them from the slave before accepting any put", host, start, target, target - start)
        address = await self._find_address(host)
        while address is None:
            log.warning("HA: no HA address found for the slave at %s yet; asking again in %.0f s", host, _RETRY_S)
            await asyncio.sleep(_RETRY_S)
            address = await self._find_address(host)
        client = HaClient(self._store, self._config, address)
        client.start()
        try:
            while self._store.get_max_phy_offset() < target:
                await asyncio.sleep(0.05)
        finally:
            await client.shutdown()
        log.warning("HA: copied CommitLog offsets %d to %d from the slave at %s (%s)", start,
                    self._store.get_max_phy_offset(), host, address)


async def slave_ha_address(client: RemotingClient, namesrv_addrs: Sequence[str], broker_name: str, host: str,
                           timeout_s: float) -> str | None:
    """The HA listener of ``broker_name``'s slave at ``host`` (or of its only slave): the
    NameServers' cluster info names the group's brokers, the slave's runtime info its
    ``haServerAddr``."""
    for namesrv in namesrv_addrs:
        try:
            response = await client.invoke(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO),
                                           timeout_s)
            if response.code != ResponseCode.SUCCESS:
                continue
            table = fastjson.loads(response.body or b"{}").get("brokerAddrTable") or {}
            brokers = (table.get(broker_name) or {}).get("brokerAddrs") or {}
            slaves = [str(addr) for broker_id, addr in brokers.items() if int(broker_id) != 0]
            # The slave at the link's host; a lone slave registered under another address
            # (brokerIP1 is not the address it connects from) is that one too.
            at_host = [a for a in slaves if a.rsplit(":", 1)[0] == host]
            for addr in at_host or (slaves if len(slaves) == 1 else []):
                info = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
                                           timeout_s)
                if info.code == ResponseCode.SUCCESS:
                    ha_addr = KVTable.decode(info.body).table.get("haServerAddr")
                    if ha_addr:
                        return ha_addr
        except (LakeMQError, OSError, ValueError) as exc:
            log.warning("HA: looking up the slave at %s through %s failed: %s", host, namesrv, exc)
    return None
