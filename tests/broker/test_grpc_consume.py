"""The gRPC consumer face's own parts: auto-renewal of push consumers' deliveries
(lakemq.broker.grpc.renew) over an in-process broker's real POP core (a renewed delivery stays
hidden past its first deadline, the handle the client holds acks it, a client that goes away
stops its renewals), and what a slave, which has no POP core, answers."""

from __future__ import annotations

from pathlib import Path

from lakemq.broker.config import BrokerConfig
from lakemq.broker.grpc.consume import Consumption
from lakemq.broker.grpc.renew import ReceiptRenewer
from lakemq.broker.pop import PopRequest
from lakemq.broker.subscription_group_manager import SubscriptionGroupManager
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.grpc._pb import definition_pb2 as v2
from lakemq.grpc._pb import service_pb2 as rpc
from lakemq.remoting.headers import CreateTopicRequestHeader
from tests.broker.wire import in_process_broker, request, send_request

G = "RenewGroup"


async def test_renewed_deliveries_stay_hidden_until_the_client_acks_or_goes(tmp_path: Path) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        header = CreateTopicRequestHeader("RenewT", "TBW102", 1, 1, 6, "SINGLE_TAG")
        assert (await client.invoke(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, header), 10)).code == \
            ResponseCode.SUCCESS
        for body in (b"kept", b"dropped"):
            assert (await client.invoke(addr, send_request("RenewT", body), 10)).code == ResponseCode.SUCCESS
        pop = controller.pop_service
        assert pop is not None
        renewer = ReceiptRenewer(pop, slice_ms=1500, ahead_ms=1000, max_ms=3_600_000)
        try:
            got = await pop.pop(PopRequest(G, "RenewT", 2, renewer.slice_ms, poll_ms=5000, init_from_min=True))
            kept, dropped = sorted(got.messages, key=lambda m: m.message.body != b"kept")
            renewer.track("client-1", G, "RenewT", kept.handle)
            renewer.track("client-2", G, "RenewT", dropped.handle)
            # Three slices later: the renewed ones are still hidden.
            assert (await pop.pop(PopRequest(G, "RenewT", 2, 10_000, poll_ms=4500))).messages == []
            renewer.drop_client("client-2")  # gone: its delivery expires and comes back
            back = await pop.pop(PopRequest(G, "RenewT", 2, 10_000, poll_ms=10_000))
            assert [(m.message.body, m.attempt) for m in back.messages] == [(b"dropped", 2)]
            current = await renewer.take(G, kept.handle.encode())
            assert current is not None and current.pop_time > kept.handle.pop_time
            await pop.ack(G, "RenewT", current)
            assert len(renewer) == 0
            assert (await pop.pop(PopRequest(G, "RenewT", 2, 10_000, poll_ms=3000))).messages == []
        finally:
            await renewer.close()


async def test_a_slave_answers_that_pop_consumption_is_its_masters(tmp_path: Path) -> None:
    config = BrokerConfig(broker_name="broker-s")
    consumption = Consumption(config, SubscriptionGroupManager(config, tmp_path), None, 20_000)
    request = rpc.ReceiveMessageRequest(group=v2.Resource(name=G), batch_size=1, auto_renew=True,
                                        message_queue=v2.MessageQueue(topic=v2.Resource(name="T")))
    answers = [a async for a in consumption.receive(request, "client-1", 10.0)]
    assert [a.status.code for a in answers] == [v2.Code.FORBIDDEN]
    assert "broker-s is a slave" in answers[0].status.message
    acked = await consumption.ack(rpc.AckMessageRequest(entries=[rpc.AckMessageEntry(receipt_handle="x")]))
    assert acked.status.code == v2.Code.FORBIDDEN
    changed = await consumption.change_invisible(rpc.ChangeInvisibleDurationRequest(receipt_handle="x"))
    assert changed.status.code == v2.Code.FORBIDDEN
