"""SYNC_FLUSH answers that one fdatasync acknowledges go out together: sends pipelined on one
connection (one producer, many sends in flight) get their answers in one write, as redis
answers what one fsync covered, instead of one write each."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lakemq.broker.loop_acks import LoopAcks
from lakemq.common.codes import ResponseCode
from lakemq.remoting.codec import FrameDecoder, encode_frame
from lakemq.remoting.protocol import RemotingConnection
from lakemq.store.results import PutMessageStatus
from tests.broker.wire import in_process_broker, send_request

pytestmark = pytest.mark.timeout(60)
TOPIC = "AckedTogether"
SENDS = 16


async def test_one_fdatasyncs_answers_for_a_connection_are_written_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches: list[int] = []
    real = RemotingConnection.send_responses

    def counted(self: RemotingConnection, responses: list) -> None:
        batches.append(len(responses))
        real(self, responses)

    monkeypatch.setattr(RemotingConnection, "send_responses", counted)
    async with in_process_broker(tmp_path, flushDiskType="SYNC_FLUSH") as (controller, client):
        host, port = controller.broker_addr.rsplit(":", 1)
        first = await client.invoke(controller.broker_addr, send_request(TOPIC, b"creates the topic"), 10.0)
        assert first.code == ResponseCode.SUCCESS
        batches.clear()
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            frames = []
            for i in range(SENDS):
                request = send_request(TOPIC, b"m%d" % i, queue_id=i % 4)
                request.opaque = 1000 + i
                frames.append(encode_frame(request))
            writer.write(b"".join(frames))  # one read on the broker: appended in one turn
            await writer.drain()
            decoder, answers = FrameDecoder(), []
            while len(answers) < SENDS:
                answers += decoder.feed(await asyncio.wait_for(reader.read(65536), 10.0))
        finally:
            writer.close()
    assert sorted(a.opaque for a in answers) == list(range(1000, 1000 + SENDS))
    assert all(a.code == ResponseCode.SUCCESS and a.ext_fields["msgId"] for a in answers)
    # One flush on the loop acknowledges them all: one write. (After a slow fdatasync the
    # commit thread flushes for a while, and may cover them in two or three.)
    assert sum(batches) == SENDS and max(batches) > 1, batches


def test_a_send_whose_answer_fails_leaves_the_others_answered(caplog: pytest.LogCaptureFixture) -> None:
    written: list[list[object]] = []

    class Connection:
        def send_responses(self, responses: list[object]) -> None:
            written.append(responses)

    connection = Connection()

    class Awaited:
        def __init__(self, answer: object) -> None:
            self.answer = answer

        def reply(self, status: PutMessageStatus) -> tuple[object, object]:
            if self.answer is None:
                raise RuntimeError("broken answer")
            return connection, self.answer

    LoopAcks._resolve([(Awaited("first"), PutMessageStatus.PUT_OK), (Awaited(None), PutMessageStatus.PUT_OK),
                       (Awaited("third"), PutMessageStatus.FLUSH_DISK_TIMEOUT)])  # type: ignore[list-item]
    assert written == [["first", "third"]]
    assert "answering an acknowledged send failed" in caplog.text
