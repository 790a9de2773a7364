"""RouteInfoManager's tables, without sockets."""

from __future__ import annotations

from lakemq.namesrv.route_info import RouteInfoManager
from lakemq.remoting.bodies import BrokerData, DataVersion, QueueData

TOPIC = {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}


def _register(routes: RouteInfoManager, name: str, addr: str, broker_id: int = 0, now: int = 0,
              topics: dict | None = None, version: int = 1):  # type: ignore[no-untyped-def]
    return routes.register_broker(cluster_name="C", broker_addr=addr, broker_name=name,
                                  broker_id=broker_id, ha_server_addr=addr.replace("109", "209"),
                                  now_millis=now, data_version=DataVersion(version, version),
                                  topic_configs={"T": TOPIC} if topics is None else topics)


def test_slave_learns_master_and_adds_no_queues() -> None:
    routes = RouteInfoManager()
    _register(routes, "b1", "127.0.0.1:10911")
    result = _register(routes, "b1", "127.0.0.1:10921", broker_id=1,
                       topics={"SLAVE_ONLY": TOPIC})
    assert result.master_addr == "127.0.0.1:10911"
    assert result.ha_server_addr == "127.0.0.1:20911"
    assert "SLAVE_ONLY" not in routes.topic_queue_table
    route = routes.pickup_topic_route_data("T")
    assert route is not None
    assert route.broker_datas == (BrokerData("C", "b1", {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}),)


def test_promoted_slave_keeps_one_id_per_address() -> None:
    routes = RouteInfoManager()
    _register(routes, "b1", "127.0.0.1:10921", broker_id=1)
    _register(routes, "b1", "127.0.0.1:10921", broker_id=0)
    assert routes.broker_addr_table["b1"].broker_addrs == {0: "127.0.0.1:10921"}


def test_queue_data_updates_only_on_new_data_version() -> None:
    routes = RouteInfoManager()
    _register(routes, "b1", "127.0.0.1:10911", version=1)
    changed = dict(TOPIC, writeQueueNums=8)
    _register(routes, "b1", "127.0.0.1:10911", version=1, topics={"T": changed})
    assert routes.topic_queue_table["T"]["b1"].write_queue_nums == 4
    _register(routes, "b1", "127.0.0.1:10911", version=2, topics={"T": changed})
    assert routes.topic_queue_table["T"]["b1"] == QueueData("b1", 4, 8, 6)


def test_expiry_removes_broker_cluster_and_topics() -> None:
    routes = RouteInfoManager(default_timeout_millis=1000)
    _register(routes, "b1", "127.0.0.1:10911", now=0)
    _register(routes, "b2", "127.0.0.1:10912", now=900)
    assert routes.scan_not_active_brokers(1000) == []
    assert routes.scan_not_active_brokers(1500) == [("C", "127.0.0.1:10911")]
    route = routes.pickup_topic_route_data("T")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["b2"]
    assert routes.scan_not_active_brokers(2000) == [("C", "127.0.0.1:10912")]
    assert routes.pickup_topic_route_data("T") is None
    assert routes.cluster_addr_table == {} and routes.broker_addr_table == {}


def test_unregister_slave_keeps_master_routes() -> None:
    routes = RouteInfoManager()
    _register(routes, "b1", "127.0.0.1:10911")
    _register(routes, "b1", "127.0.0.1:10921", broker_id=1)
    routes.unregister_broker(cluster_name="C", broker_addr="127.0.0.1:10921", broker_name="b1", broker_id=1)
    assert routes.broker_addr_table["b1"].broker_addrs == {0: "127.0.0.1:10911"}
    assert routes.pickup_topic_route_data("T") is not None
    routes.unregister_broker(cluster_name="C", broker_addr="127.0.0.1:10911", broker_name="b1", broker_id=0)
    assert routes.pickup_topic_route_data("T") is None and routes.all_topics() == ()


def test_a_masterless_slave_routes_the_topics_its_master_never_registered() -> None:
    routes = RouteInfoManager(default_timeout_millis=1000)
    _register(routes, "b1", "127.0.0.1:10911", now=0)
    late = {"T": dict(TOPIC, readQueueNums=2, writeQueueNums=2), "LATE": dict(TOPIC, topicName="LATE")}
    _register(routes, "b1", "127.0.0.1:10921", broker_id=1, topics=late, now=900)
    assert "LATE" not in routes.topic_queue_table  # the master is there: its topics only
    assert routes.scan_not_active_brokers(1500) == [("C", "127.0.0.1:10911")]  # the master is gone
    route = routes.pickup_topic_route_data("LATE")
    assert route is not None
    assert route.broker_datas == (BrokerData("C", "b1", {1: "127.0.0.1:10921"}),)
    assert routes.topic_queue_table["T"]["b1"].read_queue_nums == 4  # what the master registered stays
    # A slave registering while masterless routes a topic it learned since.
    _register(routes, "b1", "127.0.0.1:10921", broker_id=1, version=2, now=1600,
              topics={**late, "NEWER": dict(TOPIC, topicName="NEWER")})
    assert routes.pickup_topic_route_data("NEWER") is not None
    # The master back: its registration is what counts again.
    _register(routes, "b1", "127.0.0.1:10911", version=3, now=1700, topics={"T": dict(TOPIC, readQueueNums=8)})
    assert routes.topic_queue_table["T"]["b1"].read_queue_nums == 8
