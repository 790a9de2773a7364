"""GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG (mqadmin getBrokerConfig / updateBrokerConfig).

GET_BROKER_CONFIG answers every key the broker was configured with (broker.conf's keys, in
RocketMQ's spelling) as Java properties text. UPDATE_BROKER_CONFIG changes the keys lakemq can
change while running, :data:`RUNTIME_KEYS`: the transaction check-back's timing. The change
lasts until the broker restarts (broker.conf is not rewritten). Any other known key is refused
with a clear reason, and nothing is changed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from lakemq.broker.config import KEY_ALIASES, BrokerConfig
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.config import bind, snake_to_camel
from lakemq.errors import ConfigError, for_code
from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext

__all__ = ["BROKER_CONFIG_CODES", "RUNTIME_KEYS", "BrokerConfigProcessor", "config_properties"]

log = logging.getLogger(__name__)

BROKER_CONFIG_CODES = (RequestCode.GET_BROKER_CONFIG, RequestCode.UPDATE_BROKER_CONFIG)
# broker.conf keys that take effect at once when changed while the broker runs.
RUNTIME_KEYS = frozenset({"transactionTimeOut", "transactionCheckInterval", "transactionCheckMax"})
_ROCKETMQ_SPELLING = {ours: theirs for theirs, ours in KEY_ALIASES.items()}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, (tuple, list)):
        return ";".join(str(v) for v in value)
    return str(value)


def config_properties(*configs: object) -> dict[str, str]:
    """Every field of the config dataclasses as broker.conf keys and values."""
    props: dict[str, str] = {}
    for config in configs:
        for f in dataclasses.fields(config):  # type: ignore[arg-type]
            key = snake_to_camel(f.name)
            props[_ROCKETMQ_SPELLING.get(key, key)] = _text(getattr(config, f.name))
    return props


def _parse_properties(body: bytes) -> dict[str, str]:
    """MixAll.string2Properties: ``key=value`` lines, blank and ``#`` lines skipped."""
    props: dict[str, str] = {}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise for_code(ResponseCode.SYSTEM_ERROR, f"the config update is not UTF-8 text: {exc}") from exc
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise for_code(ResponseCode.SYSTEM_ERROR, f"expected key=value, got {line!r}")
        props[key.strip()] = value.strip()
    return props


class BrokerConfigProcessor:
    """``configs()`` gives the configs in force; ``apply(broker_config)`` puts a changed
    BrokerConfig in force (the controller hands its new values to the services that use them)."""

    def __init__(self, configs: Callable[[], tuple[object, ...]], apply: Callable[[BrokerConfig], None]) -> None:
        self._configs = configs
        self._apply = apply
        self._version = 0

    def reject_request(self) -> bool:
        return False

    def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        if request.code == RequestCode.GET_BROKER_CONFIG:
            text = "".join(f"{k}={v}\n" for k, v in sorted(config_properties(*self._configs()).items()))
            return request.reply(ResponseCode.SUCCESS, ext_fields={"version": json.dumps({"counter": self._version})},
                                 body=text.encode("utf-8"))
        return self._update(ctx, request)

    def _update(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        changes = _parse_properties(request.body or b"")
        if not changes:
            raise for_code(ResponseCode.SYSTEM_ERROR, "no key=value to update")
        known = config_properties(*self._configs())
        unknown = sorted(set(changes) - set(known))
        if unknown:
            raise for_code(ResponseCode.SYSTEM_ERROR, f"unknown config keys: {', '.join(unknown)}")
        fixed = sorted(set(changes) - RUNTIME_KEYS)
        if fixed:
            raise for_code(ResponseCode.SYSTEM_ERROR,
                           f"not supported by lakemq: {', '.join(fixed)} cannot be changed while the broker runs "
                           f"(set it in broker.conf and restart); changeable now: {', '.join(sorted(RUNTIME_KEYS))}")
        current = next(c for c in self._configs() if isinstance(c, BrokerConfig))
        updated = self._with(current, changes)
        self._apply(updated)
        self._version += 1
        log.info("broker config updated by %s: %s", ctx.remote_addr, changes)
        return request.reply(ResponseCode.SUCCESS)

    @staticmethod
    def _with(current: BrokerConfig, changes: Mapping[str, str]) -> BrokerConfig:
        try:
            parsed = bind(BrokerConfig, changes)  # converts and checks each value's type
            values = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(BrokerConfig)
                      if snake_to_camel(f.name) in changes}
            return dataclasses.replace(current, **values)  # checks the ranges
        except ConfigError as exc:
            raise for_code(ResponseCode.SYSTEM_ERROR, str(exc)) from exc
