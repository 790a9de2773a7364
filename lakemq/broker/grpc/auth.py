"""The broker's ACL (``aclEnable``) for RocketMQ 5 clients: the same accounts, permissions and
checks as remoting (lakemq.broker.acl), fed from gRPC metadata.

A 5.x client signs each call: header ``authorization`` =
``MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>``,
the signature an HmacSHA1 of the ``x-mq-date-time`` header's value with the secret key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lakemq.broker.acl import AccessResource, PlainAccessValidator
from lakemq.broker.acl.plain_config import RETRY_PREFIX
from lakemq.common.acl_signature import calculate_v2_signature

__all__ = ["GrpcAcl", "parse_authorization"]

_SCHEME = "MQv2-HMAC-SHA1"
DATE_TIME = "x-mq-date-time"


def parse_authorization(value: str) -> tuple[str, str] | None:
    """(access key, signature) from an ``authorization`` header, None when malformed."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme != _SCHEME:
        return None
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, text = part.strip().partition("=")
        if sep:
            fields[name] = text
    access_key, signature = fields.get("Credential", ""), fields.get("Signature", "")
    if not access_key or not signature:
        return None
    return access_key, signature.upper()


class GrpcAcl:
    def __init__(self, validator: PlainAccessValidator) -> None:
        self._validator = validator

    def check(self, metadata: Mapping[str, str], remote_addr: str, request_code: int,
              topics: Sequence[tuple[str, int]] = (), groups: Sequence[tuple[str, int]] = ()) -> None:
        """Raise NoPermissionError unless the call may go through; ``topics`` and ``groups``:
        (name, the permission it needs), as the remoting request of ``request_code`` would."""
        auth = parse_authorization(metadata.get("authorization", ""))
        perms = {name: perm for name, perm in topics if name}
        perms.update({RETRY_PREFIX + name: perm for name, perm in groups if name})
        self._validator.validate(AccessResource(
            remote_host=remote_addr.rpartition(":")[0] or remote_addr,
            request_code=request_code,
            access_key=auth[0] if auth else None,
            signature=auth[1] if auth else None,
            security_token=None,
            content=metadata.get(DATE_TIME, "").encode("utf-8"),
            resource_perms=perms,
            sign=calculate_v2_signature,
        ))
