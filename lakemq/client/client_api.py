"""Typed calls to the name server and brokers (RocketMQ's MQClientAPIImpl), one method per
request code: build the header fields (Java names, as strings), invoke, map the answer.

Every remoting call goes through :meth:`MQClientAPI._invoke` and :meth:`_oneway`; response
codes other than the ones a call understands become :func:`lakemq.errors.for_code` errors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lakemq.client.results import PullStatus, SendResult, SendStatus
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message import MessageExt
from lakemq.common.message_queue import MessageQueue
from lakemq.common.record import iter_records
from lakemq.errors import for_code
from lakemq.remoting import RemotingClient, RemotingCommand, fastjson
from lakemq.remoting.bodies import (
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    TopicRouteData,
)
from lakemq.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    EndTransactionRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicStatsInfoRequestHeader,
    OffsetResponseHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    RecallMessageRequestHeader,
    RecallMessageResponseHeader,
    SearchOffsetRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    decode_header,
    encode_header,
)

__all__ = ["MQClientAPI", "RawPullResult", "RawQueryResult"]

log = logging.getLogger(__name__)

_SEND_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(frozen=True, slots=True)
class RawPullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    body: bytes


@dataclass(frozen=True, slots=True)
class RawQueryResult:
    """A QUERY_MESSAGE answer as the broker sent it: the records (CommitLog format, as a
    pull's body; empty when none matched) and what the broker said of its index."""

    body: bytes
    header: QueryMessageResponseHeader


class MQClientAPI:
    def __init__(self, remoting: RemotingClient, timeout_ms: int = 3000,
                 rpc_hook: Callable[[RemotingCommand], None] | None = None) -> None:
        self.remoting = remoting
        self.timeout_ms = timeout_ms
        self.rpc_hook = rpc_hook  # runs on every request before it is sent (ACL signing)

    def _request(self, code: int, fields: Mapping[str, str] | None, body: bytes | None, *,
                 oneway: bool = False) -> RemotingCommand:
        request = RemotingCommand.request(code, dict(fields or {}), body or b"", oneway=oneway)
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        return request

    # -- transport ---------------------------------------------------------------------
    def _timeout(self, timeout_ms: int | None) -> float:
        return (timeout_ms or self.timeout_ms) / 1000

    async def _invoke(
        self, addr: str, code: int, fields: Mapping[str, str] | None = None, body: bytes | None = None,
        timeout_ms: int | None = None,
    ) -> RemotingCommand:
        request = self._request(code, fields, body)
        return await self.remoting.invoke(addr, request, self._timeout(timeout_ms))

    async def _oneway(self, addr: str, code: int, fields: Mapping[str, str], body: bytes | None = None) -> None:
        request = self._request(code, fields, body, oneway=True)
        await self.remoting.invoke_oneway(addr, request, self._timeout(None))

    async def _ok(self, addr: str, code: int, fields: Mapping[str, str] | None = None,
                  body: bytes | None = None, timeout_ms: int | None = None) -> RemotingCommand:
        response = await self._invoke(addr, code, fields, body, timeout_ms)
        if response.code != ResponseCode.SUCCESS:
            raise for_code(response.code, response.remark)
        return response

    async def _namesrv(self, code: int, fields: Mapping[str, str] | None = None,
                       timeout_ms: int | None = None) -> RemotingCommand:
        """Ask the name servers, failing over from one that does not answer."""
        request = self._request(code, fields, None)
        return await self.remoting.invoke_namesrv(request, self._timeout(timeout_ms))

    # -- name server -------------------------------------------------------------------
    async def get_topic_route(self, topic: str, timeout_ms: int | None = None) -> TopicRouteData | None:
        """The route, or None when the name server knows no such topic."""
        response = await self._namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, encode_header(GetRouteInfoRequestHeader(topic)), timeout_ms)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise for_code(response.code, response.remark)
        return TopicRouteData.decode(response.body or b"{}")

    async def get_all_topic_list(self) -> list[str]:
        response = await self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        if response.code != ResponseCode.SUCCESS:
            raise for_code(response.code, response.remark)
        return sorted(fastjson.loads(response.body or b"{}").get("topicList") or [])

    async def get_broker_cluster_info(self) -> dict[str, Any]:
        response = await self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        if response.code != ResponseCode.SUCCESS:
            raise for_code(response.code, response.remark)
        return dict(fastjson.loads(response.body or b"{}"))

    # -- producer ----------------------------------------------------------------------
    async def send_message(
        self, addr: str, mq: MessageQueue, fields: Mapping[str, str], body: bytes, *,
        batch: bool, timeout_ms: int, uniq_id: str,
    ) -> SendResult:
        response = await self.remoting.invoke(addr, self.send_request(fields, body, batch=batch),
                                              self._timeout(timeout_ms))
        return self.send_result(mq, response, uniq_id)

    def send_request(self, fields: Mapping[str, str], body: bytes, *, batch: bool) -> RemotingCommand:
        """A send's request (SEND_MESSAGE_V2, or SEND_BATCH_MESSAGE), for any transport."""
        return self._request(RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2,
                             fields, body)

    @staticmethod
    def send_result(mq: MessageQueue, response: RemotingCommand, uniq_id: str) -> SendResult:
        """A send's answer as its result; BrokerError (for_code) for a refusal."""
        status = _SEND_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise for_code(response.code, response.remark)
        header = decode_header(SendMessageResponseHeader, response.ext_fields)
        return SendResult(
            send_status=status,
            msg_id=uniq_id,
            offset_msg_id=header.msg_id,
            message_queue=MessageQueue(mq.topic, mq.broker_name, header.queue_id),
            queue_offset=header.queue_offset,
            transaction_id=header.transaction_id,
            recall_handle=header.recall_handle,
        )

    async def recall_message(self, addr: str, header: RecallMessageRequestHeader) -> str:
        """RECALL_MESSAGE: the recalled message's id; BrokerError when it was not recalled."""
        response = await self._ok(addr, RequestCode.RECALL_MESSAGE, encode_header(header))
        return decode_header(RecallMessageResponseHeader, response.ext_fields).msg_id

    async def send_message_oneway(self, addr: str, fields: Mapping[str, str], body: bytes, *, batch: bool) -> None:
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        await self._oneway(addr, code, fields, body)

    async def end_transaction_oneway(self, addr: str, header: EndTransactionRequestHeader,
                                     remark: str | None = None) -> None:
        request = self._request(RequestCode.END_TRANSACTION, encode_header(header), None, oneway=True)
        request.remark = remark
        await self.remoting.invoke_oneway(addr, request, self._timeout(None))

    # -- consumer ----------------------------------------------------------------------
    async def pull_message(self, addr: str, fields: Mapping[str, str], timeout_ms: int) -> RawPullResult:
        response = await self._invoke(addr, RequestCode.PULL_MESSAGE, fields, None, timeout_ms)
        status = _PULL_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise for_code(response.code, response.remark)
        header = decode_header(PullMessageResponseHeader, response.ext_fields)
        return RawPullResult(status, header.next_begin_offset, header.min_offset, header.max_offset,
                             header.suggest_which_broker_id, bytes(response.body or b""))

    async def query_consumer_offset(self, addr: str, mq: MessageQueue, group: str) -> int:
        """The stored offset, -1 when the group has none for this queue."""
        response = await self._invoke(addr, RequestCode.QUERY_CONSUMER_OFFSET, encode_header(QueryConsumerOffsetRequestHeader(group, mq.topic, mq.queue_id)))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        if response.code != ResponseCode.SUCCESS:
            raise for_code(response.code, response.remark)
        return decode_header(QueryConsumerOffsetResponseHeader, response.ext_fields).offset

    async def update_consumer_offset(self, addr: str, mq: MessageQueue, group: str, offset: int) -> None:
        await self._oneway(addr, RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(
            UpdateConsumerOffsetRequestHeader(group, mq.topic, mq.queue_id, offset)))

    async def get_consumer_id_list(self, addr: str, group: str) -> list[str]:
        response = await self._invoke(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                      encode_header(GetConsumerListByGroupRequestHeader(group)))
        if response.code == ResponseCode.SYSTEM_ERROR and not response.body:
            return []
        if response.code != ResponseCode.SUCCESS:
            raise for_code(response.code, response.remark)
        return list(GetConsumerListByGroupResponseBody.decode(response.body or b"{}").consumer_id_list)

    async def heartbeat(self, addr: str, heartbeat: HeartbeatData) -> None:
        await self._ok(addr, RequestCode.HEART_BEAT, {}, heartbeat.encode())

    async def unregister_client(self, addr: str, client_id: str, *, producer_group: str | None = None,
                                consumer_group: str | None = None) -> None:
        await self._ok(addr, RequestCode.UNREGISTER_CLIENT, encode_header(
            UnregisterClientRequestHeader(client_id, producer_group, consumer_group)))

    async def lock_batch_mq(self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue]) -> set[MessageQueue]:
        body = LockBatchRequestBody(group, client_id, tuple(mqs)).encode()
        response = await self._ok(addr, RequestCode.LOCK_BATCH_MQ, {}, body)
        return set(LockBatchResponseBody.decode(response.body or b"{}").lock_ok_mq_set)

    async def unlock_batch_mq(self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue]) -> None:
        await self._ok(addr, RequestCode.UNLOCK_BATCH_MQ, {}, LockBatchRequestBody(group, client_id, tuple(mqs)).encode())

    async def consumer_send_msg_back(
        self, addr: str, *, commit_log_offset: int, group: str, delay_level: int, origin_msg_id: str,
        origin_topic: str, max_reconsume_times: int,
    ) -> None:
        await self._ok(addr, RequestCode.CONSUMER_SEND_MSG_BACK, encode_header(ConsumerSendMsgBackRequestHeader(
            commit_log_offset, group, delay_level, origin_msg_id, origin_topic, False, max_reconsume_times)))

    # -- offsets and admin ------------------------------------------------------------
    async def _offset(self, addr: str, code: int, fields: Mapping[str, str]) -> int:
        response = await self._ok(addr, code, fields)
        return decode_header(OffsetResponseHeader, response.ext_fields).offset

    async def get_max_offset(self, addr: str, mq: MessageQueue) -> int:
        return await self._offset(addr, RequestCode.GET_MAX_OFFSET, encode_header(GetMaxOffsetRequestHeader(mq.topic, mq.queue_id)))

    async def get_min_offset(self, addr: str, mq: MessageQueue) -> int:
        return await self._offset(addr, RequestCode.GET_MIN_OFFSET, encode_header(GetMinOffsetRequestHeader(mq.topic, mq.queue_id)))

    async def get_topic_stats(self, addr: str, topic: str) -> dict[MessageQueue, tuple[int, int]]:
        """GET_TOPIC_STATS_INFO: every queue's (min offset, max offset) on the broker at ``addr``
        in one round trip (the reply keys its map by MessageQueue objects, fastjson style)."""
        response = await self._ok(addr, RequestCode.GET_TOPIC_STATS_INFO,
                                  encode_header(GetTopicStatsInfoRequestHeader(topic)))
        table = fastjson.loads(response.body or b"{}").get("offsetTable") or {}
        return {MessageQueue.from_json(dict(key)): (int(value["minOffset"]), int(value["maxOffset"]))
                for key, value in table.items()}

    async def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self._offset(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, encode_header(
            SearchOffsetRequestHeader(mq.topic, mq.queue_id, timestamp_ms)))

    async def create_topic(self, addr: str, topic: str, *, default_topic: str = "TBW102", read_queue_nums: int = 4,
                           write_queue_nums: int = 4, perm: int = 6, order: bool = False) -> None:
        await self._ok(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(CreateTopicRequestHeader(
            topic, default_topic, read_queue_nums, write_queue_nums, perm, "SINGLE_TAG", 0, order)))


    async def query_message(self, addr: str, topic: str, key: str, *, max_num: int, begin_ms: int, end_ms: int,
                            unique_key: bool = False, timeout_ms: int | None = None) -> list[MessageExt]:
        """QUERY_MESSAGE through the broker's IndexFile: by a KEYS key, or by UNIQ_KEY (the
        client message id) with ``unique_key``. No match is an empty list."""
        fields = encode_header(QueryMessageRequestHeader(topic, key, max_num, begin_ms, end_ms))
        if unique_key:
            fields = {**fields, "_UNIQUE_KEY_QUERY": "true"}
        response = await self._invoke(addr, RequestCode.QUERY_MESSAGE, fields, timeout_ms=timeout_ms)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        if response.code != ResponseCode.SUCCESS:
            raise for_code(response.code, response.remark)
        return list(iter_records(response.body or b"", decompress=True))

    async def query_message_raw(self, addr: str, topic: str, key: str, *, max_num: int, begin_ms: int,
                                end_ms: int) -> RawQueryResult:
        """QUERY_MESSAGE by a KEYS key, the records left undecoded."""
        fields = encode_header(QueryMessageRequestHeader(topic, key, max_num, begin_ms, end_ms))
        response = await self._invoke(addr, RequestCode.QUERY_MESSAGE, fields)
        if response.code not in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND):
            raise for_code(response.code, response.remark)
        header = decode_header(QueryMessageResponseHeader, response.ext_fields)
        return RawQueryResult(response.body or b"" if response.code == ResponseCode.SUCCESS else b"", header)

    async def view_message(self, addr: str, commit_log_offset: int) -> MessageExt:
        """VIEW_MESSAGE_BY_ID: the record at ``commit_log_offset`` of the broker at ``addr``."""
        response = await self._ok(addr, RequestCode.VIEW_MESSAGE_BY_ID,
                                  encode_header(ViewMessageRequestHeader(commit_log_offset)))
        return next(iter_records(response.body or b"", decompress=True))

    async def get_consume_stats(self, addr: str, group: str, topic: str | None = None) -> dict[MessageQueue, dict[str, Any]]:
        """GET_CONSUME_STATS: per queue brokerOffset, consumerOffset, lastTimestamp (the reply
        keys its map by MessageQueue objects, fastjson style)."""
        response = await self._ok(addr, RequestCode.GET_CONSUME_STATS,
                                  encode_header(GetConsumeStatsRequestHeader(group, topic or None)))
        table = fastjson.loads(response.body or b"{}").get("offsetTable") or {}
        return {MessageQueue.from_json(dict(key)): dict(value) for key, value in table.items()}
