"""Headers and bodies carry Java's field names and types."""

from __future__ import annotations

import json

import pytest

from lakemq.common.codes import RequestCode
from lakemq.common.message_queue import MessageQueue
from lakemq.common.subscription import SubscriptionData
from lakemq.errors import RemotingCommandError
from lakemq.remoting import RemotingCommand
from lakemq.remoting.bodies import (
    BrokerData,
    ConsumerData,
    DataVersion,
    HeartbeatData,
    LockBatchRequestBody,
    QueueData,
    RegisterBrokerBody,
    TopicRouteData,
)
from lakemq.remoting.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    UnregisterClientRequestHeader,
    decode_header,
    decode_send_header,
    encode_header,
    encode_send_header_v2,
)

SEND = SendMessageRequestHeader(producer_group="pg", topic="T", default_topic="TBW102",
                                default_topic_queue_nums=4, queue_id=1, sys_flag=0,
                                born_timestamp=1700000000000, flag=0, properties="KEYS\x01k\x02",
                                reconsume_times=0, unit_mode=False, batch=False)


def test_send_header_long_names() -> None:
    ext = encode_header(SEND)
    assert ext == {"producerGroup": "pg", "topic": "T", "defaultTopic": "TBW102",
                   "defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0",
                   "bornTimestamp": "1700000000000", "flag": "0", "properties": "KEYS\x01k\x02",
                   "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
    assert decode_send_header(RemotingCommand.request(RequestCode.SEND_MESSAGE, ext)) == SEND


def test_send_header_v2_letters() -> None:
    ext = encode_send_header_v2(SEND)
    assert ext == {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0",
                   "g": "1700000000000", "h": "0", "i": "KEYS\x01k\x02", "j": "0", "k": "false",
                   "m": "false"}
    for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        assert decode_send_header(RemotingCommand.request(code, ext)) == SEND


def test_missing_and_malformed_fields() -> None:
    with pytest.raises(RemotingCommandError, match="<topic> is null"):
        decode_header(PullMessageRequestHeader, {"consumerGroup": "g"})
    ext = {"consumerGroup": "g", "topic": "T", "queueId": "x", "queueOffset": "0", "maxMsgNums": "32",
           "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "15000", "subVersion": "0"}
    with pytest.raises(RemotingCommandError, match="queueId"):
        decode_header(PullMessageRequestHeader, ext)
    ext["queueId"] = "3"
    assert decode_header(PullMessageRequestHeader, ext).queue_id == 3


def test_client_id_keeps_java_spelling() -> None:
    assert encode_header(UnregisterClientRequestHeader("cid")) == {"clientID": "cid"}


def test_route_data_is_standard_json_with_quoted_ids() -> None:
    route = TopicRouteData((QueueData("b1", 4, 4, 6),),
                           (BrokerData("DefaultCluster", "b1", {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}),))
    wire = route.encode()
    assert b'"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"}' in wire
    assert json.loads(wire)["queueDatas"][0] == {"brokerName": "b1", "perm": 6, "readQueueNums": 4,
                                                "topicSysFlag": 0, "writeQueueNums": 4}
    assert b"orderTopicConf" not in wire
    assert TopicRouteData.decode(wire) == route


def test_register_broker_body_roundtrip() -> None:
    body = RegisterBrokerBody({"T": {"topicName": "T", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}},
                              DataVersion(timestamp=1, counter=2))
    assert RegisterBrokerBody.decode(body.encode()) == body
    with pytest.raises(RemotingCommandError):
        RegisterBrokerBody.decode(b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":1}}}')


def test_data_version_moves_on_and_refuses_a_non_object() -> None:
    first = DataVersion.now()
    second = first.next()
    assert second.counter == first.counter + 1 and second.timestamp >= first.timestamp
    assert second != first and DataVersion.from_json(second.to_json()) == second
    # An Apache RocketMQ 4.9 broker writes no stateVersion.
    assert DataVersion.from_json({"timestamp": 5, "counter": 7}) == DataVersion(5, 7, 0)
    with pytest.raises(RemotingCommandError):
        DataVersion.from_json([1, 2])


def test_heartbeat_from_java_shape() -> None:
    raw = (b'{"clientID":"10.0.0.1@123","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",'
           b'"consumeType":"CONSUME_PASSIVELY","groupName":"cg","messageModel":"CLUSTERING",'
           b'"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG",'
           b'"subString":"TagA","subVersion":1700000000000,"tagsSet":["TagA"],"topic":"T"}],"unitMode":false}],'
           b'"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}')
    hb = HeartbeatData.decode(raw)
    assert hb.client_id == "10.0.0.1@123" and hb.producer_groups == ("CLIENT_INNER_PRODUCER",)
    (consumer,) = hb.consumer_data_set
    assert consumer == ConsumerData("cg", consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                                    subscription_data_set=(SubscriptionData(
                                        "T", "TagA", frozenset({"TagA"}), frozenset({2598919}), 1700000000000),))
    assert json.loads(hb.encode()) == json.loads(raw)


def test_lock_batch_body() -> None:
    body = LockBatchRequestBody("cg", "cid", (MessageQueue("T", "b1", 0), MessageQueue("T", "b1", 1)))
    assert LockBatchRequestBody.decode(body.encode()) == body
    with pytest.raises(RemotingCommandError, match="not JSON"):
        LockBatchRequestBody.decode(b"{nope")
