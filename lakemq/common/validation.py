"""Topic and group name rules (RocketMQ 4.x Validators).

Names become directory names under the store (``consumequeue/{topic}/...``) and object keys
in the lake, so the character set is closed: letters, digits, ``%``, ``|``, ``_`` and ``-``.
No dot, no slash: a name can never be ``..`` or climb out of its directory.
"""

from __future__ import annotations

import re
from typing import Final

from lakemq.errors import InvalidNameError

__all__ = ["GROUP_MAX_LENGTH", "TOPIC_MAX_LENGTH", "check_group", "check_topic", "is_valid_name"]

TOPIC_MAX_LENGTH: Final = 127
GROUP_MAX_LENGTH: Final = 255
_VALID: Final = re.compile(r"[%|a-zA-Z0-9_-]+")


def is_valid_name(name: str, max_length: int = TOPIC_MAX_LENGTH) -> bool:
    return isinstance(name, str) and 0 < len(name) <= max_length and _VALID.fullmatch(name) is not None


def _check(kind: str, name: str, max_length: int) -> str:
    if not isinstance(name, str) or not name or not name.strip():
        raise InvalidNameError(f"{kind} name is empty")
    if len(name) > max_length:
        raise InvalidNameError(f"{kind} name is {len(name)} characters, the maximum is {max_length}")
    if _VALID.fullmatch(name) is None:
        raise InvalidNameError(
            f"{kind} name {name!r} has characters outside letters, digits, '%', '|', '_' and '-'"
        )
    return name


def check_topic(topic: str) -> str:
    """Return ``topic`` or raise InvalidNameError with the reason."""
    return _check("topic", topic, TOPIC_MAX_LENGTH)


def check_group(group: str) -> str:
    return _check("group", group, GROUP_MAX_LENGTH)
