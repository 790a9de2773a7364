"""A SEND_BATCH_MESSAGE body (MessageBatch's encoding) as the broker splits it, with each
entry's properties parsed."""

from __future__ import annotations

from typing import Final

from lakemq.common.message import string_to_properties
from lakemq.common.message_batch import decode_batch
from lakemq.errors import MessageIllegalError

ALLOWED: Final = (MessageIllegalError,)


def one_input(data: bytes) -> None:
    for entry in decode_batch(data):
        string_to_properties(entry.properties)
