"""A SYNC_MASTER that may have lost acknowledged messages takes them back from its slaves
before it accepts a put.

An ASYNC_FLUSH SYNC_MASTER answers a send once a slave has the bytes, flushed or not on
either side. A power cut of the master's machine alone takes what the master had not flushed,
while the slaves, running on, hold it: acknowledged messages only a slave has. If the master
went on, its next puts would take those CommitLog and queue offsets with other messages. So
after an abnormal exit such a master starts with its puts held (MessageStore refuses them,
SERVICE_NOT_AVAILABLE) until a slave's first report, and then until the NameServers list
every slave the master has had (its roster, lakemq.broker.ha.roster: after a cut of the whole
site a slave not started again yet is not listed) and each listed slave has said where it ends
(its runtime info's ``commitLogMaxOffset``; one that does not answer is asked again until it
does). With two slaves the one a send waited for may be the one that reports, or starts,
last. Then, by the furthest slave's end:

- at or before the master's end: no slave holds anything the master lacks; puts resume;
- past it: the master follows that slave's HA listener (its ``haServerAddr``) as a slave would
  (HaClient), copying the slave's bytes up to its end into its CommitLog at the same offsets
  (dispatch builds ConsumeQueues and index from them), then resumes puts with each queue's
  next offset after them. Every slave holds a prefix of one log, so the furthest holds what
  any other does. Until then a link reporting past the master's end is refused; its next
  link finds the two equal.

docs/REPLICATION.md, "a slave ahead of its master", says why this rather than RocketMQ 5's
cut-back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from lakemq.broker.ha.config import HaConfig
from lakemq.broker.ha.roster import listed_slaves
from lakemq.broker.ha.slave import CommitLogReplica, HaClient
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import LakeMQError
from lakemq.remoting.bodies import KVTable
from lakemq.remoting.client import RemotingClient
from lakemq.remoting.codec import RemotingCommand

__all__ = ["MasterCatchUp", "SlaveEnd", "slave_ends"]

log = logging.getLogger(__name__)

_RETRY_S = 2.0  # a listed slave did not answer: ask again this often


@dataclass(frozen=True)
class SlaveEnd:
    """Where a slave's CommitLog ends, and the HA listener that serves it."""

    broker_addr: str
    ha_addr: str
    max_offset: int


class HeldStore(CommitLogReplica, Protocol):
    """The store of a master whose puts are held (MessageStore)."""

    def release_puts(self) -> None: ...


class MasterCatchUp:
    """Decides, once a slave reported, whether the held puts may resume or a slave's extra
    bytes must be copied first (on the broker's event loop)."""

    def __init__(self, store: HeldStore, config: HaConfig,
                 slave_ends: Callable[[], Awaitable[list[SlaveEnd] | None]]) -> None:
        self._store = store
        self._config = config
        self._slave_ends = slave_ends
        self.pending = True  # puts held, nothing decided yet
        self._task: asyncio.Task[None] | None = None

    def first_report(self, offset: int, max_offset: int) -> bool:
        """A slave first reported ``offset``; True: refuse its link (it is ahead, and a
        slave's bytes are to be copied)."""
        if not self.pending:
            return False
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._settle(), name="ha-master-catch-up")
        return offset > max_offset

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _settle(self) -> None:
        try:
            ends = await self._slave_ends()
            while not ends:
                log.warning("HA: not every slave of this master has said where its "
                            "CommitLog ends; puts stay held; asking again in %.0f s", _RETRY_S)
                await asyncio.sleep(_RETRY_S)
                ends = await self._slave_ends()
            furthest = max(ends, key=lambda e: e.max_offset)
            max_offset = self._store.get_max_phy_offset()
            log.warning("HA: slaves end at %s; this master ends at %d",
                        ", ".join(f"{e.broker_addr} {e.max_offset}" for e in ends), max_offset)
            if furthest.max_offset > max_offset:
                await self._copy(furthest, max_offset)
            # Dispatch and the queue offsets in a thread: the copied bytes may be many.
            await asyncio.to_thread(self._store.release_puts)
        except Exception:  # a bug must not leave the master silently refusing every put
            log.exception("HA: catching up from the slaves failed; puts stay held")
            raise
        self.pending = False
        log.warning("HA: accepting puts at CommitLog offset %d", self._store.get_max_phy_offset())

    async def _copy(self, slave: SlaveEnd, start: int) -> None:
        log.error("HA: slave at %s holds CommitLog offsets %d to %d (%d bytes) past this master's end after an "
                  "abnormal exit (a power cut took what it had not flushed): they may be acknowledged messages; "
                  "copying them from the slave before accepting any put", slave.broker_addr, start,
                  slave.max_offset, slave.max_offset - start)
        client = HaClient(self._store, self._config, slave.ha_addr)
        client.start()
        try:
            while self._store.get_max_phy_offset() < slave.max_offset:
                await asyncio.sleep(0.05)
        finally:
            await client.shutdown()
        log.warning("HA: copied CommitLog offsets %d to %d from the slave at %s (%s)", start,
                    self._store.get_max_phy_offset(), slave.broker_addr, slave.ha_addr)


async def slave_ends(client: RemotingClient, namesrv_addrs: Sequence[str], broker_name: str,
                     timeout_s: float, recorded: Collection[int] = ()) -> list[SlaveEnd] | None:
    """Where each slave of ``broker_name`` ends, by the first NameServer that answers with its
    cluster info and each listed slave's runtime info; None while the NameServers list none,
    lack a slave of ``recorded`` (the brokerIds this master has had: lakemq.broker.ha.roster),
    or one of them does not answer."""
    listed = await listed_slaves(client, namesrv_addrs, broker_name, timeout_s)
    if not listed:
        return None
    missing = sorted(set(recorded) - set(listed))
    if missing:
        log.warning("HA: the slaves with brokerId %s are not listed by the NameServers (not started again yet?)",
                    ", ".join(map(str, missing)))
        return None
    ends = []
    for addr in listed.values():
        try:
            info = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout_s)
            runtime = KVTable.decode(info.body).table if info.code == ResponseCode.SUCCESS else {}
            ends.append(SlaveEnd(addr, runtime["haServerAddr"], int(runtime["commitLogMaxOffset"])))
        except (LakeMQError, OSError, ValueError, KeyError) as exc:
            log.warning("HA: the slave at %s did not say where it ends: %s", addr, exc)
            return None
    return ends
