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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from lakemq.common.codes import RequestCode
from lakemq.common.config import snake_to_camel
from lakemq.errors import RemotingCommandError
from lakemq.remoting.codec import RemotingCommand

__all__ = [
    "CheckTransactionStateRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteKVConfigRequestHeader",
    "DeleteTopicRequestHeader",
    "EndTransactionRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMinOffsetRequestHeader",
    "GetRouteInfoRequestHeader",
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
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
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
    "send_header_v2_fields",
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
    default: Any


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
        kind = hint if hint in (bool, int) else str
        plan.append(_Field(f.name, _wire_name(f.name), required, kind, None if required else f.default))
    return tuple(plan)


def _to_bool(raw: str) -> bool:
    # Java reads Boolean.parseBoolean (anything but "true" is false); the C++ client
    # writes "0"/"1", so "1" counts as true too.
    return raw == "true" or raw.strip().lower() in ("true", "1")


def _to_int(wire: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise RemotingCommandError(f"header field {wire}: expected a number, got {raw!r}") from None


def _bad_number(fields: Mapping[str, str], wires: tuple[tuple[str, str, bool], ...]) -> RemotingCommandError:
    """The error for the first numeric field that does not parse (the decoder's slow path)."""
    for wire, name, numeric in wires:
        raw = fields.get(wire)
        if numeric and raw is not None:
            _to_int(name, raw)
    return RemotingCommandError("a header field is not a number")


def _text(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _missing(wire: str) -> RemotingCommandError:
    return RemotingCommandError(f"the custom field <{wire}> is null")


_Decoder = Callable[[Mapping[str, str]], Any]
_DECODERS: dict[tuple[type, tuple[tuple[str, str], ...]], _Decoder] = {}
_ENCODERS: dict[tuple[type, tuple[tuple[str, str], ...]], Callable[[Any], dict[str, str]]] = {}


def _decoder(cls: type, wire_names: tuple[tuple[str, str], ...] = ()) -> _Decoder:
    decoder = _DECODERS.get((cls, wire_names))
    if decoder is None:
        decoder = _DECODERS[(cls, wire_names)] = _make_decoder(cls, wire_names)
    return decoder


def _encoder(cls: type, wire_names: tuple[tuple[str, str], ...] = ()) -> Callable[[Any], dict[str, str]]:
    encoder = _ENCODERS.get((cls, wire_names))
    if encoder is None:
        encoder = _ENCODERS[(cls, wire_names)] = _make_encoder(cls, wire_names)
    return encoder


def _make_decoder(cls: type, wire_names: tuple[tuple[str, str], ...]) -> _Decoder:
    """A function reading header ``cls`` from extFields, generated once per class (as
    dataclasses generates ``__init__``): one ``get`` per field, no loop or reflection per
    request. ``wire_names`` renames fields on the wire (SendMessageRequestHeaderV2's letters).

    The header is filled through its slots' setters, which skips the frozen ``__init__``'s
    keyword parsing and per-field ``object.__setattr__`` (2.6x faster for the send header; the
    result is the same frozen instance). Numbers are converted inline under one ``try``; a
    bad one is reported by ``_bad_number``, which names the field."""
    renamed = dict(wire_names)
    plan = _plan(cls)
    lines = ["def decode(fields):", "    get = fields.get"]
    env: dict[str, Any] = {"_new": object.__new__, "cls": cls, "_to_bool": _to_bool, "_missing": _missing,
                           "_bad_number": _bad_number}
    wires = []
    for i, f in enumerate(plan):
        wire = renamed.get(f.wire, f.wire)
        wires.append((wire, f.wire, f.kind is int))
        lines.append(f"    v{i} = get({wire!r})")
        if f.required:
            lines.append(f"    if v{i} is None: raise _missing({f.wire!r})")
    # Slots filled directly only where __init__ does nothing more (no __post_init__).
    direct = not hasattr(cls, "__post_init__") and all(
        isinstance(cls.__dict__.get(f.name), types.MemberDescriptorType) for f in plan)
    lines += ["    try:", "        h = _new(cls)" if direct else "        h = cls("]
    for i, f in enumerate(plan):
        if f.kind is int:
            value = f"int(v{i})"
        elif f.kind is bool:
            value = f"_to_bool(v{i})"
        else:
            value = f"v{i}"
        if not f.required:
            env[f"d{i}"] = f.default
            value = f"d{i} if v{i} is None else {value}"
        if direct:
            env[f"s{i}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
            lines.append(f"        s{i}(h, {value})")
        else:
            lines.append(f"            {f.name}={value},")
    if not direct:
        lines.append("        )")
    lines += ["    except ValueError:", "        raise _bad_number(fields, wires) from None", "    return h"]
    env["wires"] = tuple(wires)
    exec("\n".join(lines), env)  # noqa: S102 - source built above from the dataclass's own fields
    return env["decode"]  # type: ignore[no-any-return]


def _make_encoder(cls: type, wire_names: tuple[tuple[str, str], ...],
                  from_values: bool = False) -> Callable[..., dict[str, str]]:
    """The extFields writer for header ``cls``, generated once per class like the decoder.
    ``from_values``: a writer taking the fields' values (in declaration order, those with a
    default optional) instead of a header, for a hot path that need not build the header."""
    renamed = dict(wire_names)
    plan = _plan(cls)
    env: dict[str, Any] = {"_text": _text}
    if from_values:
        params = []
        for i, f in enumerate(plan):
            if f.required:
                params.append(f.name)
            else:
                env[f"d{i}"] = f.default
                params.append(f"{f.name}=d{i}")
        lines = [f"def encode({', '.join(params)}):", "    out = {}"]
    else:
        lines = ["def encode(h):", "    out = {}"]
    for f in plan:
        # By the declared kind: str() for an int field, true/false for a bool; _text for
        # anything else a caller put there.
        if f.kind is int:
            value = "str(v) if type(v) is int else _text(v)"
        elif f.kind is bool:
            value = "('true' if v else 'false') if type(v) is bool else _text(v)"
        else:
            value = "v if type(v) is str else _text(v)"
        lines.append(f"    v = {f.name}" if from_values else f"    v = h.{f.name}")
        lines.append("    if v is not None:")
        lines.append(f"        out[{renamed.get(f.wire, f.wire)!r}] = {value}")
    lines.append("    return out")
    exec("\n".join(lines), env)  # noqa: S102 - source built above from the dataclass's own fields
    return env["encode"]  # type: ignore[no-any-return]


def decode_header(cls: type[H], fields: Mapping[str, str] | RemotingCommand | None) -> H:
    """Build header ``cls`` from extFields (or straight from a command)."""
    if isinstance(fields, RemotingCommand):
        fields = fields.ext_fields
    header: H = _decoder(cls)(fields or {})
    return header


def encode_header(header: object) -> dict[str, str]:
    """The extFields for a header; None fields are left out."""
    return _encoder(type(header))(header)


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
_encode_send_v2 = _encoder(SendMessageRequestHeader, _V2_WIRE)
_decode_send_v2 = _decoder(SendMessageRequestHeader, _V2_WIRE)
_decode_send_v1 = _decoder(SendMessageRequestHeader)


# SendMessageRequestHeader's fields in order -> V2 extFields; what encode_send_header_v2 writes
# for the header with those values, without building it (a producer's send path).
send_header_v2_fields: Callable[..., dict[str, str]] = _make_encoder(SendMessageRequestHeader, _V2_WIRE, True)


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
