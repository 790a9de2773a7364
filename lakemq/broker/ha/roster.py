"""The slaves an ASYNC_FLUSH SYNC_MASTER has had, remembered across a power cut.

Such a master, back from an abnormal exit, must hear from every slave that may hold an
acknowledged message it lost before it accepts a put (lakemq.broker.ha.catch_up). The
NameServers list only the slaves running now: after a cut of the whole site a slave that has
not started again yet is not listed (its process died, its registration went with it), and
the master would settle with the slaves already back, one of which may be the one behind,
then give out the offsets the late one holds. So the master keeps the brokerIds of its slaves
in ``{storePathRootDir}/config/haSlaves.json``, written durably, and a slave's HA link counts
as an acknowledgement only once its brokerId is there: its first report makes the master ask
the NameServers for its slaves and record any new one before the link is served. After an
abnormal exit the master waits for every recorded slave (catch_up). A slave taken out of
service for good is removed from the file by hand (docs/REPLICATION.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.durable import make_dirs_durably, write_file_durably
from lakemq.errors import LakeMQError
from lakemq.remoting import fastjson
from lakemq.remoting.client import RemotingClient
from lakemq.remoting.codec import RemotingCommand

__all__ = ["SlaveRoster", "listed_slaves"]

log = logging.getLogger(__name__)

_RETRY_S = 2.0  # no NameServer answered: ask again this often


async def listed_slaves(client: RemotingClient, namesrv_addrs: Sequence[str], broker_name: str,
                        timeout_s: float) -> dict[int, str] | None:
    """The slaves (brokerId to address) the first NameServer that answers lists for
    ``broker_name``; None when none answers."""
    for namesrv in namesrv_addrs:
        try:
            response = await client.invoke(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO),
                                           timeout_s)
        except (LakeMQError, OSError) as exc:
            log.warning("HA: asking %s for the cluster info failed: %s", namesrv, exc)
            continue
        if response.code != ResponseCode.SUCCESS:
            continue
        table = fastjson.loads(response.body or b"{}").get("brokerAddrTable") or {}
        brokers = (table.get(broker_name) or {}).get("brokerAddrs") or {}
        return {int(broker_id): str(addr) for broker_id, addr in brokers.items() if int(broker_id) != 0}
    return None


class SlaveRoster:
    """The brokerIds of every slave this master has served, durable before it counts one's
    acknowledgement (on the broker's event loop)."""

    def __init__(self, path: Path, lookup: Callable[[], Awaitable[dict[int, str] | None]]) -> None:
        self._path = path
        self._lookup = lookup
        self._lock = asyncio.Lock()  # one write of the file at a time
        self.ids: frozenset[int] = frozenset(json.loads(path.read_text())["brokerIds"]) if path.exists() \
            else frozenset()

    async def admit(self) -> None:
        """Until the slaves the NameServers list now are recorded, durably: called on a link's
        first report, before it is served (a link's slave has registered before it learned
        where to connect)."""
        listed = await self._lookup()
        while listed is None:
            log.warning("HA: no NameServer answered with this broker's slaves; a new slave link waits; asking "
                        "again in %.0f s", _RETRY_S)
            await asyncio.sleep(_RETRY_S)
            listed = await self._lookup()
        async with self._lock:
            new = set(listed) - self.ids
            if not new:
                return
            ids = self.ids | new
            await asyncio.to_thread(self._write, ids)
            self.ids = ids
        log.info("HA: slaves %s recorded in %s (this master waits for each after an abnormal exit)",
                 ", ".join(f"{i} ({listed[i]})" for i in sorted(new)), self._path)

    def _write(self, ids: frozenset[int]) -> None:
        make_dirs_durably(self._path.parent)
        write_file_durably(self._path, json.dumps({"brokerIds": sorted(ids)}))
