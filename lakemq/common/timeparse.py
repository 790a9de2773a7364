"""Times as users type them: epoch milliseconds or an ISO date/time (local time)."""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

from lakemq.errors import LakeMQError

__all__ = ["parse_millis"]

T = TypeVar("T")


def parse_millis(text: str | None, default: T) -> int | T:
    """Epoch milliseconds of ``text`` (digits, or an ISO date/time such as 2026-11-22T10:00:00
    in local time); ``default`` when it is blank."""
    text = (text or "").strip()
    if not text:
        return default
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError as exc:
        raise LakeMQError(f"time {text!r} is neither epoch milliseconds nor an ISO date/time") from exc
