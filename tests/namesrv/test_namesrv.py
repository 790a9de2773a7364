"""A real name server on 127.0.0.1, spoken to over sockets (and once as a `lakemq namesrv`
subprocess)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.namesrv import NamesrvConfig, NamesrvController
from lakemq.remoting import RemotingClient, RemotingCommand, SyncRemotingClient
from lakemq.remoting.bodies import (
    ClusterInfo,
    DataVersion,
    KVTable,
    QueueData,
    RegisterBrokerBody,
    TopicList,
    TopicRouteData,
    encode_json,
)
from lakemq.remoting.headers import (
    GetKVConfigRequestHeader,
    GetRouteInfoRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    RegisterBrokerRequestHeader,
    UnregisterBrokerRequestHeader,
    encode_header,
)

pytestmark = pytest.mark.timeout(60)


def _config(tmp_path: Path, **kw: object) -> NamesrvConfig:
    return NamesrvConfig(listen_port=0, kv_config_path=str(tmp_path / "kvConfig.json"), **kw)  # type: ignore[arg-type]


@asynccontextmanager
async def namesrv(config: NamesrvConfig) -> AsyncIterator[NamesrvController]:
    controller = NamesrvController(config)
    await controller.start()
    try:
        yield controller
    finally:
        await controller.shutdown()


def register_request(name: str, addr: str, topics: dict[str, int], broker_id: int = 0,
                     version: int = 1) -> RemotingCommand:
    header = RegisterBrokerRequestHeader(broker_name=name, broker_addr=addr, cluster_name="DefaultCluster",
                                         ha_server_addr="", broker_id=broker_id)
    body = RegisterBrokerBody(
        {t: {"topicName": t, "readQueueNums": n, "writeQueueNums": n, "perm": 6, "topicSysFlag": 0}
         for t, n in topics.items()},
        DataVersion(timestamp=version, counter=version))
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, encode_header(header), body.encode())


def route_request(topic: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                   encode_header(GetRouteInfoRequestHeader(topic)))


async def test_two_brokers_routes_cluster_and_topics(tmp_path: Path) -> None:
    async with namesrv(_config(tmp_path)) as ns:
        brokers = [RemotingClient(), RemotingClient()]
        try:
            for cli, (name, addr, topics) in zip(brokers, [
                    ("broker-a", "127.0.0.1:10911", {"T": 4}),
                    ("broker-b", "127.0.0.1:10912", {"T": 8, "U": 2})]):
                response = await cli.invoke(ns.address, register_request(name, addr, topics), 2.0)
                assert response.code == ResponseCode.SUCCESS
                assert KVTable.decode(response.body) == KVTable({})

            client = brokers[0]
            response = await client.invoke(ns.address, route_request("T"), 2.0)
            assert response.code == ResponseCode.SUCCESS
            route = TopicRouteData.decode(response.body)
            assert route.queue_datas == (QueueData("broker-a", 4, 4, 6), QueueData("broker-b", 8, 8, 6))
            assert {b.broker_name: b.broker_addrs for b in route.broker_datas} == {
                "broker-a": {0: "127.0.0.1:10911"}, "broker-b": {0: "127.0.0.1:10912"}}
            assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in response.body

            u = TopicRouteData.decode((await client.invoke(ns.address, route_request("U"), 2.0)).body)
            assert [b.broker_name for b in u.broker_datas] == ["broker-b"]

            missing = await client.invoke(ns.address, route_request("NOPE"), 2.0)
            assert missing.code == ResponseCode.TOPIC_NOT_EXIST
            assert "NOPE" in (missing.remark or "")

            info = ClusterInfo.decode((await client.invoke(
                ns.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 2.0)).body)
            assert info.cluster_addr_table == {"DefaultCluster": frozenset({"broker-a", "broker-b"})}
            topics = TopicList.decode((await client.invoke(
                ns.address, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), 2.0)).body)
            assert topics.topic_list == ("T", "U")

            version = QueryDataVersionRequestHeader("broker-a", "127.0.0.1:10911", "DefaultCluster", 0)
            for stamp, changed in ((1, "false"), (2, "true")):
                answer = await client.invoke(ns.address, RemotingCommand.request(
                    RequestCode.QUERY_DATA_VERSION, encode_header(version),
                    encode_json(DataVersion(stamp, stamp).to_json())), 2.0)
                assert answer.ext_fields["changed"] == changed
        finally:
            for cli in brokers:
                await cli.shutdown()


async def test_unregister_and_connection_close_drop_routes(tmp_path: Path) -> None:
    async with namesrv(_config(tmp_path)) as ns:
        broker_a, broker_b, client = RemotingClient(), RemotingClient(), RemotingClient()
        try:
            await broker_a.invoke(ns.address, register_request("broker-a", "127.0.0.1:10911", {"A": 4}), 2.0)
            await broker_b.invoke(ns.address, register_request("broker-b", "127.0.0.1:10912", {"B": 4}), 2.0)
            unregister = UnregisterBrokerRequestHeader("broker-a", "127.0.0.1:10911", "DefaultCluster", 0)
            response = await broker_a.invoke(ns.address, RemotingCommand.request(
                RequestCode.UNREGISTER_BROKER, encode_header(unregister)), 2.0)
            assert response.code == ResponseCode.SUCCESS
            assert (await client.invoke(ns.address, route_request("A"), 2.0)).code == ResponseCode.TOPIC_NOT_EXIST
            assert (await client.invoke(ns.address, route_request("B"), 2.0)).code == ResponseCode.SUCCESS

            await broker_b.shutdown()  # the broker's connection closes: its routes go at once
            for _ in range(100):
                if (await client.invoke(ns.address, route_request("B"), 2.0)).code == ResponseCode.TOPIC_NOT_EXIST:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("route of a disconnected broker survived")
        finally:
            for cli in (broker_a, broker_b, client):
                await cli.shutdown()


async def test_silent_broker_expires(tmp_path: Path) -> None:
    config = _config(tmp_path, broker_channel_expired_millis=300, scan_not_active_broker_interval=50)
    async with namesrv(config) as ns:
        broker, client = RemotingClient(), RemotingClient()
        try:
            await broker.invoke(ns.address, register_request("broker-a", "127.0.0.1:10911", {"T": 4}), 2.0)
            for _ in range(3):  # keeps registering: stays alive past the timeout
                await asyncio.sleep(0.15)
                await broker.invoke(ns.address, register_request("broker-a", "127.0.0.1:10911", {"T": 4}), 2.0)
            assert (await client.invoke(ns.address, route_request("T"), 2.0)).code == ResponseCode.SUCCESS
            started = time.monotonic()
            while (await client.invoke(ns.address, route_request("T"), 2.0)).code == ResponseCode.SUCCESS:
                assert time.monotonic() - started < 2.0, "silent broker never expired"
                await asyncio.sleep(0.05)
            assert time.monotonic() - started >= 0.1
            assert not ns.routes.broker_live_table
        finally:
            await broker.shutdown()
            await client.shutdown()


async def test_kv_config_persisted_across_restart(tmp_path: Path) -> None:
    config = _config(tmp_path)
    put = PutKVConfigRequestHeader("ORDER_TOPIC_CONFIG", "T", "broker-a:4")
    get = RemotingCommand.request(RequestCode.GET_KV_CONFIG,
                                  encode_header(GetKVConfigRequestHeader("ORDER_TOPIC_CONFIG", "T")))
    client = RemotingClient()
    try:
        async with namesrv(config) as ns:
            response = await client.invoke(ns.address, RemotingCommand.request(
                RequestCode.PUT_KV_CONFIG, encode_header(put)), 2.0)
            assert response.code == ResponseCode.SUCCESS
        saved = json.loads((tmp_path / "kvConfig.json").read_text())
        assert saved == {"configTable": {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}}}
        async with namesrv(config) as ns:
            answer = await client.invoke(ns.address, get, 2.0)
            assert answer.code == ResponseCode.SUCCESS and answer.ext_fields == {"value": "broker-a:4"}
            delete = RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, get.ext_fields)
            assert (await client.invoke(ns.address, delete, 2.0)).code == ResponseCode.SUCCESS
            missing = await client.invoke(ns.address, RemotingCommand.request(
                RequestCode.GET_KV_CONFIG, get.ext_fields), 2.0)
            assert missing.code == ResponseCode.QUERY_NOT_FOUND
        assert json.loads((tmp_path / "kvConfig.json").read_text()) == {"configTable": {}}
    finally:
        await client.shutdown()


async def test_order_topic_conf_in_route(tmp_path: Path) -> None:
    async with namesrv(_config(tmp_path, order_message_enable=True)) as ns:
        ns.kv.put("ORDER_TOPIC_CONFIG", "T", "broker-a:4")
        client = RemotingClient()
        try:
            await client.invoke(ns.address, register_request("broker-a", "127.0.0.1:10911", {"T": 4}), 2.0)
            route = TopicRouteData.decode((await client.invoke(ns.address, route_request("T"), 2.0)).body)
            assert route.order_topic_conf == "broker-a:4"
        finally:
            await client.shutdown()


async def test_bad_register_requests_are_answered(tmp_path: Path) -> None:
    async with namesrv(_config(tmp_path)) as ns:
        client = RemotingClient()
        try:
            request = register_request("broker-a", "127.0.0.1:10911", {"T": 4})
            del request.ext_fields["brokerName"]
            response = await client.invoke(ns.address, request, 2.0)
            assert response.code == ResponseCode.SYSTEM_ERROR and "brokerName" in (response.remark or "")
            request = register_request("broker-a", "127.0.0.1:10911", {"T": 4})
            request.ext_fields["bodyCrc32"] = "12345"
            response = await client.invoke(ns.address, request, 2.0)
            assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
            assert not ns.routes.broker_live_table
        finally:
            await client.shutdown()


def test_cli_namesrv_subprocess(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"listenHost=127.0.0.1\nkvConfigPath={tmp_path / 'kv.json'}\n")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "lakemq"), "namesrv", "-c", str(conf), "--port", "0",
         "--log-dir", str(tmp_path / "logs")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "boot success" in line, line + (proc.stderr.read() if proc.poll() is not None else "")  # type: ignore[union-attr]
        addr = line.split("listening on ")[1].split(",")[0]
        with SyncRemotingClient(namesrv_addrs=addr) as client:
            assert client.invoke_namesrv(register_request("b", "127.0.0.1:10911", {"T": 2}), 3.0).code == 0
            route = TopicRouteData.decode(client.invoke_namesrv(route_request("T"), 3.0).body)
            assert route.queue_datas == (QueueData("b", 2, 2, 6),)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert (tmp_path / "logs" / "namesrv.log").read_text().count("name server stopped") == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_launched_cluster_keeps_its_kv_config_in_its_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's NameServer (every test cluster's) persists KV config under the cluster's
    root, not in ~/namesrv/kvConfig.json, which every cluster of the user would share."""
    from lakemq.launcher import start_cluster

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    put = PutKVConfigRequestHeader("ORDER_TOPIC_CONFIG", "T", "broker-a:4")
    with start_cluster(tmp_path / "cluster", brokers=()) as cluster, SyncRemotingClient() as client:
        response = client.invoke(cluster.namesrv_addr, RemotingCommand.request(
            RequestCode.PUT_KV_CONFIG, encode_header(put)), 3.0)
        assert response.code == ResponseCode.SUCCESS
    saved = json.loads((tmp_path / "cluster" / "namesrv" / "kvConfig.json").read_text())
    assert saved == {"configTable": {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}}}
    assert not (home / "namesrv").exists()
