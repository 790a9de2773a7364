"""Custom headers: typed views of a command's ``extFields``, one frozen dataclass per Java
CommandCustomHeader (how they are read and written: lakemq.remoting.header_codec, whose
decode_header and encode_header are re-exported here).

SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE carry SendMessageRequestHeaderV2, the same fields under
one-letter names ``a`` .. ``n``; see :func:`encode_send_header_v2` / :func:`decode_send_header`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lakemq.common.codes import RequestCode
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.header_codec import decode_header, decoder_for, encode_header, encoder_for, make_encoder

__all__ = [
    "CheckTransactionStateRequestHeader",
    "ConsumerOffsetChangesHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteKVConfigRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicRequestHeader",
    "EndTransactionRequestHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMinOffsetRequestHeader",
    "GetProducerConnectionListRequestHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "OffsetResponseHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PutKVConfigRequestHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "QueryTopicConsumeByWhoRequestHeader",
    "RecallMessageRequestHeader",
    "RecallMessageResponseHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "ReplyMessageRequestHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "TimestampResponseHeader",
    "UnregisterBrokerRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewMessageRequestHeader",
    "decode_header",
    "decode_send_header",
    "encode_header",
    "encode_send_header_v2",
    "pull_response_fields",
    "send_header_v2_fields",
]

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
_V2_WIRE = tuple(_V2_SHORT.items())
_V2_CODES = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)


# Bound once: looking them up per send would hash _V2_WIRE's 14 pairs every time.
_encode_send_v2 = encoder_for(SendMessageRequestHeader, _V2_WIRE)
_decode_send_v2 = decoder_for(SendMessageRequestHeader, _V2_WIRE)
_decode_send_v1 = decoder_for(SendMessageRequestHeader)


# SendMessageRequestHeader's fields in order -> V2 extFields; what encode_send_header_v2 writes
# for the header with those values, without building it (a producer's send path).
send_header_v2_fields: Callable[..., dict[str, str]] = make_encoder(SendMessageRequestHeader, _V2_WIRE, True)


def encode_send_header_v2(header: SendMessageRequestHeader) -> dict[str, str]:
    return _encode_send_v2(header)


def decode_send_header(request: RemotingCommand) -> SendMessageRequestHeader:
    """The send header of SEND_MESSAGE / SEND_REPLY_MESSAGE (long names) or SEND_MESSAGE_V2 /
    SEND_BATCH_MESSAGE / SEND_REPLY_MESSAGE_V2 (one-letter names)."""
    decode = _decode_send_v2 if request.code in _V2_CODES else _decode_send_v1
    header: SendMessageRequestHeader = decode(request.ext_fields)
    return header


@dataclass(frozen=True, slots=True)
class SendMessageResponseHeader:
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None
    recall_handle: str | None = None  # a timer message's (lakemq.common.recall_handle)


@dataclass(frozen=True, slots=True)
class RecallMessageRequestHeader:
    """RECALL_MESSAGE (RocketMQ 5.3+): cancel a timer message by the handle its send answered."""

    topic: str
    recall_handle: str
    producer_group: str | None = None
    bname: str | None = None  # the broker name (RocketMQ's RpcRequestHeader field)


@dataclass(frozen=True, slots=True)
class RecallMessageResponseHeader:
    msg_id: str


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


# PullMessageResponseHeader's fields in order -> extFields, without building the header (every
# pull's answer).
pull_response_fields: Callable[..., dict[str, str]] = make_encoder(PullMessageResponseHeader, (), True)


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
class ConsumerOffsetChangesHeader:
    """LAKEMQ_GET_CONSUMER_OFFSET_CHANGES both ways: a master's numbering of its offset commits
    (``epoch``) and a number in it: in the slave's request the last it has, in the answer
    the newest."""

    epoch: str
    seq: int


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
    # lakemq's own (RocketMQ's clients ignore them), absent from a broker that does not say:
    # the index held as many matches as the answer could carry, so more may match; and the
    # CommitLog offset from which the index holds every keyed record (none: it cannot say).
    index_cut: bool | None = None
    index_whole_from: int | None = None


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


@dataclass(frozen=True, slots=True)
class GetTopicStatsInfoRequestHeader:
    topic: str


@dataclass(frozen=True, slots=True)
class GetConsumeStatsRequestHeader:
    consumer_group: str
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteSubscriptionGroupRequestHeader:
    group_name: str
    remove_offset: bool | None = None


@dataclass(frozen=True, slots=True)
class GetConsumerConnectionListRequestHeader:
    consumer_group: str


@dataclass(frozen=True, slots=True)
class GetProducerConnectionListRequestHeader:
    producer_group: str


@dataclass(frozen=True, slots=True)
class QueryTopicConsumeByWhoRequestHeader:
    topic: str


@dataclass(frozen=True, slots=True)
class ResetOffsetRequestHeader:
    """INVOKE_BROKER_TO_RESET_OFFSET's header, and RESET_CONSUMER_CLIENT_OFFSET's."""

    topic: str
    group: str
    timestamp: int
    is_force: bool | None = None


@dataclass(frozen=True, slots=True)
class ReplyMessageRequestHeader:
    """PUSH_REPLY_MESSAGE_TO_CLIENT's header (RocketMQ ReplyMessageRequestHeader)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    born_host: str
    store_host: str
    store_timestamp: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool | None = None
