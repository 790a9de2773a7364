"""Auto-renewal of push consumers' deliveries, as RocketMQ's proxy does it (its receipt handle
manager): a ReceiveMessage with ``auto_renew`` pops with a short invisible duration (the
renew slice), and while the client consumes, each delivery is hidden again for one slice
shortly before it would expire, until the client acks or nacks it or ``max_ms`` of renewing
has passed (the three times are broker.conf's grpcRenew*Millis) (then the delivery is left to expire and be delivered again).

Each renewal gives the delivery a new receipt handle, while the client still holds the one
it received: its ack, change of invisible duration or dead-lettering names that one, and
:meth:`ReceiptRenewer.take` hands back the current handle in its place. A client that goes
away (its Telemetry stream closes, or it says it terminates) stops its renewals; its
deliveries expire and are delivered again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Final

from lakemq.broker.pop.receipt import ReceiptHandle
from lakemq.broker.pop.service import PopService
from lakemq.errors import ReceiptHandleError

__all__ = ["ReceiptRenewer"]

log = logging.getLogger(__name__)

_PERIOD_S: Final = 1.0


@dataclass(slots=True)
class _Delivery:
    client_id: str
    group: str
    topic: str
    handle: ReceiptHandle  # the current one
    since_ms: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # a renewal and a take never cross


class ReceiptRenewer:
    def __init__(self, pop: PopService, *, slice_ms: int, ahead_ms: int, max_ms: int) -> None:
        """``slice_ms``, ``ahead_ms``, ``max_ms``: grpcRenewSliceMillis, grpcRenewAheadMillis,
        grpcRenewMaxMillis (RocketMQ proxy's renewSliceTimeMillis, renewAheadTimeMillis,
        renewMaxTimeMillis)."""
        self._pop = pop
        self.slice_ms = slice_ms
        self._ahead_ms = ahead_ms
        self._max_ms = max_ms
        self._tracked: dict[tuple[str, str], _Delivery] = {}  # (group, handle the client holds) ->
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._tracked)

    def track(self, client_id: str, group: str, topic: str, handle: ReceiptHandle) -> None:
        self._tracked[(group, handle.encode())] = _Delivery(client_id, group, topic, handle, _now_ms())
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._renew_forever(), name="grpc-renew")

    async def take(self, group: str, text: str) -> ReceiptHandle | None:
        """The current handle of the delivery the client knows as ``text`` (None: not
        renewed here); it is renewed no more (the client is done with it)."""
        delivery = self._tracked.pop((group, text), None)
        if delivery is None:
            return None
        async with delivery.lock:
            return delivery.handle

    def drop_client(self, client_id: str) -> None:
        for key in [k for k, d in self._tracked.items() if d.client_id == client_id]:
            del self._tracked[key]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._tracked.clear()

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(_PERIOD_S)
            now = _now_ms()
            due = [(k, d) for k, d in self._tracked.items() if d.handle.deadline - now <= self._ahead_ms]
            for key, delivery in due:
                await self._renew(key, delivery, now)

    async def _renew(self, key: tuple[str, str], delivery: _Delivery, now: int) -> None:
        if now - delivery.since_ms >= self._max_ms:
            log.info("delivery %s of group %s consumed for over %d ms: renewed no more", key[1], delivery.group,
                     self._max_ms)
            self._tracked.pop(key, None)
            return
        async with delivery.lock:
            if self._tracked.get(key) is not delivery:
                return  # taken meanwhile
            try:
                delivery.handle = await self._pop.change_invisible(delivery.group, delivery.topic, delivery.handle,
                                                                   self.slice_ms)
            except ReceiptHandleError:
                self._tracked.pop(key, None)  # over already (expired and delivered again)
            except Exception as exc:  # noqa: BLE001 - a refused journal write: tried again next turn
                log.warning("renewal of delivery %s of group %s failed (tried again): %s", key[1], delivery.group,
                            exc)


def _now_ms() -> int:
    return int(time.time() * 1000)
