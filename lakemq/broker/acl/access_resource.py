"""What a request asks for, as the ACL sees it (RocketMQ's PlainAccessResource.parse).

Per request code: the topics and groups touched and the permission each needs (sending to a
topic needs PUB, to a retry topic SUB; pulling, and POP's pop, ack and change of invisible
time, need SUB on the topic and on the group;
offsets, consumer lists, heartbeats and unregistering need SUB on the group). Groups are
named by their retry topic ``%RETRY%group``. The signed content is the ext fields and body
the client signed (:mod:`lakemq.common.acl_signature`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from lakemq.broker.acl.permission import PUB, SUB
from lakemq.broker.acl.plain_config import RETRY_PREFIX
from lakemq.common.acl_signature import (
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    calculate_signature,
    combine_request_content,
)
from lakemq.common.codes import RequestCode
from lakemq.errors import LakeMQError
from lakemq.remoting.bodies import HeartbeatData
from lakemq.remoting.codec import RemotingCommand

__all__ = ["AccessResource", "parse_access_resource"]

# Clients up to RocketMQ 4.9.3 added this field after signing a query-by-key; the broker
# leaves it out of their signed content.
_UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"
_V4_9_3: Final = 400


@dataclass(frozen=True, slots=True)
class AccessResource:
    remote_host: str
    request_code: int
    access_key: str | None
    signature: str | None
    security_token: str | None
    content: bytes
    resource_perms: Mapping[str, int] = field(default_factory=dict)
    # How the signature over ``content`` is made: 4.x remoting's base64 HMAC, or RocketMQ 5's
    # hex one over x-mq-date-time (lakemq.broker.grpc.auth).
    sign: Callable[[bytes, str], str] = calculate_signature


def _host(remote_addr: str) -> str:
    host, sep, _port = remote_addr.rpartition(":")
    return (host if sep else remote_addr).strip("[]")


def _group(group: str | None) -> str | None:
    return RETRY_PREFIX + group if group else None


def parse_access_resource(request: RemotingCommand, remote_addr: str) -> AccessResource:
    """Raises LakeMQError when the request's body cannot be read for its resources."""
    fields = request.ext_fields
    perms: dict[str, int] = {}

    def need(resource: str | None, perm: int) -> None:
        if resource:
            perms[resource] = perm

    code = request.code
    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        topic = fields.get("topic" if code == RequestCode.SEND_MESSAGE else "b")
        need(topic, SUB if topic and topic.startswith(RETRY_PREFIX) else PUB)
    elif code == RequestCode.RECALL_MESSAGE:  # RocketMQ 5: Action.PUB on the topic
        need(fields.get("topic"), PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        need(_group(fields.get("group")), SUB)
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE,
                  RequestCode.CHANGE_MESSAGE_INVISIBLETIME):
        need(fields.get("topic"), SUB)
        need(_group(fields.get("consumerGroup")), SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        need(fields.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        try:
            heartbeat = HeartbeatData.decode(request.body)
        except LakeMQError as exc:
            raise LakeMQError(f"heartbeat body unreadable for the ACL check: {exc}") from exc
        for consumer in heartbeat.consumer_data_set:
            need(_group(consumer.group_name), SUB)
            for subscription in consumer.subscription_data_set:
                need(subscription.topic, SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        need(_group(fields.get("consumerGroup")), SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        need(_group(fields.get("consumerGroup")), SUB)
        need(fields.get("topic"), SUB)
    skip = frozenset({_UNIQUE_KEY_QUERY}) if request.version <= _V4_9_3 else frozenset()
    return AccessResource(
        remote_host=_host(remote_addr),
        request_code=code,
        access_key=fields.get(ACCESS_KEY),
        signature=fields.get(SIGNATURE),
        security_token=fields.get(SECURITY_TOKEN),
        content=combine_request_content(fields, request.body, skip=skip),
        resource_perms=perms,
    )
