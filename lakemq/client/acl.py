"""Client-side ACL 1.0 signing (RocketMQ's AclClientRPCHook): with ``ClientConfig.access_key``
and ``secret_key`` set, every request gets ``AccessKey`` and a ``Signature`` over its ext
fields and body (:mod:`lakemq.common.acl_signature`) before it is sent."""

from __future__ import annotations

from dataclasses import dataclass, field

from lakemq.client.config import ClientConfig
from lakemq.common.acl_signature import sign_request
from lakemq.remoting import RemotingCommand

__all__ = ["AclClientRPCHook", "rpc_hook_for"]


@dataclass(frozen=True, slots=True)
class AclClientRPCHook:
    access_key: str
    secret_key: str = field(repr=False)

    def __call__(self, request: RemotingCommand) -> None:
        sign_request(request.ext_fields, request.body, self.access_key, self.secret_key)


def rpc_hook_for(config: ClientConfig) -> AclClientRPCHook | None:
    """The signing hook for ``config``'s credentials; None when no access key is set."""
    if not config.access_key:
        return None
    return AclClientRPCHook(config.access_key, config.secret_key)
