"""Custom headers: typed views of a command's ``extFields``.

Each header is a frozen dataclass named and shaped like its Java CommandCustomHeader; its
snake_case fields map to the Java field names (``consumer_group`` <-> ``consumerGroup``; the
exceptions are listed in ``_WIRE_NAMES``). A field without a default is required, as
``@CFNotNull`` is in Java; values travel as strings, booleans as ``true``/``false`` (read
leniently: the C++ client sends ``0``/``1``).
:func:`decode_header` raises RemotingCommandError naming a missing or malformed field (the
dispatcher answers it with SYSTEM_ERROR, as RocketMQ does).

SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE carry SendMessageRequestHeaderV2, the same fields under
one-letter names ``a`` .. ``n``; see :func:`encode_send_header_v2` / :func:`decode_send_header`.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from lakemq.common.codes import RequestCode
from lakemq.common.config import snake_to_camel
from lakemq.errors import RemotingCommandError
from lakemq.remoting.codec import RemotingCommand

__all__ = [
    "decode_header", "encode_header", "encode_send_header_v2", "decode_send_header",
    "SendMessageRequestHeader", "SendMessageResponseHeader",
    "PullMessageRequestHeader", "PullMessageResponseHeader",
    "QueryConsumerOffsetRequestHeader", "QueryConsumerOffsetResponseHeader",
    "UpdateConsumerOffsetRequestHeader",
    "GetMaxOffsetRequestHeader", "GetMinOffsetRequestHeader", "GetEarliestMsgStoretimeRequestHeader",
    "OffsetResponseHeader", "TimestampResponseHeader", "SearchOffsetRequestHeader",
    "GetRouteInfoRequestHeader", "RegisterBrokerRequestHeader", "RegisterBrokerResponseHeader",
    "UnregisterBrokerRequestHeader", "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader", "GetConsumerListByGroupRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader", "UnregisterClientRequestHeader",
    "ConsumerSendMsgBackRequestHeader", "EndTransactionRequestHeader",
    "CheckTransactionStateRequestHeader", "QueryMessageRequestHeader", "QueryMessageResponseHeader",
    "ViewMessageRequestHeader", "CreateTopicRequestHeader", "DeleteTopicRequestHeader",
    "PutKVConfigRequestHeader", "GetKVConfigRequestHeader", "GetKVConfigResponseHeader",
    "DeleteKVConfigRequestHeader", "GetKVListByNamespaceRequestHeader",
]

H = TypeVar("H")

# Java field names that snake_to_camel does not produce.
_WIRE_NAMES = {"client_id": "clientID"}


def _wire_name(field_name: str) -> str:
    return _WIRE_NAMES.get(field_name, snake_to_camel(field_name))


class _Field(typing.NamedTuple):
    name: str
    wire: str
    required: bool
    kind: type  # bool, int or str: how the string on the wire is read


@functools.cache
def _plan(cls: type) -> tuple[_Field, ...]:
    """Per header class, worked out once: decoding and encoding run per request."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        plan.append(_Field(f.name, _wire_name(f.name), required, hint if hint in (bool, int) else str))
    return tuple(plan)


def _convert(name: str, raw: str, kind: type) -> Any:
    if kind is bool:
        # Java reads Boolean.parseBoolean (anything but "true" is false); the C++ client
        # writes "0"/"1", so "1" counts as true too.
        return raw.strip().lower() in ("true", "1")
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise RemotingCommandError(f"header field {name}: expected a number, got {raw!r}") from None
    return raw


def decode_header(cls: type[H], fields: Mapping[str, str] | RemotingCommand | None) -> H:
    """Build header ``cls`` from extFields (or straight from a command)."""
    if isinstance(fields, RemotingCommand):
        fields = fields.ext_fields
    fields = fields or {}
    values: dict[str, Any] = {}
    for f in _plan(cls):
        raw = fields.get(f.wire)
        if raw is None:
            if f.required:
                raise RemotingCommandError(f"the custom field <{f.wire}> is null")
            continue
        values[f.name] = raw if f.kind is str else _convert(f.wire, raw, f.kind)
    return cls(**values)


def encode_header(header: object) -> dict[str, str]:
    """The extFields for a header; None fields are left out."""
    out: dict[str, str] = {}
    for f in _plan(type(header)):
        value = getattr(header, f.name)
        if value is None:
            continue
        out[f.wire] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeader:
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool | None = None
    max_reconsume_times: int | None = None
    batch: bool | None = None
    broker_name: str | None = None


# SendMessageRequestHeaderV2's one-letter names, in its declared order.
_V2_NAMES = dict(zip("abcdefghijklmn", (
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
    "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes",
    "batch", "brokerName")))
_V2_SHORT = {long: short for short, long in _V2_NAMES.items()}
_V2_CODES = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


def encode_send_header_v2(header: SendMessageRequestHeader) -> dict[str, str]:
    return {_V2_SHORT[name]: value for name, value in encode_header(header).items()}


def decode_send_header(request: RemotingCommand) -> SendMessageRequestHeader:
    """The send header of SEND_MESSAGE (long names) or SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE."""
    fields = request.ext_fields
    if request.code in _V2_CODES:
        fields = {_V2_NAMES[short]: value for short, value in fields.items() if short in _V2_NAMES}
    return decode_header(SendMessageRequestHeader, fields)


@dataclass(frozen=True, slots=True)
class SendMessageResponseHeader:
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None


@dataclass(frozen=True, slots=True)
class PullMessageRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None
    max_msg_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader:
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int
    set_zero_if_not_found: bool | None = None


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetResponseHeader:
    offset: int


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass(frozen=True, slots=True)
class GetMaxOffsetRequestHeader:
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class GetMinOffsetRequestHeader:
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class GetEarliestMsgStoretimeRequestHeader:
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class OffsetResponseHeader:
    """Get{Max,Min}OffsetResponseHeader and SearchOffsetResponseHeader: one ``offset``."""

    offset: int


@dataclass(frozen=True, slots=True)
class TimestampResponseHeader:
    """GetEarliestMsgStoretimeResponseHeader."""

    timestamp: int


@dataclass(frozen=True, slots=True)
class SearchOffsetRequestHeader:
    topic: str
    queue_id: int
    timestamp: int
    boundary_type: str | None = None


@dataclass(frozen=True, slots=True)
class GetRouteInfoRequestHeader:
    topic: str
    accept_standard_json_only: bool | None = None


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequestHeader:
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    heartbeat_timeout_millis: int | None = None
    compressed: bool = False
    body_crc32: int = 0


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponseHeader:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRequestHeader:
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(frozen=True, slots=True)
class QueryDataVersionRequestHeader:
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(frozen=True, slots=True)
class QueryDataVersionResponseHeader:
    changed: bool


@dataclass(frozen=True, slots=True)
class GetConsumerListByGroupRequestHeader:
    consumer_group: str


@dataclass(frozen=True, slots=True)
class NotifyConsumerIdsChangedRequestHeader:
    consumer_group: str


@dataclass(frozen=True, slots=True)
class UnregisterClientRequestHeader:
    client_id: str
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequestHeader:
    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


@dataclass(frozen=True, slots=True)
class EndTransactionRequestHeader:
    """``commit_or_rollback`` is a MessageSysFlag: 0 not a transaction, 8 commit, 12 rollback."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    msg_id: str
    topic: str | None = None
    from_transaction_check: bool = False
    transaction_id: str | None = None


@dataclass(frozen=True, slots=True)
class CheckTransactionStateRequestHeader:
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class QueryMessageRequestHeader:
    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int


@dataclass(frozen=True, slots=True)
class QueryMessageResponseHeader:
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


@dataclass(frozen=True, slots=True)
class ViewMessageRequestHeader:
    offset: int
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class CreateTopicRequestHeader:
    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    topic_sys_flag: int | None = None
    order: bool = False
    attributes: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopicRequestHeader:
    """DeleteTopicRequestHeader (broker) and DeleteTopicFromNamesrvRequestHeader."""

    topic: str
    cluster_name: str | None = None


@dataclass(frozen=True, slots=True)
class PutKVConfigRequestHeader:
    namespace: str
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class GetKVConfigRequestHeader:
    namespace: str
    key: str


@dataclass(frozen=True, slots=True)
class GetKVConfigResponseHeader:
    value: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteKVConfigRequestHeader:
    namespace: str
    key: str


@dataclass(frozen=True, slots=True)
class GetKVListByNamespaceRequestHeader:
    namespace: str
