"""TLS on the gRPC front door: plaintext and TLS on one port (grpcTlsMode=permissive, the
default, with a self-signed certificate made at start), and TLS only with a configured
certificate (enforcing)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from lakemq.broker.grpc.tls import tls_material
from lakemq.client.sync import SyncProducer
from lakemq.grpc._pb import definition_pb2 as v2
from lakemq.grpc._pb import service_pb2 as rpc
from lakemq.grpc._pb.service_pb2_grpc import MessagingServiceStub
from lakemq.launcher import reserved_port
from tests.cluster import Cluster, start_cluster

TIMEOUT = 10


def _route(channel: grpc.Channel) -> rpc.QueryRouteResponse:
    response: rpc.QueryRouteResponse = MessagingServiceStub(channel).QueryRoute(
        rpc.QueryRouteRequest(topic=v2.Resource(name="TlsTopic")), timeout=TIMEOUT)
    return response


@contextmanager
def _cluster(root: Path, conf: dict[str, str]) -> Iterator[Cluster]:
    with start_cluster(root, broker_conf=conf) as running:
        with SyncProducer("grpc-tls-admin", namesrv_addr=running.namesrv_addr) as admin:
            admin.create_topic("TlsTopic", 2)
        yield running


def test_permissive_serves_plaintext_and_tls_on_one_port(tmp_path: Path) -> None:
    port = reserved_port()
    with _cluster(tmp_path, {"grpcListenPort": str(port)}):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as plain:
            assert _route(plain).status.code == v2.Code.OK
        cert = ssl.get_server_certificate(("127.0.0.1", port)).encode()  # the self-signed one made at start
        with grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(cert)) as secure:
            route = _route(secure)
        assert route.status.code == v2.Code.OK
        assert {q.broker.endpoints.addresses[0].port for q in route.message_queues} == {port}


def test_enforcing_with_a_configured_certificate_refuses_plaintext(tmp_path: Path) -> None:
    material = tls_material("", "", "127.0.0.1")
    (tmp_path / "cert.pem").write_bytes(material.cert_pem)
    (tmp_path / "key.pem").write_bytes(material.key_pem)
    port = reserved_port()
    conf = {"grpcListenPort": str(port), "grpcTlsMode": "enforcing",
            "grpcTlsCertPath": str(tmp_path / "cert.pem"), "grpcTlsKeyPath": str(tmp_path / "key.pem")}
    with _cluster(tmp_path / "cluster", conf):
        credentials = grpc.ssl_channel_credentials(material.cert_pem)
        with grpc.secure_channel(f"127.0.0.1:{port}", credentials) as secure:
            assert _route(secure).status.code == v2.Code.OK
        with grpc.insecure_channel(f"127.0.0.1:{port}") as plain, pytest.raises(grpc.RpcError) as caught:
            _route(plain)
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
