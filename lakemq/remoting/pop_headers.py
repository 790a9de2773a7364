"""Custom headers of RocketMQ 5's POP requests on the remoting protocol (POP_MESSAGE,
ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME), shaped as their Java classes (lakemq.remoting.headers
explains the form).

The offset infos of a pop response are ``;``-joined entries, each ``topicMark queueId value``
(``topicMark`` 1 for the pop retry topic, 0 otherwise), as ExtraInfoUtil writes them: the
queue's check point start (``startOffsetInfo``), its messages' offsets, comma-joined
(``msgOffsetInfo``), and for FIFO pops each message's earlier attempts, keyed
``qo{queueId}%{offset}`` (``orderCountInfo``). A client builds each message's receipt handle
from them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AckMessageRequestHeader",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
]


@dataclass(frozen=True, slots=True)
class PopMessageRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int  # -1: any queue
    max_msg_nums: int
    invisible_time: int
    poll_time: int
    born_time: int
    init_mode: int  # ConsumeInitMode: 0 MIN (a new group starts at the first message), 1 MAX (at the end)
    exp_type: str | None = None
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None


@dataclass(frozen=True, slots=True)
class PopMessageResponseHeader:
    pop_time: int
    invisible_time: int
    revive_qid: int
    rest_num: int
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@dataclass(frozen=True, slots=True)
class AckMessageRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int


@dataclass(frozen=True, slots=True)
class ChangeInvisibleTimeRequestHeader:
    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int
    invisible_time: int


@dataclass(frozen=True, slots=True)
class ChangeInvisibleTimeResponseHeader:
    pop_time: int
    invisible_time: int
    revive_qid: int
