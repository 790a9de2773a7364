"""A message's properties string (``name\\x01value\\x02``...): parsed, written back and parsed
again to the same mapping; WAIT=true dropped as a send stores it."""

from __future__ import annotations

from typing import Final

from lakemq.common.message import properties_to_string, string_to_properties, without_wait_true

ALLOWED: Final = ()


def one_input(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    properties = string_to_properties(text)
    assert string_to_properties(properties_to_string(properties)) == properties
    stripped = string_to_properties(without_wait_true(text))
    assert {k: v for k, v in stripped.items() if k != "WAIT"} == \
        {k: v for k, v in properties.items() if k != "WAIT"}
