"""POP consumption through RocketMQ 5's remoting codes against an in-process broker: receipt
handles as the 5.x client builds them, redelivery with a raised attempt, change of invisible
time, DLQ after the group's max attempts, FIFO order, a 4.x pull group beside a POP group, and
a restart that keeps what was acked and what was not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lakemq.broker.broker_controller import BrokerController
from lakemq.broker.pop import PopRequest, ReceiptHandle
from lakemq.broker.pop.copies import put_copy
from lakemq.broker.subscription_group_manager import SubscriptionGroupConfig
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.message import MessageConst, MessageExt
from lakemq.common.record import iter_records
from lakemq.errors import ReceiptHandleError
from lakemq.remoting import RemotingClient
from lakemq.remoting.headers import CreateTopicRequestHeader
from tests.broker.pop_wire import Popped, ack_request, change_request, changed_handle, pop_request, popped
from tests.broker.wire import in_process_broker, pull_request, request, send_request

G = "PopGroup"


async def _topic(client: RemotingClient, addr: str, topic: str, queues: int = 1) -> None:
    header = CreateTopicRequestHeader(topic, "TBW102", queues, queues, 6, "SINGLE_TAG")
    created = await client.invoke(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, header), 10)
    assert created.code == ResponseCode.SUCCESS, created.remark


async def _send(controller: BrokerController, client: RemotingClient, topic: str, *bodies: bytes,
                queue_id: int = 0, tags: str | None = None, properties: dict[str, str] | None = None) -> None:
    """Send each body, then wait until the queue's ConsumeQueue holds them: the reput dispatches
    behind the CommitLog write, and a pop that does not long-poll sees only what is dispatched."""
    end = 0
    for body in bodies:
        sent = await client.invoke(controller.broker_addr, send_request(topic, body, queue_id=queue_id, tags=tags, properties=properties), 10)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        end = int(sent.ext_fields["queueOffset"]) + 1
    store = controller.store
    assert store is not None
    for _ in range(1000):
        if store.get_max_offset_in_queue(topic, queue_id) >= end:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{topic}:{queue_id} not dispatched to {end} within 10 s")


async def _dead_letters(client: RemotingClient, addr: str) -> list[MessageExt]:
    """The group's dead letters, once the DLQ's ConsumeQueue has them (bounded wait)."""
    for _ in range(100):
        pulled = await client.invoke(addr, pull_request("DlqReader", f"%DLQ%{G}", 0, 0), 10)
        dead = list(iter_records(pulled.body or b""))
        if dead:
            return dead
        await asyncio.sleep(0.1)
    return []


async def _pop(client: RemotingClient, addr: str, topic: str, **kw: object) -> list[Popped]:
    response = await client.invoke(addr, pop_request(G, topic, **kw), 30)  # type: ignore[arg-type]
    return popped(response, "broker-a", bool(kw.get("order", False)))


async def test_acked_messages_never_come_back_and_unacked_ones_do(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "PopT")
        await _send(controller, client, "PopT", b"m0", b"m1")
        first = await _pop(client, addr, "PopT", invisible_ms=3000)
        assert [m.body for m in first] == [b"m0", b"m1"] and [m.attempt for m in first] == [1, 1]
        assert await _pop(client, addr, "PopT") == []  # both hidden
        assert (await client.invoke(addr, ack_request(G, "PopT", first[0]), 10)).code == ResponseCode.SUCCESS
        again = await _pop(client, addr, "PopT", poll_ms=10_000)  # m1 comes back once its time is up
        assert [m.body for m in again] == [b"m1"] and again[0].attempt == 2
        assert again[0].message.topic == f"%RETRY%{G}_PopT"
        assert again[0].message.properties[MessageConst.RETRY_TOPIC] == "PopT"
        uniq = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        assert again[0].message.properties[uniq] == first[1].message.properties[uniq]
        # A handle of the first delivery is over; the new one acks.
        stale = await client.invoke(addr, ack_request(G, "PopT", first[1]), 10)
        assert stale.code == ResponseCode.NO_MESSAGE
        assert (await client.invoke(addr, ack_request(G, "PopT", again[0]), 10)).code == ResponseCode.SUCCESS
        assert await _pop(client, addr, "PopT", poll_ms=2500) == []  # m0 acked: never again


async def test_change_invisible_time_moves_the_deadline_with_a_new_handle(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "ChgT")
        await _send(controller, client, "ChgT", b"c0")
        [msg] = await _pop(client, addr, "ChgT", invisible_ms=3000)
        changed = await client.invoke(addr, change_request(G, "ChgT", msg, 60_000), 10)
        renewed = Popped(msg.message, changed_handle(changed, msg), msg.attempt)
        assert renewed.handle != msg.handle
        assert await _pop(client, addr, "ChgT", poll_ms=4000) == []  # past the first deadline: still hidden
        assert (await client.invoke(addr, ack_request(G, "ChgT", msg, ), 10)).code == ResponseCode.NO_MESSAGE
        assert (await client.invoke(addr, ack_request(G, "ChgT", renewed), 10)).code == ResponseCode.SUCCESS


async def test_dead_lettered_after_the_groups_max_attempts(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        controller.subscription_group_manager.update_subscription_group_config(
            SubscriptionGroupConfig(G, retry_max_times=2))
        await _topic(client, addr, "DlqT")
        await _send(controller, client, "DlqT", b"d0")
        attempts = []
        for _ in range(2):
            [msg] = await _pop(client, addr, "DlqT", invisible_ms=500, poll_ms=10_000)
            attempts.append(msg.attempt)
        assert attempts == [1, 2]
        assert await _pop(client, addr, "DlqT", poll_ms=2500) == []
        store = controller.store
        assert store is not None
        [dead] = await _dead_letters(client, addr)
        assert dead.body == b"d0" and dead.properties[MessageConst.RETRY_TOPIC] == "DlqT"


async def test_fifo_holds_a_queue_until_its_message_is_acked(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "FifoT")
        await _send(controller, client, "FifoT", b"f0", b"f1", b"f2")
        [f0] = await _pop(client, addr, "FifoT", order=True, max_nums=1, invisible_ms=3000)
        assert f0.body == b"f0"
        assert await _pop(client, addr, "FifoT", order=True, max_nums=1) == []  # f1 waits for f0
        [f0_again] = await _pop(client, addr, "FifoT", order=True, max_nums=1, poll_ms=10_000)
        assert f0_again.body == b"f0" and f0_again.attempt == 2  # expired: again, in place
        assert f0_again.message.topic == "FifoT"
        assert (await client.invoke(addr, ack_request(G, "FifoT", f0_again), 10)).code == ResponseCode.SUCCESS
        rest = await _pop(client, addr, "FifoT", order=True, max_nums=8)
        assert [m.body for m in rest] == [b"f1", b"f2"] and [m.attempt for m in rest] == [1, 1]


async def test_a_pull_group_and_a_pop_group_read_the_same_topic(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "BothT")
        await _send(controller, client, "BothT", b"b0", b"b1")
        got = await _pop(client, addr, "BothT")
        for msg in got:
            assert (await client.invoke(addr, ack_request(G, "BothT", msg), 10)).code == ResponseCode.SUCCESS
        pulled = await client.invoke(addr, pull_request("PullGroup", "BothT", 0, 0), 10)
        assert [m.body for m in iter_records(pulled.body)] == [m.body for m in got] == [b"b0", b"b1"]
        # The POP group's consumer offset follows its acks (what admin tools show as progress).
        assert controller.consumer_offset_manager.query_offset(G, "BothT", 0) == 2


async def test_a_restart_keeps_acked_and_unacked_deliveries(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "RestartT")
        await _send(controller, client, "RestartT", b"r0", b"r1", b"r2")
        r0, r1, _r2 = await _pop(client, addr, "RestartT", invisible_ms=5000)
        assert (await client.invoke(addr, ack_request(G, "RestartT", r0), 10)).code == ResponseCode.SUCCESS
        changed = await client.invoke(addr, change_request(G, "RestartT", r1, 600_000), 10)
        renewed = Popped(r1.message, changed_handle(changed, r1), 1)
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        back = await _pop(client, addr, "RestartT", poll_ms=10_000)
        assert [m.body for m in back] == [b"r2"] and back[0].attempt == 2  # r0 acked, r1 hidden for long
        assert (await client.invoke(addr, ack_request(G, "RestartT", renewed), 10)).code == ResponseCode.SUCCESS


async def test_a_tag_filter_delivers_only_matching_messages(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "TagT")
        for body, tag in ((b"a0", "TagA"), (b"b0", "TagB"), (b"a1", "TagA")):
            await _send(controller, client, "TagT", body, tags=tag)
        got = await _pop(client, addr, "TagT", exp="TagA")
        assert [m.body for m in got] == [b"a0", b"a1"]
        for m in got:
            assert (await client.invoke(addr, ack_request(G, "TagT", m), 10)).code == ResponseCode.SUCCESS
        assert controller.consumer_offset_manager.query_offset(G, "TagT", 0) == 3  # b0 skipped, not pending


async def test_a_sql92_filter_delivers_only_matching_messages(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "SqlT")
        for body, region in ((b"eu", "eu"), (b"us", "us")):
            await _send(controller, client, "SqlT", body, properties={"region": region})
        got = await _pop(client, addr, "SqlT", exp="region = 'eu'", exp_type="SQL92")
        assert [m.body for m in got] == [b"eu"]
    async with in_process_broker(tmp_path, enablePropertyFilter="false") as (controller, client):
        refused = await client.invoke(controller.broker_addr,
                                      pop_request(G, "SqlT", exp="region = 'eu'", exp_type="SQL92"), 10)
        assert refused.code == ResponseCode.SYSTEM_ERROR and "SQL92" in (refused.remark or "")


async def test_the_service_api_the_grpc_face_calls(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "SvcT")
        await _send(controller, client, "SvcT", b"s0")
        service = controller.pop_service
        assert service is not None
        result = await service.pop(PopRequest(G, "SvcT", 4, 30_000, poll_ms=10_000, init_from_min=True))
        [m] = result.messages
        assert (m.attempt, m.topic, m.message.body) == (1, "SvcT", b"s0")
        assert ReceiptHandle.parse(m.handle.encode()) == m.handle
        renewed = await service.change_invisible(G, "SvcT", m.handle, 1000)
        assert renewed.pop_time > m.handle.pop_time and renewed.invisible_ms == 1000
        with pytest.raises(ReceiptHandleError):
            await service.ack(G, "SvcT", m.handle)
        await service.forward_to_dlq(G, "SvcT", renewed)
        with pytest.raises(ReceiptHandleError):
            await service.ack(G, "SvcT", renewed)
        assert [d.body for d in await _dead_letters(client, addr)] == [b"s0"]
        assert (await service.pop(PopRequest(G, "SvcT", 4, 30_000, poll_ms=2500))).messages == []
        with pytest.raises(ReceiptHandleError):
            ReceiptHandle.parse("not a handle")


async def test_a_revive_cut_short_is_settled_from_the_copies_it_made(tmp_path: Path) -> None:
    """What a kill -9 between a revive's copies and its done records leaves: the rev record and
    one of two copies. After the restart the copied delivery is over (its copy is delivered,
    once) and the other is still in flight under its handle."""
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "SettleT")
        await _send(controller, client, "SettleT", b"s0", b"s1")
        s0, s1 = await _pop(client, addr, "SettleT", invisible_ms=600_000)
        service, store = controller.pop_service, controller.store
        assert service is not None and store is not None
        target, revive_id = f"%RETRY%{G}_SettleT", 77

        def cut_short() -> None:
            service._record([{"k": "rev", "x": revive_id, "m": {target: 0}}])
            original = store.look_message_by_offset(s0.message.commit_log_offset)
            assert original is not None
            put_copy(store, controller.topic_config_manager, original, target=target, queue_nums=1,
                     origin_topic="SettleT", reconsume_times=1,
                     revived=f"{revive_id} {G} SettleT 0 {s0.message.queue_offset}")

        await service._run(cut_short)
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        assert (await client.invoke(addr, ack_request(G, "SettleT", s0), 10)).code == ResponseCode.NO_MESSAGE
        [copy] = await _pop(client, addr, "SettleT")
        assert (copy.body, copy.attempt) == (b"s0", 2)
        assert (await client.invoke(addr, ack_request(G, "SettleT", copy), 10)).code == ResponseCode.SUCCESS
        assert (await client.invoke(addr, ack_request(G, "SettleT", s1), 10)).code == ResponseCode.SUCCESS
        assert await _pop(client, addr, "SettleT", poll_ms=1500) == []


async def test_a_held_pop_is_answered_when_a_message_arrives(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "HoldT")
        assert await _pop(client, addr, "HoldT") == []  # nothing there yet
        began = asyncio.get_running_loop().time()
        held = asyncio.create_task(_pop(client, addr, "HoldT", poll_ms=20_000))
        await _send(controller, client, "HoldT", b"h0")
        got = await held
        assert [m.body for m in got] == [b"h0"]
        assert asyncio.get_running_loop().time() - began < 10  # woken, not timed out


async def test_concurrent_acks_are_journaled_together_and_a_repeat_fails(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "AckT")
        await _send(controller, client, "AckT", *(f"a{i}".encode() for i in range(20)))
        service = controller.pop_service
        assert service is not None
        result = await service.pop(PopRequest(G, "AckT", 32, 3000, poll_ms=10_000, init_from_min=True))
        handles = [m.handle for m in result.messages]
        while len(handles) < 20:  # dispatch may still be behind the sends
            more = await service.pop(PopRequest(G, "AckT", 32, 3000, poll_ms=10_000))
            handles += [m.handle for m in more.messages]
        outcomes = await asyncio.gather(*(service.ack(G, "AckT", h) for h in [*handles, handles[0]]),
                                        return_exceptions=True)
        assert outcomes[:20] == [None] * 20
        assert isinstance(outcomes[20], ReceiptHandleError)
        assert controller.consumer_offset_manager.query_offset(G, "AckT", 0) == 20
    async with in_process_broker(tmp_path) as (controller, client):  # past their deadline: they stay acked
        assert await _pop(client, controller.broker_addr, "AckT", poll_ms=5000) == []


async def test_fifo_message_out_of_attempts_is_dead_lettered_and_the_queue_moves_on(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        controller.subscription_group_manager.update_subscription_group_config(
            SubscriptionGroupConfig(G, retry_max_times=2))
        await _topic(client, addr, "FifoDlqT")
        await _send(controller, client, "FifoDlqT", b"x0", b"x1")
        seen = []
        for _ in range(3):
            got = await _pop(client, addr, "FifoDlqT", order=True, max_nums=1, invisible_ms=500, poll_ms=10_000)
            seen += [(m.body, m.attempt) for m in got]
        assert seen == [(b"x0", 1), (b"x0", 2), (b"x1", 1)]
        assert [d.body for d in await _dead_letters(client, addr)] == [b"x0"]


async def test_a_new_group_in_max_init_mode_starts_at_the_end(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        await _topic(client, addr, "InitT")
        await _send(controller, client, "InitT", b"old")
        store = controller.store
        assert store is not None
        for _ in range(1000):  # dispatched (within 10 s), so "the end" is after it
            if store.get_max_offset_in_queue("InitT", 0) >= 1:
                break
            await asyncio.sleep(0.01)
        assert store.get_max_offset_in_queue("InitT", 0) == 1
        assert await _pop(client, addr, "InitT", init_mode=1) == []  # ConsumeInitMode.MAX
        await _send(controller, client, "InitT", b"new")
        assert [m.body for m in await _pop(client, addr, "InitT", init_mode=1, poll_ms=10_000)] == [b"new"]
