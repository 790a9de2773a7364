"""The broker's ACL decisions on real RemotingCommands signed by lakemq's client hook."""

from __future__ import annotations

import pytest

from lakemq.broker.acl import PlainAccessValidator, parse_access_resource, parse_plain_acl
from lakemq.client.acl import AclClientRPCHook, rpc_hook_for
from lakemq.client.config import ClientConfig
from lakemq.common.acl_signature import calculate_signature, combine_request_content, sign_request
from lakemq.common.codes import RequestCode
from lakemq.common.subscription import SubscriptionData
from lakemq.errors import NoPermissionError
from lakemq.remoting import RemotingCommand
from lakemq.remoting.bodies import ConsumerData, HeartbeatData

ACL = """
accounts:
  - accessKey: userKey1
    secretKey: userSecret1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms: [DeniedTopic=DENY, ReadOnly=SUB]
    groupPerms: [DeniedGroup=DENY]
  - accessKey: adminKey1
    secretKey: adminSecret1
    admin: true
  - accessKey: trustedKey
    secretKey: trustedSecret
    whiteRemoteAddress: 10.1.1.*
    defaultTopicPerm: DENY
globalWhiteRemoteAddresses: [192.168.9.9]
"""
VALIDATOR = PlainAccessValidator(parse_plain_acl(ACL))
CLIENT = "127.0.0.1:50000"


def signed(code: int, fields: dict[str, str], body: bytes = b"", *, key: str = "userKey1",
           secret: str = "userSecret1") -> RemotingCommand:
    request = RemotingCommand.request(code, dict(fields), body)
    AclClientRPCHook(key, secret)(request)
    return request


def refusal(request: RemotingCommand, addr: str = CLIENT) -> str:
    with pytest.raises(NoPermissionError) as info:
        VALIDATOR.check(request, addr)
    return info.value.remark


def send_v2(topic: str, **kw: str) -> RemotingCommand:
    return signed(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": topic, "c": "TBW102"}, b"body", **kw)


def test_signature_matches_rocketmq_vector() -> None:
    # RocketMQ's AclSignerTest: HmacSHA1("RocketMQ", key "12345678"), base64.
    assert calculate_signature(b"RocketMQ", "12345678") == "IUc8rrO/0gDch8CjObLQsW2rsiA="


def test_signed_content_is_sorted_values_then_body() -> None:
    fields = {"topic": "T", "AccessKey": "ak", "Signature": "ignored", "OnsChannel": "ALIYUN", "b": "x"}
    assert combine_request_content(fields, b"BODY") == b"akALIYUNxTBODY"
    sign_request(fields, b"BODY", "ak", "secret")
    assert fields["Signature"] == calculate_signature(b"akALIYUNxTBODY", "secret")


def test_hook_only_with_credentials() -> None:
    assert rpc_hook_for(ClientConfig(namesrv_addr="x:1")) is None
    hook = rpc_hook_for(ClientConfig(namesrv_addr="x:1", access_key="ak", secret_key="sk"))
    assert hook is not None and "sk" not in repr(hook)


def test_signed_send_and_pull_pass() -> None:
    VALIDATOR.check(send_v2("AnyTopic"), CLIENT)
    VALIDATOR.check(signed(RequestCode.PULL_MESSAGE, {"topic": "ReadOnly", "consumerGroup": "g1"}), CLIENT)
    VALIDATOR.check(signed(RequestCode.GET_MAX_OFFSET, {"topic": "DeniedTopic", "queueId": "0"}), CLIENT)


def test_authentication_failures() -> None:
    assert refusal(send_v2("AnyTopic", secret="wrongSecret")) \
        == "Check signature failed for accessKey=userKey1"
    unsigned = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T"})
    assert refusal(unsigned) == "No accessKey is configured"
    assert refusal(send_v2("AnyTopic", key="nobody12")) == "No acl config for nobody12"
    tampered = send_v2("AnyTopic")
    tampered.body = b"other body"
    assert "Check signature failed" in refusal(tampered)
    renamed = send_v2("AnyTopic")
    renamed.ext_fields["b"] = "DeniedTopic"  # the signature covers the topic
    assert "Check signature failed" in refusal(renamed)


def test_permissions() -> None:
    assert refusal(send_v2("DeniedTopic")).startswith("No permission for topic:DeniedTopic")
    assert refusal(send_v2("ReadOnly")).startswith("No permission for topic:ReadOnly (needs PUB")
    assert refusal(signed(RequestCode.PULL_MESSAGE, {"topic": "T", "consumerGroup": "DeniedGroup"})) \
        .startswith("No permission for group:DeniedGroup")
    assert refusal(signed(RequestCode.UPDATE_CONSUMER_OFFSET, {"topic": "DeniedTopic", "consumerGroup": "g",
                                                               "queueId": "0", "commitOffset": "1"})) \
        .startswith("No permission for topic:DeniedTopic")
    # a send to a group's retry topic needs SUB on it, which the default group perm gives
    VALIDATOR.check(send_v2("%RETRY%g1"), CLIENT)
    assert refusal(send_v2("%RETRY%DeniedGroup")).startswith("No permission for group:DeniedGroup")


def test_pop_codes_need_sub_on_topic_and_group() -> None:
    for code in (RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.CHANGE_MESSAGE_INVISIBLETIME):
        VALIDATOR.check(signed(code, {"topic": "ReadOnly", "consumerGroup": "g1"}), CLIENT)
        assert refusal(signed(code, {"topic": "DeniedTopic", "consumerGroup": "g1"})) \
            .startswith("No permission for topic:DeniedTopic")
        assert refusal(signed(code, {"topic": "T", "consumerGroup": "DeniedGroup"})) \
            .startswith("No permission for group:DeniedGroup")


def test_heartbeat_resources() -> None:
    sub = SubscriptionData("DeniedTopic", "*")
    body = HeartbeatData("c1", (), (ConsumerData("g1", "CONSUME_PASSIVELY", "CLUSTERING",
                                                  "CONSUME_FROM_LAST_OFFSET", (sub,), False),)).encode()
    request = signed(RequestCode.HEART_BEAT, {}, body)
    assert parse_access_resource(request, CLIENT).resource_perms == {"%RETRY%g1": 8, "DeniedTopic": 8}
    assert refusal(request).startswith("No permission for topic:DeniedTopic")
    assert "heartbeat body unreadable" in refusal(signed(RequestCode.HEART_BEAT, {}, b"{not json"))


def test_admin_codes() -> None:
    fields = {"topic": "NewTopic", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
              "perm": "6", "topicFilterType": "SINGLE_TAG"}
    assert refusal(signed(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)) \
        == f"Need admin permission for request code={int(RequestCode.UPDATE_AND_CREATE_TOPIC)}, " \
           "but accessKey=userKey1 is not"
    as_admin = signed(RequestCode.UPDATE_AND_CREATE_TOPIC, fields, key="adminKey1", secret="adminSecret1")
    VALIDATOR.check(as_admin, CLIENT)
    VALIDATOR.check(send_v2("DeniedTopic", key="adminKey1", secret="adminSecret1"), CLIENT)


def test_white_addresses_skip_checks() -> None:
    unsigned = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "DeniedTopic"})
    VALIDATOR.check(unsigned, "192.168.9.9:1234")  # global white list: no key needed
    bad_signature = send_v2("AnyTopic", key="trustedKey", secret="not-the-secret")
    VALIDATOR.check(bad_signature, "10.1.1.7:999")  # the account's white list: no signature, no perms
    assert "Check signature failed" in refusal(bad_signature, "10.1.2.7:999")


def test_trace_topic_publish_skips_permissions() -> None:
    acl = PlainAccessValidator(parse_plain_acl("accounts: [{accessKey: userKey1, secretKey: userSecret1}]"))
    acl.check(send_v2("RMQ_SYS_TRACE_TOPIC"), CLIENT)
    with pytest.raises(NoPermissionError):
        acl.check(send_v2("OtherTopic"), CLIENT)


def test_old_clients_unique_key_field_is_not_signed() -> None:
    fields = {"topic": "T", "key": "k", "maxNum": "1", "beginTimestamp": "0", "endTimestamp": "1"}
    request = signed(RequestCode.QUERY_MESSAGE, fields)
    request.ext_fields["_UNIQUE_KEY_QUERY"] = "true"  # added after signing by clients <= 4.9.3
    request.version = 399
    VALIDATOR.check(request, CLIENT)
    request.version = 401
    assert "Check signature failed" in refusal(request)
