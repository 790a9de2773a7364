"""What lakemq's gRPC front door answers to bad input, through grpcio's own channel and the
stubs generated from the official definitions: clear statuses, never a hang."""

from __future__ import annotations

import gzip
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from google.protobuf import duration_pb2

from lakemq.grpc._pb import definition_pb2 as v2
from lakemq.grpc._pb import service_pb2 as rpc
from lakemq.grpc._pb.service_pb2_grpc import MessagingServiceStub
from tests.cluster import Cluster
from tests.rmq5.rmq5 import grpc_cluster, wait_for_bodies

MAX_MESSAGE = 64 << 10
TIMEOUT = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, grpc_port: int) -> Iterator[Cluster]:
    with grpc_cluster(tmp_path_factory.mktemp("cluster"), grpc_port, "BadInput", 2,
                      maxMessageSize=str(MAX_MESSAGE)) as running:
        yield running


@pytest.fixture
def channel(cluster: Cluster, grpc_port: int) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
        yield ch


def _message(body: bytes, **system: object) -> v2.Message:
    fields: dict[str, object] = {"message_id": uuid.uuid4().hex.upper(), "message_type": v2.MessageType.NORMAL,
                                 "body_encoding": v2.Encoding.IDENTITY, **system}
    sp = v2.SystemProperties(**fields)  # type: ignore[arg-type]
    return v2.Message(topic=v2.Resource(name="BadInput"), body=body, system_properties=sp)


def _send(channel: grpc.Channel, msg: v2.Message) -> rpc.SendMessageResponse:
    response: rpc.SendMessageResponse = MessagingServiceStub(channel).SendMessage(
        rpc.SendMessageRequest(messages=[msg]), timeout=TIMEOUT)
    return response


def test_malformed_protobuf_is_invalid_argument(channel: grpc.Channel) -> None:
    raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")
    with pytest.raises(grpc.RpcError) as caught:
        raw(b"\xff\xff\xff\xff", timeout=TIMEOUT)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed apache.rocketmq.v2.SendMessageRequest" in caught.value.details()


def test_unknown_rpc_is_unimplemented(channel: grpc.Channel) -> None:
    raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchRpc")
    with pytest.raises(grpc.RpcError) as caught:
        raw(b"", timeout=TIMEOUT)
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED


def test_consumer_rpcs_refuse_what_is_missing_and_unserved_rpcs_say_so(channel: grpc.Channel) -> None:
    stub = MessagingServiceStub(channel)
    started = time.monotonic()
    ack = stub.AckMessage(rpc.AckMessageRequest(), timeout=TIMEOUT)
    assert ack.status.code == v2.Code.BAD_REQUEST
    bogus = stub.AckMessage(rpc.AckMessageRequest(
        group=v2.Resource(name="BadGroup"), topic=v2.Resource(name="BadInput"),
        entries=[rpc.AckMessageEntry(message_id="X", receipt_handle="not a handle")]), timeout=TIMEOUT)
    assert bogus.status.code == v2.Code.INVALID_RECEIPT_HANDLE
    assert bogus.entries[0].status.code == v2.Code.INVALID_RECEIPT_HANDLE
    received = list(stub.ReceiveMessage(rpc.ReceiveMessageRequest(), timeout=TIMEOUT))
    assert [r.status.code for r in received] == [v2.Code.BAD_REQUEST]
    no_time = list(stub.ReceiveMessage(rpc.ReceiveMessageRequest(
        group=v2.Resource(name="BadGroup"), message_queue=v2.MessageQueue(topic=v2.Resource(name="BadInput")),
        batch_size=1), timeout=TIMEOUT))
    assert [r.status.code for r in no_time] == [v2.Code.ILLEGAL_INVISIBLE_TIME]
    pulled = list(stub.PullMessage(rpc.PullMessageRequest(), timeout=TIMEOUT))
    assert [r.status.code for r in pulled] == [v2.Code.NOT_IMPLEMENTED]
    unknown = stub.RecallMessage(rpc.RecallMessageRequest(topic=v2.Resource(name="NoSuchTopic")), timeout=TIMEOUT)
    assert unknown.status.code == v2.Code.TOPIC_NOT_FOUND
    garbled = stub.RecallMessage(rpc.RecallMessageRequest(topic=v2.Resource(name="BadInput"), recall_handle="x"),
                                 timeout=TIMEOUT)
    assert garbled.status.code == v2.Code.BAD_REQUEST
    assert time.monotonic() - started < TIMEOUT  # answered, not left to time out


def test_oversized_bodies(channel: grpc.Channel) -> None:
    too_big = _send(channel, _message(b"x" * (MAX_MESSAGE + 1)))
    assert too_big.entries[0].status.code == v2.Code.MESSAGE_BODY_TOO_LARGE
    assert too_big.status.code == v2.Code.MESSAGE_BODY_TOO_LARGE
    # A request past maxMessageSize and the room for its other fields is not even read.
    with pytest.raises(grpc.RpcError) as caught:
        _send(channel, _message(b"x" * (MAX_MESSAGE + (2 << 20))))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    # GZIP that inflates past the limit is refused too, without inflating all of it.
    bomb = _send(channel, _message(gzip.compress(b"\0" * (8 << 20)), body_encoding=v2.Encoding.GZIP))
    assert bomb.entries[0].status.code == v2.Code.MESSAGE_BODY_TOO_LARGE


def test_refused_messages_name_the_problem(channel: grpc.Channel) -> None:
    reserved = _message(b"a")
    reserved.user_properties["UNIQ_KEY"] = "x"
    assert _send(channel, reserved).entries[0].status.code == v2.Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    separator = _message(b"a")
    separator.user_properties["k"] = "v\x02TAGS\x01forged"
    assert _send(channel, separator).entries[0].status.code == v2.Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    conflict = _message(b"a", message_group="g")  # NORMAL with a message group
    assert _send(channel, conflict).entries[0].status.code == v2.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert _send(channel, _message(b"")).entries[0].status.code == v2.Code.MESSAGE_BODY_EMPTY
    corrupt = _send(channel, _message(b"not gzip", body_encoding=v2.Encoding.GZIP))
    assert corrupt.entries[0].status.code == v2.Code.MESSAGE_CORRUPTED
    # What the grpc fuzz target found (docs/FUZZING.md): answered with a status, never UNKNOWN.
    unknown_type = _message(b"a")
    unknown_type.system_properties.message_type = cast(Any, 45)
    assert _send(channel, unknown_type).entries[0].status.code == v2.Code.NOT_IMPLEMENTED
    bad_born = _message(b"a")
    bad_born.system_properties.born_timestamp.nanos = 1_700_000_000
    assert _send(channel, bad_born).entries[0].status.code == v2.Code.BAD_REQUEST
    missing = _message(b"a")
    missing.topic.name = "NoSuchTopic"
    assert _send(channel, missing).entries[0].status.code == v2.Code.TOPIC_NOT_FOUND
    route = MessagingServiceStub(channel).QueryRoute(
        rpc.QueryRouteRequest(topic=v2.Resource(name="NoSuchTopic")), timeout=TIMEOUT)
    assert route.status.code == v2.Code.TOPIC_NOT_FOUND


def test_gzip_body_is_stored_as_sent(cluster: Cluster, channel: grpc.Channel, tmp_path: Path) -> None:
    body = b"gzip me " * 100
    sent = _send(channel, _message(gzip.compress(body), body_encoding=v2.Encoding.GZIP))
    assert sent.status.code == v2.Code.OK, sent
    found = wait_for_bodies(cluster.namesrv_addr, "BadInput", "grpc-gzip-reader", {body}, 15)
    assert [m.unique_key for m in found if m.body == body] == [sent.entries[0].message_id]


def test_routes_and_assignments_name_this_front_door(channel: grpc.Channel, grpc_port: int) -> None:
    stub = MessagingServiceStub(channel)
    topic = v2.Resource(name="BadInput")
    route = stub.QueryRoute(rpc.QueryRouteRequest(topic=topic), timeout=TIMEOUT)
    assert route.status.code == v2.Code.OK
    assert [q.id for q in route.message_queues] == [0, 1]
    assert {q.permission for q in route.message_queues} == {v2.Permission.READ_WRITE}
    assert {(a.host, a.port) for q in route.message_queues for a in q.broker.endpoints.addresses} == \
        {("127.0.0.1", grpc_port)}
    assert set(route.message_queues[0].accept_message_types) == {
        v2.MessageType.NORMAL, v2.MessageType.FIFO, v2.MessageType.DELAY, v2.MessageType.TRANSACTION}
    assignment = stub.QueryAssignment(rpc.QueryAssignmentRequest(topic=topic, group=v2.Resource(name="g1")),
                                      timeout=TIMEOUT)
    assert assignment.status.code == v2.Code.OK
    assert [a.message_queue.id for a in assignment.assignments] == [-1]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def _open_and_vanish(grpc_port: int, receives: int, telemetries: int) -> None:
    """Streams opened on one connection, which then closes under them (a client that dies)."""
    request = rpc.ReceiveMessageRequest(
        group=v2.Resource(name="VanishGroup"), message_queue=v2.MessageQueue(topic=v2.Resource(name="BadInput")),
        batch_size=4, invisible_duration=duration_pb2.Duration(seconds=30),
        long_polling_timeout=duration_pb2.Duration(seconds=20))
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    stub = MessagingServiceStub(channel)
    calls = [stub.ReceiveMessage(request, timeout=60) for _ in range(receives)]
    calls += [stub.Telemetry(iter(()), metadata=[("x-mq-client-id", f"silent-{i}")]) for i in range(telemetries)]
    grpc.channel_ready_future(channel).result(timeout=TIMEOUT)
    time.sleep(0.5)  # the broker holds them all (long polling)
    channel.close()


def test_a_thousand_vanishing_receive_streams_leave_memory_flat(cluster: Cluster, grpc_port: int,
                                                                channel: grpc.Channel) -> None:
    pid = cluster.brokers["broker-a"].proc.pid
    _open_and_vanish(grpc_port, 100, 20)  # warm-up: grpcio's and the loop's pools
    before = _rss_kib(pid)
    for _ in range(10):
        _open_and_vanish(grpc_port, 100, 20)
    after = _rss_kib(pid)
    assert after - before < 32 * 1024, (before, after)
    # Another client is unaffected: a message sent now is received at once.
    sent = _send(channel, _message(b"after the storm"))
    assert sent.status.code == v2.Code.OK
    stub = MessagingServiceStub(channel)
    started = time.monotonic()
    got: list[bytes] = []
    while not got and time.monotonic() - started < 30:
        answers = list(stub.ReceiveMessage(rpc.ReceiveMessageRequest(
            group=v2.Resource(name="VanishGroup"), message_queue=v2.MessageQueue(topic=v2.Resource(name="BadInput")),
            batch_size=32, invisible_duration=duration_pb2.Duration(seconds=30),
            long_polling_timeout=duration_pb2.Duration(seconds=5)), timeout=TIMEOUT))
        got = [a.message.body for a in answers if a.HasField("message")]
    assert b"after the storm" in got
