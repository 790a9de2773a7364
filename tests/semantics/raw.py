"""Raw protocol helpers for the semantics tests: a SEND_MESSAGE_V2 exactly as a client that
does no retrying of its own would send it, timed."""

from __future__ import annotations

import time
from dataclasses import dataclass

from lakemq.common.codes import RequestCode
from lakemq.remoting import RemotingClient, RemotingCommand
from lakemq.remoting.headers import SendMessageRequestHeader, encode_send_header_v2


@dataclass(frozen=True)
class Answer:
    code: int
    remark: str
    seconds: float  # from sending to the answer


def send_request(topic: str, body: bytes, queue_id: int = 0) -> RemotingCommand:
    header = SendMessageRequestHeader("raw_producer", topic, "TBW102", 4, queue_id, 0, int(time.time() * 1000), 0)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(header), body)


async def timed_send(client: RemotingClient, addr: str, topic: str, body: bytes, timeout: float = 15) -> Answer:
    started = time.monotonic()
    response = await client.invoke(addr, send_request(topic, body), timeout)
    return Answer(response.code, response.remark or "", time.monotonic() - started)
