"""The suite's opt-in to its exhaustive variants: ``LAKEMQ_LONG=1``.

A few tests repeat one costly step over every case a property has (a lake job killed at each of
its stages, a power cut after each): by default they run a representative few of those cases,
which still assert the same property and fail if it breaks, and with ``LAKEMQ_LONG=1`` every
case (README.md, "Run the tests")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["LONG", "sized"]

T = TypeVar("T")

LONG = os.environ.get("LAKEMQ_LONG") == "1"


def sized(every: Sequence[T], representative: Sequence[T]) -> tuple[T, ...]:
    """``every`` case under LAKEMQ_LONG=1, else the ``representative`` ones (which must be
    among them, in their order)."""
    assert [c for c in every if c in representative] == list(representative), (every, representative)
    return tuple(every if LONG else representative)
