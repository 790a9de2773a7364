"""The ``lakemq`` source's broker client, one per name server and process, kept across calls.

Starting a client costs a name server route, connections and a heartbeat, and shutting it down
an unregister: seconds a micro-batch when every read task and every trigger's planning did it.
So the process keeps one started client per name server: the Python worker that Spark reuses
for read tasks, and the driver-side process that plans a stream's micro-batches (Spark keeps
that one for the query's life). The client keeps no offsets; the process's exit closes its
connections. A call that fails drops the client, so the next one starts afresh (a broker gone
or moved, a name server restarted).
"""

from __future__ import annotations

import logging
import threading

from lakemq.client.sync import SyncPullConsumer
from lakemq.errors import BrokerError, LakeMQError, RemotingError

__all__ = ["READER_GROUP", "drop_client", "is_kept", "kept_client"]

log = logging.getLogger(__name__)

# The consumer group the source's pulls name (brokers create it on first use; no offsets kept).
READER_GROUP = "lakemq_live_reader"

_CLIENTS: dict[str, SyncPullConsumer] = {}
_CLIENTS_LOCK = threading.Lock()


def kept_client(namesrv: str) -> SyncPullConsumer:
    """This process's started client for ``namesrv``."""
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(namesrv)
        if client is None:
            client = SyncPullConsumer(READER_GROUP, namesrv_addr=namesrv)
            client.start()
            _CLIENTS[namesrv] = client
        return client


def is_kept(namesrv: str, client: SyncPullConsumer) -> bool:
    """Whether ``client`` is still this process's client for ``namesrv`` (not dropped)."""
    with _CLIENTS_LOCK:
        return _CLIENTS.get(namesrv) is client


def drop_client(namesrv: str, client: SyncPullConsumer) -> None:
    """Forget ``client`` after a failed call: the next call starts a new one."""
    with _CLIENTS_LOCK:
        if _CLIENTS.get(namesrv) is client:
            del _CLIENTS[namesrv]
    try:
        client.shutdown()
    except (RemotingError, BrokerError, LakeMQError, TimeoutError) as exc:
        log.debug("closing a failed lakemq source client: %s", exc)
