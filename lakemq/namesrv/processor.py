"""The name server's request processor: broker registration, routes, cluster info and KV
config, answered as RocketMQ's DefaultRequestProcessor and ClientRequestProcessor answer."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import zlib
from collections.abc import Awaitable, Callable

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.namesrv.kv_config import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from lakemq.namesrv.metrics import NamesrvMetrics
from lakemq.namesrv.route_info import RouteInfoManager
from lakemq.remoting.bodies import (
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicList,
    decode_json,
    encode_json,
)
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import (
    DeleteKVConfigRequestHeader,
    DeleteTopicRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
    decode_header,
    encode_header,
)

__all__ = ["NamesrvProcessor"]

Handler = Callable[[RequestContext, RemotingCommand], Awaitable[RemotingCommand]]


def _now_millis() -> int:
    return int(time.time() * 1000)


class NamesrvProcessor:
    """One processor for every name server code; ``codes`` lists them for registration."""

    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager, *,
                 order_message_enable: bool = False, metrics: NamesrvMetrics | None = None) -> None:
        self.routes = routes
        self.metrics = metrics
        self.kv = kv
        self.order_message_enable = order_message_enable
        self._handlers: dict[int, Handler] = {
            RequestCode.PUT_KV_CONFIG: self._put_kv,
            RequestCode.GET_KV_CONFIG: self._get_kv,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self._kv_list,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._all_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
        }

    @property
    def codes(self) -> tuple[int, ...]:
        return tuple(self._handlers)

    def reject_request(self) -> bool:
        return False

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        handler = self._handlers.get(request.code)
        if handler is None:
            try:
                name = RequestCode(request.code).name
            except ValueError:
                name = "unknown"
            return request.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                 f"request code {request.code} ({name}) not supported by lakemq's name server")
        if self.metrics is None:
            return await handler(ctx, request)
        started = time.perf_counter()
        response = await handler(ctx, request)
        self.metrics.record(request.code, response.code, time.perf_counter() - started)
        return response

    # KV config: file writes go to a thread, off the loop.

    async def _put_kv(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(PutKVConfigRequestHeader, request)
        await asyncio.to_thread(self.kv.put, header.namespace, header.key, header.value)
        return request.reply(ResponseCode.SUCCESS)

    async def _get_kv(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetKVConfigRequestHeader, request)
        value = self.kv.get(header.namespace, header.key)
        if value is None:
            return request.reply(ResponseCode.QUERY_NOT_FOUND,
                                 f"No config item, Namespace: {header.namespace} Key: {header.key}")
        return request.reply(ResponseCode.SUCCESS,
                             ext_fields=encode_header(GetKVConfigResponseHeader(value)))

    async def _delete_kv(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(DeleteKVConfigRequestHeader, request)
        await asyncio.to_thread(self.kv.delete, header.namespace, header.key)
        return request.reply(ResponseCode.SUCCESS)

    async def _kv_list(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetKVListByNamespaceRequestHeader, request)
        table = self.kv.namespace(header.namespace)
        if not table:
            return request.reply(ResponseCode.QUERY_NOT_FOUND,
                                 f"No config item, Namespace: {header.namespace}")
        return request.reply(ResponseCode.SUCCESS, body=KVTable(table).encode())

    # Brokers

    async def _query_data_version(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(QueryDataVersionRequestHeader, request)
        version = DataVersion.from_json(decode_json(request.body, "data version"))
        key = (header.cluster_name, header.broker_addr)
        changed = self.routes.is_topic_config_changed(key, version)
        self.routes.touch(key, _now_millis())
        live = self.routes.broker_live_table.get(key)
        body = encode_json(live.data_version.to_json()) if live is not None else b""
        return request.reply(ResponseCode.SUCCESS,
                             ext_fields=encode_header(QueryDataVersionResponseHeader(changed)), body=body)

    async def _register_broker(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(RegisterBrokerRequestHeader, request)
        if header.body_crc32 and zlib.crc32(request.body) & 0x7FFFFFFF != header.body_crc32:
            return request.reply(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if header.compressed:
            return request.reply(ResponseCode.SYSTEM_ERROR,
                                 "compressed broker registration is not supported; set "
                                 "compressedRegister=false on the broker")
        body = RegisterBrokerBody.decode(request.body) if request.body else None
        result = self.routes.register_broker(
            cluster_name=header.cluster_name, broker_addr=header.broker_addr,
            broker_name=header.broker_name, broker_id=header.broker_id,
            ha_server_addr=header.ha_server_addr, now_millis=_now_millis(),
            data_version=body.data_version if body else None,
            topic_configs=body.topic_config_table if body else None,
            filter_servers=body.filter_server_list if body else (),
            connection=ctx.connection, timeout_millis=header.heartbeat_timeout_millis)
        table = KVTable(self.kv.namespace(NAMESPACE_ORDER_TOPIC_CONFIG))
        return request.reply(
            ResponseCode.SUCCESS,
            ext_fields=encode_header(RegisterBrokerResponseHeader(result.ha_server_addr, result.master_addr)),
            body=table.encode())

    async def _unregister_broker(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(UnregisterBrokerRequestHeader, request)
        self.routes.unregister_broker(cluster_name=header.cluster_name, broker_addr=header.broker_addr,
                                      broker_name=header.broker_name, broker_id=header.broker_id)
        return request.reply(ResponseCode.SUCCESS)

    # Clients and admin tools

    async def _route_by_topic(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(GetRouteInfoRequestHeader, request)
        route = self.routes.pickup_topic_route_data(header.topic)
        if route is None:
            return request.reply(ResponseCode.TOPIC_NOT_EXIST,
                                 f"No topic route info in name server for the topic: {header.topic}")
        if self.order_message_enable:
            conf = self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, header.topic)
            route = dataclasses.replace(route, order_topic_conf=conf)
        return request.reply(ResponseCode.SUCCESS, body=route.encode())

    async def _cluster_info(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.reply(ResponseCode.SUCCESS, body=self.routes.cluster_info().encode())

    async def _all_topics(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        return request.reply(ResponseCode.SUCCESS, body=TopicList(self.routes.all_topics()).encode())

    async def _delete_topic(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        header = decode_header(DeleteTopicRequestHeader, request)
        self.routes.delete_topic(header.topic, header.cluster_name)
        return request.reply(ResponseCode.SUCCESS)
