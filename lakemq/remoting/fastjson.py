"""Reading the JSON that RocketMQ's Java side writes with fastjson.

fastjson writes maps whose keys are not strings with bare keys: ``{"brokerAddrs":{0:"ip:port"}}``
(a Long broker id) and ``{"offsetTable":{{"topic":"T","brokerName":"b","queueId":0}:{...}}}``
(a MessageQueue). Neither is valid JSON. Official name servers and brokers send both, and a
RocketMQ broker's config files hold them (``consumerOffset.json``: ``{"T@g":{0:5}}``), so lakemq
parses them (bodies, the broker's config files): numeric keys come back as ints, object keys as
sorted tuples of their items (``dict(key)`` gives the object back).
"""

from __future__ import annotations

import json
from typing import Any

from lakemq.errors import FrameError

__all__ = ["dumps", "loads"]

_SCALARS = json.JSONDecoder()
_WS = " \t\r\n"


def loads(data: bytes | str) -> Any:
    """Parse strict JSON or fastjson's bare-key dialect; raises FrameError on bad input
    (not UTF-8, nested deeper than the interpreter's recursion limit, anything malformed)."""
    try:
        text = bytes(data).decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
        value, end = _value(text, _skip(text, 0))
        if _skip(text, end) != len(text):
            raise ValueError(f"extra data at {end}")
    except (ValueError, IndexError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise FrameError(f"bad JSON body: {exc}") from exc
    return value


def dumps(value: Any) -> bytes:
    """Compact JSON as fastjson writes it (Java parsers accept it)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        # Sorted by the keys' repr: an object key's own keys may mix numbers and text, which
        # do not compare ({{1:2,"a":3}:0}).
        return tuple(sorted(((k, _freeze(v)) for k, v in value.items()), key=_key_order))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _key_order(item: tuple[Any, Any]) -> str:
    return repr(item[0])


def _value(text: str, i: int) -> tuple[Any, int]:
    ch = text[i]
    if ch == "{":
        return _object(text, i + 1)
    if ch == "[":
        return _array(text, i + 1)
    return _SCALARS.raw_decode(text, i)


def _object(text: str, i: int) -> tuple[dict[Any, Any], int]:
    result: dict[Any, Any] = {}
    i = _skip(text, i)
    if text[i] == "}":
        return result, i + 1
    while True:
        key, i = _value(text, _skip(text, i))
        i = _skip(text, i)
        if text[i] != ":":
            raise ValueError(f"expected ':' at {i}")
        value, i = _value(text, _skip(text, i + 1))
        result[_freeze(key)] = value
        i = _skip(text, i)
        if text[i] == ",":
            i += 1
        elif text[i] == "}":
            return result, i + 1
        else:
            raise ValueError(f"expected ',' or '}}' at {i}")


def _array(text: str, i: int) -> tuple[list[Any], int]:
    result: list[Any] = []
    i = _skip(text, i)
    if text[i] == "]":
        return result, i + 1
    while True:
        value, i = _value(text, _skip(text, i))
        result.append(value)
        i = _skip(text, i)
        if text[i] == ",":
            i += 1
        elif text[i] == "]":
            return result, i + 1
        else:
            raise ValueError(f"expected ',' or ']' at {i}")
