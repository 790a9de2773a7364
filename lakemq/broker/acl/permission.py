"""ACL 1.0 permissions (RocketMQ's ``Permission``): bits, their plain_acl.yml spelling, the check."""

from __future__ import annotations

from typing import Final

from lakemq.common.codes import RequestCode
from lakemq.errors import ConfigError

__all__ = ["ADMIN_CODES", "ANY", "DENY", "PUB", "SUB", "check_permission", "parse_perm", "perm_name"]

DENY: Final = 1
ANY: Final = 1 << 1
PUB: Final = 1 << 2
SUB: Final = 1 << 3

_BY_NAME: Final = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}

# Requests only an admin account may make (RocketMQ's Permission.ADMIN_CODE, plus the batch
# group creation lakemq serves, and the transaction sweep's hand-back of half messages).
ADMIN_CODES: Final = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST,
    RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC,
    RequestCode.LAKEMQ_RESUME_HALF_MESSAGES,
})


def parse_perm(text: str | None, where: str) -> int:
    """``PUB``, ``SUB``, ``PUB|SUB``, ``SUB|PUB`` or ``DENY``; absent means DENY (RocketMQ).
    RocketMQ reads any other word as DENY too; lakemq refuses it so a typo cannot lock out."""
    if text is None or not text.strip():
        return DENY
    perm = _BY_NAME.get(text.strip())
    if perm is None:
        raise ConfigError(f"{where}: permission {text!r} is not one of {', '.join(_BY_NAME)}")
    return perm


def check_permission(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return "|".join(name for name, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit) or "ANY"
