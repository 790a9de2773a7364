"""A request frame checked by the broker's ACL (PlainAccessValidator.check: the resources it
names, a heartbeat's body, the signature over its fields and body) against one account."""

from __future__ import annotations

from typing import Final

from lakemq.broker.acl.plain_config import parse_plain_acl
from lakemq.broker.acl.validator import PlainAccessValidator
from lakemq.errors import FrameError, NoPermissionError
from lakemq.remoting.codec import decode_frame

ALLOWED: Final = (NoPermissionError, FrameError)
VALIDATOR: Final = PlainAccessValidator(parse_plain_acl("""
accounts:
  - accessKey: fuzzAccess
    secretKey: fuzzSecret1
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [TopicA=PUB|SUB, TopicB=SUB]
    groupPerms: [GroupA=SUB]
"""))


def one_input(data: bytes) -> None:
    VALIDATOR.check(decode_frame(data), "10.0.0.1:4242")
