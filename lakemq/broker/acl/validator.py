"""The broker's ACL 1.0 check (RocketMQ PlainAccessValidator / PlainPermissionManager) and the
processor wrapper that runs it before every request when ``aclEnable=true``.

Order of the checks, as RocketMQ: a client in ``globalWhiteRemoteAddresses`` passes; else the
request must carry a known ``AccessKey``; a client in that account's ``whiteRemoteAddress``
passes; else the ``Signature`` must match the account's secret; then an admin passes, an
admin-only request code is refused, and each topic / group the request touches needs its
permission (listed, else the account's default for topics or groups). Sends to the trace
topic skip the permission check. A refusal answers NO_PERMISSION with the reason as remark and
is logged; the request never reaches its processor.
"""

from __future__ import annotations

import hmac
import logging
from concurrent.futures import Executor
from pathlib import Path
from typing import Final, Protocol

from lakemq.broker.acl.access_resource import AccessResource, parse_access_resource
from lakemq.broker.acl.permission import ADMIN_CODES, PUB, check_permission, perm_name
from lakemq.broker.acl.plain_config import RETRY_PREFIX, PlainAclConfig, load_plain_acl
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import LakeMQError, NoPermissionError
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import ProcessResult, RequestContext, RequestProcessor

__all__ = ["AclGuardedRegistry", "AclProcessor", "PlainAccessValidator", "ProcessorRegistry"]

log = logging.getLogger(__name__)

TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"


def _refuse(reason: str) -> NoPermissionError:
    return NoPermissionError(ResponseCode.NO_PERMISSION, reason)


def _describe(resource: str) -> str:
    if resource.startswith(RETRY_PREFIX):
        return f"group:{resource[len(RETRY_PREFIX):]}"
    return f"topic:{resource}"


class PlainAccessValidator:
    def __init__(self, config: PlainAclConfig) -> None:
        self.config = config

    @classmethod
    def from_file(cls, path: str | Path) -> PlainAccessValidator:
        return cls(load_plain_acl(path))

    def check(self, request: RemotingCommand, remote_addr: str) -> None:
        """Raise NoPermissionError unless the request may go through."""
        try:
            resource = parse_access_resource(request, remote_addr)
        except LakeMQError as exc:
            raise _refuse(str(exc)) from exc
        self.validate(resource)

    def validate(self, resource: AccessResource) -> None:
        config = self.config
        if any(m.matches(resource.remote_host) for m in config.global_white_remote_addresses):
            return
        if not resource.access_key:
            raise _refuse("No accessKey is configured")
        account = config.accounts.get(resource.access_key)
        if account is None:
            raise _refuse(f"No acl config for {resource.access_key}")
        if account.white_remote_address.matches(resource.remote_host):
            return
        expected = resource.sign(resource.content, account.secret_key)
        signature = resource.signature
        if signature is None or not hmac.compare_digest(expected.encode(), signature.encode()):
            raise _refuse(f"Check signature failed for accessKey={account.access_key}")
        if resource.resource_perms.get(TRACE_TOPIC) == PUB:
            return
        if account.admin:
            return
        if resource.request_code in ADMIN_CODES:
            raise _refuse(f"Need admin permission for request code={resource.request_code}, "
                          f"but accessKey={account.access_key} is not")
        for name, needed in resource.resource_perms.items():
            owned = account.resource_perms.get(name)
            if owned is None:
                is_group = name.startswith(RETRY_PREFIX)
                default = account.default_group_perm if is_group else account.default_topic_perm
                if not check_permission(needed, default):
                    raise _refuse(f"No default permission for {_describe(name)} "
                                  f"(needs {perm_name(needed)}, accessKey={account.access_key})")
            elif not check_permission(needed, owned):
                raise _refuse(f"No permission for {_describe(name)} "
                              f"(needs {perm_name(needed)}, accessKey={account.access_key})")


class AclProcessor:
    """Checks the ACL, then hands the request to the wrapped processor (same sync/async face)."""

    def __init__(self, inner: RequestProcessor, validator: PlainAccessValidator) -> None:
        self._inner = inner
        self._validator = validator

    def reject_request(self) -> bool:
        return self._inner.reject_request()

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> ProcessResult:
        try:
            self._validator.check(request, ctx.remote_addr)
        except NoPermissionError as exc:
            log.warning("ACL refused %s (%d) from %s: %s", _code_name(request.code), request.code,
                        ctx.remote_addr, exc.remark)
            return request.reply(ResponseCode.NO_PERMISSION, exc.remark)
        return self._inner.process_request(ctx, request)


class ProcessorRegistry(Protocol):
    def register_processor(self, code: int, processor: RequestProcessor,
                           executor: Executor | None = None) -> None: ...

    def register_default_processor(self, processor: RequestProcessor,
                                   executor: Executor | None = None) -> None: ...


class AclGuardedRegistry:
    """A RemotingServer's registration face that wraps every processor in :class:`AclProcessor`."""

    def __init__(self, server: ProcessorRegistry, validator: PlainAccessValidator) -> None:
        self._server = server
        self._validator = validator

    def register_processor(self, code: int, processor: RequestProcessor,
                           executor: Executor | None = None) -> None:
        self._server.register_processor(code, AclProcessor(processor, self._validator), executor)

    def register_default_processor(self, processor: RequestProcessor,
                                   executor: Executor | None = None) -> None:
        self._server.register_default_processor(AclProcessor(processor, self._validator), executor)


def _code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return "request"
