"""RocketMQ ACL 1.0 for the broker (``aclEnable=true``; off by default).

Accounts and permissions come from a plain_acl.yml (``aclFile``); clients sign each request
with their access key / secret key (:mod:`lakemq.common.acl_signature`); the broker checks
every request before its processor runs and refuses with NO_PERMISSION.
"""

from lakemq.broker.acl.access_resource import AccessResource, parse_access_resource
from lakemq.broker.acl.plain_config import PlainAccount, PlainAclConfig, load_plain_acl, parse_plain_acl
from lakemq.broker.acl.validator import (
    AclGuardedRegistry,
    AclProcessor,
    PlainAccessValidator,
    ProcessorRegistry,
)

__all__ = [
    "AccessResource",
    "AclGuardedRegistry",
    "AclProcessor",
    "PlainAccessValidator",
    "PlainAccount",
    "PlainAclConfig",
    "ProcessorRegistry",
    "load_plain_acl",
    "parse_access_resource",
    "parse_plain_acl",
]
