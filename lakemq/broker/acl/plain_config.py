"""plain_acl.yml (RocketMQ ACL 1.0), loaded into frozen values::

    globalWhiteRemoteAddresses:      # these clients skip every check
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ          # more than 6 characters
        secretKey: 12345678          # more than 6 characters
        whiteRemoteAddress:          # clients from here skip signature and permission checks
        admin: false                 # an admin may do anything, incl. the admin-only codes
        defaultTopicPerm: DENY       # for topics not listed (absent: DENY)
        defaultGroupPerm: SUB        # for groups not listed (absent: DENY)
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]

Scalars are read as strings (as RocketMQ's typed loader does), so ``secretKey: 012345678``
keeps its leading zero. A group's permission is kept under its retry topic ``%RETRY%group``,
which is how requests name groups. Anything malformed is a ConfigError naming the entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from lakemq.broker.acl.permission import DENY, parse_perm
from lakemq.broker.acl.remote_address import AddressMatcher, parse_address_pattern
from lakemq.errors import ConfigError

__all__ = ["RETRY_PREFIX", "PlainAccount", "PlainAclConfig", "load_plain_acl", "parse_plain_acl"]

RETRY_PREFIX: Final = "%RETRY%"
_MIN_KEY_LENGTH: Final = 6  # RocketMQ: both keys must be longer than this
_ACCOUNT_KEYS: Final = frozenset({"accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm",
                                  "defaultGroupPerm", "topicPerms", "groupPerms"})


@dataclass(frozen=True, slots=True)
class PlainAccount:
    access_key: str
    secret_key: str
    white_remote_address: AddressMatcher
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    resource_perms: Mapping[str, int] = field(default_factory=dict)  # topic or %RETRY%group -> perm

    def __repr__(self) -> str:  # never print the secret into a log
        return f"PlainAccount(access_key={self.access_key!r}, admin={self.admin})"


@dataclass(frozen=True, slots=True)
class PlainAclConfig:
    global_white_remote_addresses: tuple[AddressMatcher, ...]
    accounts: Mapping[str, PlainAccount]


def load_plain_acl(path: str | Path) -> PlainAclConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read ACL file {path}: {exc.strerror}") from exc
    return parse_plain_acl(text, str(path))


def parse_plain_acl(text: str, source: str = "plain_acl.yml") -> PlainAclConfig:
    try:
        data = yaml.load(text, Loader=yaml.BaseLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with accounts / globalWhiteRemoteAddresses")
    where = f"{source}: globalWhiteRemoteAddresses"
    white = tuple(parse_address_pattern(item, where)
                  for item in _string_list(data.get("globalWhiteRemoteAddresses"), where))
    accounts: dict[str, PlainAccount] = {}
    raw_accounts = data.get("accounts") or []
    if not isinstance(raw_accounts, list):
        raise ConfigError(f"{source}: accounts must be a list")
    for index, raw in enumerate(raw_accounts):
        account = _account(raw, f"{source}: accounts[{index}]")
        if account.access_key in accounts:
            raise ConfigError(f"{source}: accessKey {account.access_key!r} appears twice")
        accounts[account.access_key] = account
    return PlainAclConfig(white, accounts)


def _account(raw: Any, where: str) -> PlainAccount:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = sorted(set(raw) - _ACCOUNT_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {', '.join(unknown)}")
    access_key, secret_key = _string(raw, "accessKey", where), _string(raw, "secretKey", where)
    if len(access_key) <= _MIN_KEY_LENGTH or len(secret_key) <= _MIN_KEY_LENGTH:
        raise ConfigError(
            f"{where}: accessKey and secretKey must be longer than {_MIN_KEY_LENGTH} characters")
    admin = _string(raw, "admin", where).lower()
    if admin not in ("", "true", "false"):
        raise ConfigError(f"{where}: admin must be true or false, got {admin!r}")
    perms: dict[str, int] = {}
    for key, is_topic in (("groupPerms", False), ("topicPerms", True)):
        for item in _string_list(raw.get(key), f"{where}.{key}"):
            name, perm = _resource_perm(item, f"{where}.{key}")
            perms[name if is_topic else RETRY_PREFIX + name] = perm
    return PlainAccount(
        access_key=access_key,
        secret_key=secret_key,
        white_remote_address=parse_address_pattern(
            _string(raw, "whiteRemoteAddress", where), f"{where}.whiteRemoteAddress"),
        admin=admin == "true",
        default_topic_perm=parse_perm(_string(raw, "defaultTopicPerm", where), f"{where}.defaultTopicPerm"),
        default_group_perm=parse_perm(_string(raw, "defaultGroupPerm", where), f"{where}.defaultGroupPerm"),
        resource_perms=perms,
    )


def _resource_perm(item: str, where: str) -> tuple[str, int]:
    parts = [p for p in item.split("=") if p]
    if len(parts) != 2 or not parts[0].strip():
        raise ConfigError(f"{where}: {item!r} is not name=PERM (e.g. topicA=PUB|SUB)")
    return parts[0].strip(), parse_perm(parts[1], f"{where}: {item!r}")


def _string(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key}: expected a single value, got {value!r}")
    return value.strip()


def _string_list(value: Any, where: str) -> list[str]:
    if value is None or value == "":
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return [v.strip() for v in value if v.strip()]
