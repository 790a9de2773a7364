"""The store-side face of a SQL92 subscription (RocketMQ ExpressionMessageFilter for SQL92).

It satisfies the store's ``MessageFilter`` protocol structurally: the ConsumeQueue check uses
the tag hash codes the pre-filter found (if the expression pins ``TAGS``), the CommitLog check
scans the record's raw properties with the pre-filter and decodes and evaluates only what
passes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from lakemq.common.message import string_to_properties
from lakemq.common.record import BODY_POS

if TYPE_CHECKING:  # the compiler (and sqlglot) load with the first SQL92 subscription
    from lakemq.filter.sql92 import Sql92Expression

__all__ = ["Sql92MessageFilter", "record_properties"]

_BODY_LEN: Final = struct.Struct(">i")
_PROPS_LEN: Final = struct.Struct(">h")


def record_properties(record: bytes | bytearray | memoryview) -> bytes:
    """The raw properties string of a CommitLog record (no other field decoded)."""
    body_len = _BODY_LEN.unpack_from(record, BODY_POS - 4)[0]
    pos = BODY_POS + body_len
    pos += 1 + record[pos]
    props_len = _PROPS_LEN.unpack_from(record, pos)[0]
    return bytes(record[pos + 2 : pos + 2 + props_len])


@dataclass(frozen=True, slots=True)
class Sql92MessageFilter:
    expression: Sql92Expression

    def is_matched_by_consume_queue(self, tags_code: int | None, cq_ext: object | None = None) -> bool:
        return tags_code is None or self.expression.prefilter.may_match_tags_code(tags_code)

    def is_matched_by_commit_log(
        self, msg_buffer: bytes | memoryview | None, properties: dict[str, str] | None
    ) -> bool:
        if properties is None:
            if msg_buffer is None:
                return self.expression.matches({})
            raw = record_properties(msg_buffer)
            if not self.expression.prefilter.may_match_properties(raw):
                return False
            properties = string_to_properties(raw.decode("utf-8", "replace"))
        return self.expression.matches(properties)
