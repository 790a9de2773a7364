"""Writes the seed corpus (fuzz/corpus/TARGET/NAME) from lakemq's own encoders, so every seed
is a well-formed input the fuzzer mutates from: ``python -m fuzz.seeds``. The files are
committed; run this again after a wire format changes."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path
from typing import Any

from fuzz.targets import TARGETS
from fuzz.targets.bodies import CLASSES as BODY_CLASSES
from fuzz.targets.headers import CLASSES as HEADER_CLASSES
from lakemq.common.acl_signature import sign_request
from lakemq.common.codes import RequestCode
from lakemq.common.message import Message, MessageSysFlag, properties_to_string
from lakemq.common.message_batch import encode_messages
from lakemq.common.record import BLANK_MAGIC_CODE, create_message_id, encode_record
from lakemq.common.subscription import SubscriptionData
from lakemq.remoting.bodies import ConsumerData, HeartbeatData
from lakemq.remoting.codec import RemotingCommand, SerializeType, encode_frame

CORPUS = Path(__file__).resolve().parent / "corpus"
PROPS = properties_to_string({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "0A0000011F9018B4AAC2", "WAIT": "true",
                              "a": "5", "s": "hello"})


def _record(body: bytes = b"hello", *, sys_flag: int = 0, props: str = PROPS, physical_offset: int = 4096) -> bytes:
    return bytes(encode_record(topic=b"TopicA", queue_id=1, body=body, flag=0, properties=props.encode(),
                               sys_flag=sys_flag, born_timestamp=1_700_000_000_000,
                               born_host=(bytes([10, 0, 0, 1]), 4242), store_host=(bytes([10, 0, 0, 2]), 10911),
                               queue_offset=7, physical_offset=physical_offset, store_timestamp=1_700_000_000_001))


def _frames() -> dict[str, bytes]:
    send = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "TopicA", "c": "TBW102", "d": "4",
                                                                 "e": "1", "f": "0", "g": "1700000000000", "h": "0",
                                                                 "i": PROPS, "j": "0", "k": "false"}, b"body")
    pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"consumerGroup": "g", "topic": "TopicA", "queueId": "0",
                                                              "queueOffset": "0", "maxMsgNums": "32"})
    reply = pull.reply(0, "ok", {"nextBeginOffset": "1"}, b"x")
    rocketmq = RemotingCommand(code=34, remark="r", ext_fields={"k": "v"}, body=b"b",
                               serialize_type=SerializeType.ROCKETMQ)
    frames = {"send_v2": send, "pull": pull, "reply": reply, "rocketmq": rocketmq}
    return {name: b"\x07" + encode_frame(command) for name, command in frames.items()} | {
        "two": b"\x10" + encode_frame(pull) + encode_frame(rocketmq),
        "odd_json": b"\x00" + _raw_json_frame(b'{"code":"10","extFields":{"n":1,"b":true,"x":null},"flag":0}'),
    }


def _raw_json_frame(header: bytes) -> bytes:
    return struct.pack(">II", 4 + len(header), len(header)) + header


def _acl() -> dict[str, bytes]:
    heartbeat = HeartbeatData("c1", ("pg",), (ConsumerData("GroupA", "PUSH", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
                                                           (SubscriptionData("TopicA", "*"),), False),))
    seeds = {}
    for name, code, fields, body in (
            ("send", RequestCode.SEND_MESSAGE_V2, {"b": "TopicA", "a": "pg"}, b"x"),
            ("pull", RequestCode.PULL_MESSAGE, {"topic": "TopicB", "consumerGroup": "GroupA"}, b""),
            ("heartbeat", RequestCode.HEART_BEAT, {}, heartbeat.encode()),
            ("admin", RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "TopicC"}, b"")):
        ext = dict(fields)
        sign_request(ext, body or None, "fuzzAccess", "fuzzSecret1")
        seeds[name] = encode_frame(RemotingCommand.request(code, ext, body))[4:]
    return seeds


def _bodies() -> dict[str, bytes]:
    samples = {
        "RegisterBrokerBody": b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,'
                              b'"timestamp":1},"topicConfigTable":{"T":{"topicName":"T","readQueueNums":4}}}}',
        "KVTable": b'{"table":{"k":"v"}}',
        "TopicRouteData": b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911","1":"127.0.0.1:10912"},'
                          b'"brokerName":"b","cluster":"c"}],"queueDatas":[{"brokerName":"b","perm":6,'
                          b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}],"orderTopicConf":null}',
        "ClusterInfo": b'{"brokerAddrTable":{"b":{"brokerAddrs":{0:"h:1"},"brokerName":"b","cluster":"c"}},'
                       b'"clusterAddrTable":{"c":["b"]}}',
        "TopicList": b'{"topicList":["A","B"]}',
        "HeartbeatData": b'{"clientID":"c","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
                         b'"consumeType":"CONSUME_PASSIVELY","groupName":"g","messageModel":"CLUSTERING",'
                         b'"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[1],"expressionType":"TAG",'
                         b'"subString":"a","subVersion":1,"tagsSet":["a"],"topic":"T"}],"unitMode":false}],'
                         b'"producerDataSet":[{"groupName":"p"}]}',
        "LockBatchRequestBody": b'{"clientId":"c","consumerGroup":"g","mqSet":[{"brokerName":"b","queueId":0,'
                                b'"topic":"T"}],"onlyThisBroker":false}',
        "LockBatchResponseBody": b'{"lockOKMQSet":[{"brokerName":"b","queueId":1,"topic":"T"}]}',
        "GetConsumerListByGroupResponseBody": b'{"consumerIdList":["a","b"]}',
    }
    seeds = {name: bytes([i]) + samples[cls.__name__] for i, cls in enumerate(BODY_CLASSES)
             for name in (cls.__name__,)}
    seeds["bare_object_key"] = b"\x00" + b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5}}'
    return seeds


def _headers() -> dict[str, bytes]:
    pairs = "topic\0TopicA\0consumerGroup\0g\0queueId\x002\0queueOffset\x0010\0maxMsgNums\x0032\0sysFlag\x000\0" \
            "commitOffset\x000\0suspendTimeoutMillis\x0015000\0subscription\0*\0subVersion\x001\0" \
            "producerGroup\0p\0defaultTopic\0TBW102\0defaultTopicQueueNums\x004\0bornTimestamp\x001\0" \
            "flag\x000\0properties\0a\x01b\x02\0reconsumeTimes\x000\0unitMode\0false\0batch\0false\0" \
            "a\0p\0b\0TopicA\0c\0TBW102\0d\x004\0e\x001\0f\x000\0g\x001\0h\x000\0i\0\0j\x000\0k\0false\0m\0true"
    return {f"h{i:02d}": bytes([i]) + pairs.encode() for i in range(len(HEADER_CLASSES) + 2)}


def _records() -> dict[str, bytes]:
    compressed = _record(zlib.compress(b"z" * 100), sys_flag=MessageSysFlag.COMPRESSED_FLAG)
    blank = struct.pack(">iI", 64, BLANK_MAGIC_CODE) + bytes(56)
    msg_id = create_message_id(bytes([10, 0, 0, 2]), 10911, 4096).encode()
    return {"one": b"\x00" + _record(), "tags": b"\x01" + _record() + _record(b"second"),
            "crc": b"\x02" + _record(), "compressed": b"\x06" + compressed, "blank": b"\x00" + _record() + blank,
            "msg_id": b"\x00" + msg_id, "no_props": b"\x00" + _record(props="")}


def _ha() -> dict[str, bytes]:
    record = _record()
    transfer = struct.pack(">qi", 4096, len(record)) + record
    blank = struct.pack(">iI", 8, BLANK_MAGIC_CODE)
    return {"transfer": b"\x05" + transfer, "heartbeat": b"\x03" + struct.pack(">qi", 0, 0),
            "reports": b"\x0b" + struct.pack(">qq", 0, 4096),
            "end_of_file": b"\x09" + struct.pack(">qi", 0, len(record) + 8) + record + blank}


def _scan() -> dict[str, bytes]:
    first = _record(physical_offset=0)
    second = _record(b"second", physical_offset=len(first))
    delayed = bytes(encode_record(topic=b"SCHEDULE_TOPIC_XXXX", queue_id=2, body=b"d", flag=0,
                                  properties=b"DELAY\x013\x02REAL_TOPIC\x01T\x02REAL_QID\x010\x02", sys_flag=0,
                                  born_timestamp=1, born_host=(bytes(4), 1), store_host=(bytes(4), 2),
                                  store_timestamp=1_700_000_000_000))
    blank = struct.pack(">iI", 8, BLANK_MAGIC_CODE)
    return {"two": b"\x03" + first + second, "delayed": b"\x04" + delayed, "end_of_file": b"\x02" + first + blank,
            "bad_crc": b"\x01" + first[:8] + b"\x00\x00\x00\x00" + first[12:]}


def _grpc() -> dict[str, bytes]:
    """One well-formed request of each method lakemq serves, as the 5.x clients send them."""
    from fuzz.targets.grpc import METHODS
    from lakemq.broker.grpc.convert import encode_transaction_id
    from lakemq.broker.pop.receipt import ReceiptHandle
    from lakemq.common.recall_handle import RecallHandle
    from lakemq.grpc._pb import definition_pb2 as v2
    from lakemq.grpc._pb import service_pb2 as rpc

    topic, group = v2.Resource(name="TopicA"), v2.Resource(name="GroupA")
    handle = ReceiptHandle(5, 1_700_000_000_000, 30_000, 0, False, "broker-a", 1, 7).encode()
    sent = v2.Message(topic=topic, body=b"hello", user_properties={"color": "red"}, system_properties=v2.SystemProperties(
        tag="TagA", keys=["k1", "k2"], message_id="0102FC000000017BA90B1D063D00000000",
        message_type=v2.MessageType.NORMAL, body_encoding=v2.Encoding.IDENTITY))
    fifo = v2.Message()
    fifo.CopyFrom(sent)
    fifo.system_properties.message_type = v2.MessageType.FIFO
    fifo.system_properties.message_group = "order-7"
    timed = v2.Message()
    timed.CopyFrom(sent)
    timed.system_properties.message_type = v2.MessageType.DELAY
    timed.system_properties.delivery_timestamp.FromMilliseconds(1_700_000_060_000)
    timed.system_properties.born_timestamp.FromMilliseconds(1_700_000_000_000)
    zipped = v2.Message()
    zipped.CopyFrom(sent)
    zipped.body = gzip.compress(b"hello", mtime=0)
    zipped.system_properties.body_encoding = v2.Encoding.GZIP
    tx = v2.Message()
    tx.CopyFrom(sent)
    tx.system_properties.message_type = v2.MessageType.TRANSACTION
    tx.system_properties.orphaned_transaction_recovery_duration.FromSeconds(10)
    receive = rpc.ReceiveMessageRequest(group=group, message_queue=v2.MessageQueue(topic=topic, id=-1), batch_size=32,
                                        filter_expression=v2.FilterExpression(type=v2.FilterType.SQL,
                                                                              expression="color = 'red' AND a > 3"))
    receive.invisible_duration.FromSeconds(30)
    receive.long_polling_timeout.FromSeconds(20)
    producer = rpc.TelemetryCommand(settings=v2.Settings(
        client_type=v2.ClientType.PRODUCER, publishing=v2.Publishing(topics=[topic]),
        user_agent=v2.UA(language=v2.Language.PYTHON, version="5.1.2")))
    consumer = rpc.TelemetryCommand(settings=v2.Settings(
        client_type=v2.ClientType.PUSH_CONSUMER, subscription=v2.Subscription(group=group, subscriptions=[
            v2.SubscriptionEntry(topic=topic, expression=v2.FilterExpression(type=v2.FilterType.TAG,
                                                                             expression="TagA || TagB"))])))
    requests: dict[str, tuple[str, Any]] = {
        "route": ("QueryRoute", rpc.QueryRouteRequest(topic=topic)),
        "heartbeat": ("Heartbeat", rpc.HeartbeatRequest(group=group, client_type=v2.ClientType.SIMPLE_CONSUMER)),
        "send": ("SendMessage", rpc.SendMessageRequest(messages=[sent, fifo])),
        "send_timed_gzip_tx": ("SendMessage", rpc.SendMessageRequest(messages=[timed, zipped, tx])),
        "assignment": ("QueryAssignment", rpc.QueryAssignmentRequest(topic=topic, group=group)),
        "receive": ("ReceiveMessage", receive),
        "ack": ("AckMessage", rpc.AckMessageRequest(group=group, topic=topic, entries=[
            rpc.AckMessageEntry(message_id="m1", receipt_handle=handle)])),
        "dlq": ("ForwardMessageToDeadLetterQueue", rpc.ForwardMessageToDeadLetterQueueRequest(
            group=group, topic=topic, receipt_handle=handle, delivery_attempt=17)),
        "end_transaction": ("EndTransaction", rpc.EndTransactionRequest(
            topic=topic, message_id="m1", transaction_id=encode_transaction_id(4096, 7),
            resolution=v2.TransactionResolution.COMMIT)),
        "telemetry_producer": ("Telemetry", producer),
        "telemetry_consumer": ("Telemetry", consumer),
        "terminate": ("NotifyClientTermination", rpc.NotifyClientTerminationRequest(group=group)),
        "change": ("ChangeInvisibleDuration", rpc.ChangeInvisibleDurationRequest(
            group=group, topic=topic, receipt_handle=handle, message_id="m1")),
        "recall": ("RecallMessage", rpc.RecallMessageRequest(
            topic=topic, recall_handle=RecallHandle.for_due("TopicA", "broker-a", 1_700_000_060_000, "m1").encode())),
    }
    index = {method.name: i for i, method in enumerate(METHODS)}
    return {name: bytes([index[method]]) + req.SerializeToString() for name, (method, req) in requests.items()}


def seeds() -> dict[str, dict[str, bytes]]:
    message = Message("TopicA", b"body", properties={"TAGS": "t", "KEYS": "k"})
    return {
        "frames": _frames(),
        "headers": _headers(),
        "bodies": _bodies(),
        "json": {"offsets": b'{"offsetTable":{"T@g":{0:5,1:7}}}', "route": _bodies()["TopicRouteData"][1:],
                 "object_keys": _bodies()["bare_object_key"][1:],
                 "scalars": b'[1, -2.5e3, "t\\u00e9", true, false, null, {}, []]'},
        "records": _records(),
        "batch": {"two": encode_messages([message, Message("TopicA", b"", properties={})]),
                  "one": encode_messages([message])},
        "sql92": {"compare": b"a > 3 AND s = 'hello'\0" + PROPS.encode(),
                  "between": b"a BETWEEN 1 AND 10 OR b IN ('x', 'y')\0a\x017\x02",
                  "null": b"NOT (c IS NULL) AND TAGS <> 'x'\0c\x011.5\x02",
                  "numbers": b"a >= 1.5E2 OR a < -9223372036854775807 OR a = TRUE\0a\x0199\x02"},
        "tags": {"tags": b"\x00TagA || TagB", "all": b"\x00*", "sql": b"\x01a IS NOT NULL", "other": b"\x03x"},
        "properties": {"send": PROPS.encode(), "wait_inside": b"xWAIT\x01true\x02WAIT\x01true\x02a\x01\x01\x02"},
        "acl": _acl(),
        "ha": _ha(),
        "scan": _scan(),
        "grpc": _grpc(),
    }


def main() -> None:
    everything = seeds()
    assert set(everything) == set(TARGETS)
    for target, files in everything.items():
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, data in files.items():
            (folder / name).write_bytes(data)


if __name__ == "__main__":
    main()
