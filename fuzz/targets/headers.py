"""Custom headers from a request's extFields (header_codec's generated decoders): the input is
``key\\0value\\0...``, the first byte picks the header class; SEND_MESSAGE (V1) and V2 take
decode_send_header."""

from __future__ import annotations

import dataclasses
from typing import Final

from lakemq.common.codes import RequestCode
from lakemq.errors import RemotingCommandError
from lakemq.remoting import headers
from lakemq.remoting.codec import RemotingCommand

ALLOWED: Final = (RemotingCommandError,)
CLASSES: Final = tuple(
    cls for name in sorted(headers.__all__)
    if dataclasses.is_dataclass(cls := getattr(headers, name)) and isinstance(cls, type))


def one_input(data: bytes) -> None:
    if not data:
        return
    parts = data[1:].decode("utf-8", "replace").split("\0")
    fields = dict(zip(parts[::2], parts[1::2]))
    choice = data[0] % (len(CLASSES) + 2)
    if choice < len(CLASSES):
        headers.decode_header(CLASSES[choice], fields)
        return
    code = RequestCode.SEND_MESSAGE if choice == len(CLASSES) else RequestCode.SEND_MESSAGE_V2
    headers.decode_send_header(RemotingCommand(code, ext_fields=fields))
