"""The compiled plain send (lakemq/broker/_send_path.pyx) against the send processor's Python
path it stands in for: two brokers get the same requests over loopback, one with the compiled
path and one without it, and answer and store the same, for plain sends and for everything the
compiled path must leave to Python (odd numbers, missing fields, retry topics, transaction
halves, batches, unknown topics, refused queue ids, a read-only broker)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakemq.broker._send_path import PlainSends
from lakemq.broker.broker_controller import BrokerController
from lakemq.common.codes import RequestCode
from lakemq.common.message import MessageConst, properties_to_string
from lakemq.common.record import decode_record
from lakemq.remoting import RemotingCommand
from lakemq.remoting.dispatch import RequestContext
from lakemq.store.get_results import GetMessageStatus
from tests.broker.wire import in_process_broker
from tests.store.store_helpers import wait_dispatched

TOPIC = "SendPath"
numbers = st.sampled_from(["0", "1", "7", "-1", "12", " 3", "+2", "x", "", "3_0", "١", "99999999999999999999"])
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
properties = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from([MessageConst.TAGS, MessageConst.KEYS, MessageConst.WAIT_STORE_MSG_OK,
                                     MessageConst.TRANSACTION_PREPARED, "CLUSTER", "a"]),
                    st.sampled_from(["true", "false", "x", ""]) | texts, max_size=4).map(properties_to_string),
    texts)


# A plain send; then none, one or two of these changes (the field and its new value).
_CHANGES = st.one_of(
    st.tuples(st.just("b"), st.sampled_from(["%RETRY%G", "NoSuchTopic", "SCHEDULE_TOPIC_XXXX", "bad topic"])),
    st.tuples(st.sampled_from("defghjl"), numbers),
    st.tuples(st.just("m"), st.sampled_from(["true", "1", "TRUE"])),
    st.tuples(st.just("f"), st.sampled_from(["1", "4", "8", "12"])),
    st.tuples(st.just("i"), properties),
    st.tuples(st.sampled_from("abcdefghi"), st.none()),  # the field left out
)


@st.composite
def requests(draw: st.DrawFn) -> RemotingCommand:
    fields: dict[str, str | None] = {
        "a": "PG", "b": TOPIC, "c": "TBW102", "d": "4", "e": "2", "f": "0", "g": str(int(time.time() * 1000)),
        "h": draw(st.sampled_from(["0", "-5"])), "i": draw(properties), "j": "0", "k": "false", "l": "16",
        "m": "false"}
    for name, value in draw(st.lists(_CHANGES, max_size=2)):
        fields[name] = value
    code = draw(st.sampled_from([RequestCode.SEND_MESSAGE_V2] * 6 + [RequestCode.SEND_BATCH_MESSAGE]))
    return RemotingCommand.request(code, {k: v for k, v in fields.items() if v is not None},
                                   draw(st.binary(min_size=1, max_size=40)))


def _stored(controller: BrokerController, offset: int) -> tuple[object, ...] | None:
    """What a queue offset of TOPIC's queue 2 holds, but where and when it was stored."""
    result = controller.store.get_message("g", TOPIC, 2, offset, 1)
    if result.status is not GetMessageStatus.FOUND:
        return None
    msg = decode_record(result.buffers[0])
    return (msg.topic, msg.body, msg.flag, msg.properties, msg.queue_id, msg.sys_flag, msg.born_timestamp,
            msg.reconsume_times)


def _answer(response: RemotingCommand) -> tuple[object, ...]:
    fields = dict(response.ext_fields)
    msg_id = fields.pop("msgId", None)
    # The offset message id's host differs between the brokers; its CommitLog offset must not.
    # Refusals may name the producer's address, which differs too.
    remark = re.sub(r"127\.0\.0\.1:\d+", "ADDR", response.remark or "")
    return response.code, remark, fields, None if msg_id is None else msg_id[16:]


# Under SYNC_FLUSH a put is answered once flushed: the compiled side through
# PlainSends.acknowledged, the Python side through the processor's reply.
@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_compiled_and_python_sends_answer_and_store_the_same(tmp_path: Path, flush: str) -> None:
    for side in ("compiled", "python"):
        (tmp_path / side).mkdir()

    async def run() -> None:
        async with in_process_broker(tmp_path / "compiled", flushDiskType=flush) as (compiled, client), \
                in_process_broker(tmp_path / "python", flushDiskType=flush) as (python, _):
            class _Off:
                def send(self, ctx: object, request: object, sink: object = None, token: object = None) -> None:
                    return None

            class _Counted:
                def __init__(self, inner: PlainSends) -> None:
                    self.inner, self.taken = inner, 0

                def send(self, ctx: RequestContext, request: RemotingCommand, sink: object = None,
                         token: object = None) -> object:
                    response = self.inner.send(ctx, request, sink, token)
                    self.taken += response is not None
                    return response

                def acknowledged(self, *answer: object) -> RemotingCommand:
                    return self.inner.acknowledged(*answer)  # type: ignore[arg-type]

            python._send_processor._plain = _Off()  # type: ignore[assignment]
            counted = compiled._send_processor._plain = _Counted(compiled._send_processor._plain)  # type: ignore[assignment]
            for controller in (compiled, python):
                controller.topic_config_manager.create_topic_in_send_message_method(TOPIC, "TBW102", 4)
            addrs = (compiled.broker_addr, python.broker_addr)
            seen = 0

            @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
            @given(requests())
            def check(request: RemotingCommand) -> None:
                nonlocal seen
                answers = [asyncio.run_coroutine_threadsafe(
                    client.invoke(addr, RemotingCommand.request(request.code, request.ext_fields, request.body), 5),
                    loop).result() for addr in addrs]
                assert _answer(answers[0]) == _answer(answers[1])
                for controller in (compiled, python):
                    # Not store.dispatch(): from this thread it only wakes the reput thread
                    # while the loop's own pass runs, and the pass may not have ended yet.
                    wait_dispatched(controller.store)
                while True:
                    stored = [_stored(c, seen) for c in (compiled, python)]
                    assert stored[0] == stored[1]
                    if stored[0] is None:
                        break
                    seen += 1

            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, check)
            assert seen > 10 and counted.taken > 10  # plain sends were stored, the compiled path took them

    asyncio.run(run())
