"""The seam through which the broker's subscription filters (tag, SQL92) reach the store.

The store calls ``is_matched_by_consume_queue`` with the tags code of a ConsumeQueue entry
before it touches the CommitLog, then ``is_matched_by_commit_log`` with the record itself for
filters that need the properties (SQL92). A ``None`` filter in ``get_message`` matches all.

A filter that decides by the tags code alone (a TAG subscription) may also say so with a
``code_set()`` method (:class:`CodeSetFilter`): the store then reads a pull in compiled code.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["CodeSetFilter", "MessageFilter"]


class MessageFilter(Protocol):
    def is_matched_by_consume_queue(self, tags_code: int | None, cq_ext: object | None = None) -> bool:
        """``tags_code`` is the 8-byte code of the ConsumeQueue entry; no extension unit exists
        in lakemq, so ``cq_ext`` is always ``None``."""

    def is_matched_by_commit_log(
        self, msg_buffer: bytes | memoryview | None, properties: dict[str, str] | None
    ) -> bool:
        """``msg_buffer`` is the raw CommitLog record; ``properties`` its decoded properties."""


class CodeSetFilter(MessageFilter, Protocol):
    def code_set(self) -> frozenset[int] | None:
        """The tags codes this filter accepts, None for every code; such a filter accepts
        every record ``is_matched_by_consume_queue`` accepted."""
