"""Protocol constants broker, name server and client share (RocketMQ's MixAll.MASTER_ID,
PermName and PullSysFlag)."""

from __future__ import annotations

from typing import Final

__all__ = ["MASTER_ID", "PermName", "PullSysFlag"]

# Broker id 0 is a broker group's master; slaves have other ids.
MASTER_ID: Final = 0


class PermName:
    """Permission bits of a topic or broker (RocketMQ PermName)."""

    PERM_PRIORITY: Final = 0x8
    PERM_READ: Final = 0x4
    PERM_WRITE: Final = 0x2
    PERM_INHERIT: Final = 0x1

    @staticmethod
    def is_readable(perm: int) -> bool:
        return bool(perm & PermName.PERM_READ)

    @staticmethod
    def is_writeable(perm: int) -> bool:
        return bool(perm & PermName.PERM_WRITE)

    @staticmethod
    def is_inherited(perm: int) -> bool:
        return bool(perm & PermName.PERM_INHERIT)

    @staticmethod
    def to_string(perm: int) -> str:
        return (
            ("R" if perm & PermName.PERM_READ else "-")
            + ("W" if perm & PermName.PERM_WRITE else "-")
            + ("X" if perm & PermName.PERM_INHERIT else "-")
        )


class PullSysFlag:
    """Bits of PULL_MESSAGE's ``sysFlag`` (RocketMQ PullSysFlag)."""

    COMMIT_OFFSET: Final = 0x1  # commit ``commitOffset`` for the group
    SUSPEND: Final = 0x2  # hold the pull while nothing is there (long polling)
    SUBSCRIPTION: Final = 0x4  # the request carries its subscription
    CLASS_FILTER: Final = 0x8
    LITE_PULL: Final = 0x10

    @staticmethod
    def build(*, commit_offset: bool, suspend: bool, subscription: bool) -> int:
        return ((PullSysFlag.COMMIT_OFFSET if commit_offset else 0)
                | (PullSysFlag.SUSPEND if suspend else 0)
                | (PullSysFlag.SUBSCRIPTION if subscription else 0))
