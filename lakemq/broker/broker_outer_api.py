"""The broker's calls out: registration with every NameServer (RocketMQ BrokerOuterAPI) and
notifications to clients (Broker2Client).

REGISTER_BROKER carries the RegisterBrokerBody as JSON::

    {"topicConfigSerializeWrapper": {"topicConfigTable": {...}, "dataVersion": {...}},
     "filterServerList": []}

with ``bodyCrc32`` (CRC-32 of the body, sign bit cleared, as RocketMQ's UtilAll.crc32) in
the header so the NameServer can refuse a damaged body. Each NameServer is called on its
own; one being down never stops registration with the others. A slave's registration is
answered with its master's address and HA address (RegisterBrokerResponseHeader).
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from lakemq.broker.consumer_manager import ConsumerGroupEvent
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import RemotingError
from lakemq.remoting import bodies
from lakemq.remoting.client import RemotingClient
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.headers import (
    NotifyConsumerIdsChangedRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
    decode_header,
    encode_header,
)
from lakemq.remoting.protocol import RemotingConnection

__all__ = ["BrokerIdentity", "BrokerOuterAPI", "ConsumerIdsChangeNotifier", "Registration"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int
    ha_server_addr: str = ""


@dataclass(frozen=True, slots=True)
class Registration:
    """How registering with every NameServer went: how many accepted, and what the first
    that answered told a slave about its master (None: no master registered there)."""

    accepted: int
    master_addr: str | None = None
    master_ha_addr: str | None = None


class BrokerOuterAPI:
    def __init__(self, client: RemotingClient, namesrv_addrs: Sequence[str], timeout_s: float) -> None:
        self._client = client
        self._addrs = tuple(namesrv_addrs)
        self._timeout = timeout_s

    async def register_broker_all(
        self, broker: BrokerIdentity, topic_config_table: dict[str, dict[str, Any]], data_version: bodies.DataVersion
    ) -> Registration:
        """Register with every NameServer at once."""
        body = bodies.RegisterBrokerBody(
            topic_config_table, data_version
        ).encode()
        fields = encode_header(
            RegisterBrokerRequestHeader(
                broker_name=broker.broker_name,
                broker_addr=broker.broker_addr,
                cluster_name=broker.cluster_name,
                ha_server_addr=broker.ha_server_addr,
                broker_id=broker.broker_id,
                compressed=False,
                body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
            )
        )
        responses = await asyncio.gather(
            *(
                self._send(addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body))
                for addr in self._addrs
            )
        )
        answered = [r for r in responses if r is not None]
        if not answered:
            return Registration(0)
        header = decode_header(RegisterBrokerResponseHeader, answered[0].ext_fields)
        return Registration(len(answered), header.master_addr or None, header.ha_server_addr or None)

    async def unregister_broker_all(self, broker: BrokerIdentity) -> int:
        fields = encode_header(
            UnregisterBrokerRequestHeader(
                broker_name=broker.broker_name,
                broker_addr=broker.broker_addr,
                cluster_name=broker.cluster_name,
                broker_id=broker.broker_id,
            )
        )
        results = await asyncio.gather(
            *(
                self._call(addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields))
                for addr in self._addrs
            )
        )
        return sum(results)

    async def _call(self, addr: str, request: RemotingCommand) -> bool:
        return await self._send(addr, request) is not None

    async def _send(self, addr: str, request: RemotingCommand) -> RemotingCommand | None:
        """The NameServer's SUCCESS response; None (logged) otherwise."""
        try:
            response = await self._client.invoke(addr, request, self._timeout)
        except RemotingError as exc:
            log.warning("name server %s: %s failed: %s", addr, RequestCode(request.code).name, exc)
            return None
        if response.code != ResponseCode.SUCCESS:
            log.warning(
                "name server %s refused %s: code %d %s",
                addr,
                RequestCode(request.code).name,
                response.code,
                response.remark,
            )
            return None
        return response


class ConsumerIdsChangeNotifier:
    """The ConsumerManager's listener: on CHANGE, each member of the group gets a oneway
    NOTIFY_CONSUMER_IDS_CHANGED so it rebalances now instead of at its next 20 s tick.
    Callable from any thread; the sends run on the broker's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, enabled: bool = True) -> None:
        self._loop = loop
        self._enabled = enabled

    def __call__(self, event: ConsumerGroupEvent, group: str, channels: list[Hashable]) -> None:
        if event is not ConsumerGroupEvent.CHANGE or not self._enabled or self._loop.is_closed():
            return
        fields = encode_header(NotifyConsumerIdsChangedRequestHeader(group))
        for channel in channels:
            if isinstance(channel, RemotingConnection):
                coro = self._notify(
                    channel,
                    RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, fields, oneway=True),
                    group,
                )
                asyncio.run_coroutine_threadsafe(coro, self._loop)

    @staticmethod
    async def _notify(channel: RemotingConnection, request: RemotingCommand, group: str) -> None:
        try:
            await channel.invoke_oneway(request)
        except RemotingError as exc:
            log.info("notify consumer ids changed of %s to %s failed: %s", group, channel.remote_addr, exc)
