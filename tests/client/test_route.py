from collections import Counter

import pytest

from lakemq.client.route import TopicPublishInfo, publish_queues, subscribe_queues
from lakemq.common.constants import PermName
from lakemq.common.message_queue import MessageQueue
from lakemq.errors import FrameError, RemotingCommandError
from lakemq.remoting import fastjson
from lakemq.remoting.bodies import TopicRouteData

# What a Java name server sends: fastjson writes the Long broker-id keys bare.
NAMESRV_JSON = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"b-a",'
    b'"cluster":"DefaultCluster"},{"brokerAddrs":{1:"127.0.0.1:10931"},"brokerName":"b-c","cluster":"DefaultCluster"},'
    b'{"brokerAddrs":{0:"127.0.0.1:10941"},"brokerName":"b-b","cluster":"DefaultCluster"}],'
    b'"filterServerTable":{},"queueDatas":[{"brokerName":"b-b","perm":6,"readQueueNums":2,"topicSysFlag":0,'
    b'"writeQueueNums":2},{"brokerName":"b-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":3},'
    b'{"brokerName":"b-c","perm":6,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1},'
    b'{"brokerName":"b-ro","perm":4,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}]}'
)


def test_parse_fastjson_integer_keys() -> None:
    route = TopicRouteData.decode(NAMESRV_JSON)
    a = route.broker("b-a")
    assert a is not None and a.broker_addrs == {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}
    assert a.master_addr == "127.0.0.1:10911"
    c = route.broker("b-c")
    assert c is not None and c.master_addr is None and c.select_addr() == "127.0.0.1:10931"
    # strict JSON (string keys) parses to the same thing
    assert TopicRouteData.decode(route.encode()) == route


def test_fastjson_object_keys_and_strings_untouched() -> None:
    text = '{"t":{{"topic":"T","queueId":1}:{"v":"{0:1}"}}, "s":"a:b,{2:3}"}'
    obj = fastjson.loads(text)
    ((key, value),) = obj["t"].items()
    assert dict(key) == {"topic": "T", "queueId": 1} and value == {"v": "{0:1}"}
    assert obj["s"] == "a:b,{2:3}"
    with pytest.raises(FrameError):
        fastjson.loads(b'{"a":1')
    with pytest.raises(RemotingCommandError):
        TopicRouteData.decode(b'{"queueDatas":[{"brokerName":"x"}]}')


def test_publish_and_subscribe_queues() -> None:
    route = TopicRouteData.decode(NAMESRV_JSON)
    pub = publish_queues("T", route)
    # sorted by broker name; b-c has no master, b-ro is read-only
    assert pub == [MessageQueue("T", "b-a", i) for i in range(3)] + [MessageQueue("T", "b-b", i) for i in range(2)]
    sub = subscribe_queues("T", route)
    assert len(sub) == 4 + 2 + 1 + 1 and sub == sorted(sub)
    assert PermName.is_readable(4) and not PermName.is_writeable(4)
    ordered = TopicRouteData(route.queue_datas, route.broker_datas, "b-x:2;b-y:1")
    assert publish_queues("T", ordered) == [MessageQueue("T", "b-x", 0), MessageQueue("T", "b-x", 1), MessageQueue("T", "b-y", 0)]


def test_round_robin_and_avoiding_the_failed_broker() -> None:
    info = TopicPublishInfo("T", TopicRouteData.decode(NAMESRV_JSON), start=0)
    picks = [info.select_one() for _ in range(10)]
    assert Counter(picks) == Counter({mq: 2 for mq in info.queues})
    for _ in range(20):
        assert info.select_one(last_broker_name="b-a").broker_name == "b-b"
        assert info.select_one(last_broker_name="b-b").broker_name == "b-a"
    # latency fault filter: b-b unavailable -> only b-a, unless b-a also failed last
    for _ in range(10):
        assert info.select_one(available=lambda b: b != "b-b").broker_name == "b-a"
    assert info.select_one("b-a", available=lambda b: b != "b-b").broker_name == "b-b"
    # every broker excluded: plain round robin still answers
    assert info.select_one(available=lambda b: False) in info.queues


def test_single_broker_retry_falls_back_to_it() -> None:
    route = TopicRouteData.decode(
        b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:1"},"brokerName":"only","cluster":"c"}],'
        b'"queueDatas":[{"brokerName":"only","perm":6,"readQueueNums":2,"writeQueueNums":2}]}'
    )
    info = TopicPublishInfo("T", route)
    assert info.select_one(last_broker_name="only").broker_name == "only"
    empty = TopicPublishInfo("T", TopicRouteData((), ()))
    assert not empty.ok()
    with pytest.raises(LookupError):
        empty.select_one()
