"""Telemetry streams and the broker's life: a stream that never sends Settings, one without a
client id, a clean broker stop while streams are open; and sends under SYNC_FLUSH."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import grpc

from lakemq.client.sync import SyncProducer
from lakemq.grpc._pb import definition_pb2 as v2
from lakemq.grpc._pb import service_pb2 as rpc
from lakemq.grpc._pb.service_pb2_grpc import MessagingServiceStub
from lakemq.launcher import reserved_port
from tests.cluster import start_cluster

TIMEOUT = 10


def _requests(commands: queue.Queue[rpc.TelemetryCommand | None]) -> Iterator[rpc.TelemetryCommand]:
    while (command := commands.get()) is not None:
        yield command


def test_telemetry_streams_and_a_clean_stop(tmp_path: Path) -> None:
    port = reserved_port()
    with start_cluster(tmp_path, broker_conf={"grpcListenPort": str(port)}) as cluster, \
            grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = MessagingServiceStub(channel)
        # A stream that never sends Settings stays open and costs nothing; others are served.
        silent: queue.Queue[rpc.TelemetryCommand | None] = queue.Queue()
        silent_call = stub.Telemetry(_requests(silent), metadata=[("x-mq-client-id", "silent-1")])
        # Settings without a client id are answered CLIENT_ID_REQUIRED.
        anonymous: queue.Queue[rpc.TelemetryCommand | None] = queue.Queue()
        anonymous_call = stub.Telemetry(_requests(anonymous), timeout=TIMEOUT)
        anonymous.put(rpc.TelemetryCommand(settings=v2.Settings(client_type=v2.ClientType.PRODUCER)))
        assert next(anonymous_call).status.code == v2.Code.CLIENT_ID_REQUIRED
        anonymous.put(None)
        # A producer's settings are answered with the broker's.
        producer: queue.Queue[rpc.TelemetryCommand | None] = queue.Queue()
        producer_call = stub.Telemetry(_requests(producer), metadata=[("x-mq-client-id", "producer-1")])
        settings = v2.Settings(client_type=v2.ClientType.PRODUCER,
                               publishing=v2.Publishing(topics=[v2.Resource(name="TBW102")]))
        producer.put(rpc.TelemetryCommand(settings=settings))
        answer = next(producer_call)
        assert answer.status.code == v2.Code.OK and answer.settings.publishing.max_body_size == 4 * 1024 * 1024
        # A thread-stack result answers a command lakemq never sends: said so on the stream.
        producer.put(rpc.TelemetryCommand(thread_stack_trace=rpc.ThreadStackTrace(nonce="n")))
        assert next(producer_call).status.code == v2.Code.NOT_IMPLEMENTED
        # The broker stops cleanly with both streams still open, and ends them.
        assert cluster.stop_broker() == 0
        for call in (silent_call, producer_call):
            try:
                for _ in call:
                    pass
            except grpc.RpcError as exc:
                assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        silent.put(None)
        producer.put(None)


def test_sync_flush_sends_are_answered_once_flushed(tmp_path: Path) -> None:
    """Under SYNC_FLUSH a 5.x send waits for the store's acknowledgement as a remoting send does
    (SendMessageProcessor.send_message), and is answered OK with its queue offset."""
    port = reserved_port()
    conf = {"grpcListenPort": str(port), "flushDiskType": "SYNC_FLUSH"}
    with start_cluster(tmp_path, broker_conf=conf) as cluster, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        with SyncProducer("grpc-sync-admin", namesrv_addr=cluster.namesrv_addr) as admin:
            admin.create_topic("SyncFlushTopic", 1)
        stub = MessagingServiceStub(channel)
        offsets = []
        for i in range(5):
            sp = v2.SystemProperties(message_id=f"01SYNC{i:04d}", message_type=v2.MessageType.NORMAL)
            message = v2.Message(topic=v2.Resource(name="SyncFlushTopic"), body=b"flushed", system_properties=sp)
            response = stub.SendMessage(rpc.SendMessageRequest(messages=[message]), timeout=TIMEOUT)
            assert response.status.code == v2.Code.OK, response
            offsets.append(response.entries[0].offset)
        assert offsets == [0, 1, 2, 3, 4]
