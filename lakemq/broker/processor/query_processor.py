"""QUERY_MESSAGE and VIEW_MESSAGE_BY_ID (RocketMQ QueryMessageProcessor): messages by key
through the IndexFile, and one message by CommitLog offset; the raw records are the body, as
for pulls. Runs in the query pool: index lookups read files."""

from __future__ import annotations

from typing import Final

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import for_code
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.remoting.headers import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ViewMessageRequestHeader,
    decode_header,
    encode_header,
)
from lakemq.store.message_store import MessageStore

__all__ = ["UNIQUE_MSG_QUERY_FLAG", "QueryMessageProcessor"]

UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"  # extField of a query by UNIQ_KEY (message id)
_DEFAULT_QUERY_MAX_NUM: Final = 32


class QueryMessageProcessor:
    def __init__(self, store: MessageStore) -> None:
        self._store = store

    def reject_request(self) -> bool:
        return False

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        if request.code == RequestCode.VIEW_MESSAGE_BY_ID:
            view = decode_header(ViewMessageRequestHeader, request.ext_fields)
            record = self._store.select_one_message_by_offset(view.offset)
            if record is None:
                raise for_code(
                    ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {view.offset}"
                )
            return request.reply(ResponseCode.SUCCESS, body=record)
        header = decode_header(QueryMessageRequestHeader, request.ext_fields)
        max_num = (
            _DEFAULT_QUERY_MAX_NUM
            if request.ext_fields.get(UNIQUE_MSG_QUERY_FLAG) == "true"
            else header.max_num
        )
        result = self._store.query_message(
            header.topic, header.key, max_num, header.begin_timestamp, header.end_timestamp
        )
        fields = encode_header(
            QueryMessageResponseHeader(
                result.index_last_update_timestamp, result.index_last_update_phy_offset,
                result.index_cut, result.index_whole_from,
            )
        )
        if not result.messages:
            return request.reply(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", fields
            )
        return request.reply(ResponseCode.SUCCESS, None, fields, b"".join(result.messages))
