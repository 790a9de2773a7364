"""Raw POP requests (RocketMQ 5's remoting codes), and receipt handles built from a pop
response exactly as the 5.x remoting client builds them (MQClientAPIImpl.processPopResponse)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message import MessageExt
from lakemq.common.record import iter_records
from lakemq.remoting import RemotingCommand
from lakemq.remoting.headers import decode_header, encode_header
from lakemq.remoting.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)


@dataclass
class Popped:
    message: MessageExt
    handle: str  # the client's POP_CK property
    attempt: int

    @property
    def body(self) -> bytes:
        return self.message.body


_INIT_MIN = 0  # ConsumeInitMode.MIN: a new group starts at the queue's first message


def pop_request(group: str, topic: str, *, queue_id: int = -1, max_nums: int = 32, invisible_ms: int = 30_000,
                poll_ms: int = 0, order: bool = False, exp: str | None = None,
                exp_type: str = "TAG", init_mode: int = _INIT_MIN) -> RemotingCommand:
    header = PopMessageRequestHeader(group, topic, queue_id, max_nums, invisible_ms, poll_ms,
                                     int(time.time() * 1000), init_mode, exp_type if exp else None, exp, order)
    return RemotingCommand.request(RequestCode.POP_MESSAGE, encode_header(header))


def popped(response: RemotingCommand, broker_name: str, order: bool = False) -> list[Popped]:
    """The messages of a pop response with their handles; [] for POLLING_TIMEOUT."""
    if response.code == ResponseCode.POLLING_TIMEOUT:
        return []
    assert response.code == ResponseCode.SUCCESS, f"{response.code} {response.remark}"
    header = decode_header(PopMessageResponseHeader, response.ext_fields)
    starts = dict(_entries(header.start_offset_info))
    counts = dict(_entries(header.order_count_info))
    out = []
    for msg in iter_records(response.body):
        mark = "1" if msg.topic.startswith("%RETRY%") else "0"
        key = f"{mark}@{msg.queue_id}"
        handle = " ".join(str(p) for p in (starts[key], header.pop_time, header.invisible_time, header.revive_qid,
                                          mark, broker_name, msg.queue_id, msg.queue_offset))
        earlier = int(counts.get(f"{mark}@qo{msg.queue_id}%{msg.queue_offset}", 0)) if order else msg.reconsume_times
        out.append(Popped(msg, handle, earlier + 1))
    return out


def _entries(info: str | None) -> list[tuple[str, str]]:
    pairs = []
    for one in (info or "").split(";"):
        if one:
            mark, queue, value = one.split(" ")
            pairs.append((f"{mark}@{queue}", value))
    return pairs


def ack_request(group: str, topic: str, message: Popped) -> RemotingCommand:
    header = AckMessageRequestHeader(group, topic, message.message.queue_id, message.handle,
                                     message.message.queue_offset)
    return RemotingCommand.request(RequestCode.ACK_MESSAGE, encode_header(header))


def change_request(group: str, topic: str, message: Popped, invisible_ms: int) -> RemotingCommand:
    header = ChangeInvisibleTimeRequestHeader(group, topic, message.message.queue_id, message.handle,
                                              message.message.queue_offset, invisible_ms)
    return RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, encode_header(header))


def changed_handle(response: RemotingCommand, message: Popped) -> str:
    """The new handle a CHANGE_MESSAGE_INVISIBLETIME response gives (as the client makes it)."""
    assert response.code == ResponseCode.SUCCESS, f"{response.code} {response.remark}"
    header = decode_header(ChangeInvisibleTimeResponseHeader, response.ext_fields)
    parts = message.handle.split(" ")
    parts[1], parts[2], parts[3] = str(header.pop_time), str(header.invisible_time), str(header.revive_qid)
    return " ".join(parts)
