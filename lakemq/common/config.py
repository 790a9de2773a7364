"""RocketMQ-style ``key=value`` configuration files bound to frozen dataclasses.

Files use RocketMQ's camelCase keys (``brokerName``, ``flushDiskType``); each part declares a
frozen dataclass with snake_case fields and binds only the keys it owns, so one broker.conf
feeds the store, broker and tiering configs without a god object.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from lakemq.errors import ConfigError

__all__ = ["bind", "camel_to_snake", "check_unknown_keys", "read_properties", "snake_to_camel"]

T = TypeVar("T")


def read_properties(path: str | Path) -> dict[str, str]:
    """Parse a Java-properties-like file: ``key=value`` lines, ``#`` comments, blank lines."""
    props: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {line!r}")
        props[key.strip()] = value.strip()
    return props


def camel_to_snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def snake_to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _convert(key: str, raw: str, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if raw == "" and len(args) < len(typing.get_args(hint)):
            return None
        hint = args[0]
    try:
        if hint is bool:
            lowered = raw.lower()
            if lowered not in ("true", "false"):
                raise ValueError("expected true or false")
            return lowered == "true"
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        if isinstance(hint, type) and issubclass(hint, Enum):
            if raw not in hint.__members__:
                raise ValueError(f"one of {', '.join(hint.__members__)}")
            return hint[raw]
        if origin in (tuple, list) or hint in (tuple, list):
            items = [s.strip() for s in re.split(r"[;,]", raw) if s.strip()]
            return tuple(items) if (origin or hint) is tuple else items
        return raw
    except ValueError as exc:
        raise ConfigError(f"config key {key}: bad value {raw!r} ({exc})") from exc


def bind(cls: type[T], props: Mapping[str, str], **overrides: Any) -> T:
    """Build ``cls`` from the keys of ``props`` that name its fields (camelCase or snake_case).

    Keys that belong to other parts are ignored here; :func:`check_unknown_keys` reports keys
    that no part owns."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        for key in (snake_to_camel(f.name), f.name):
            if key in props:
                values[f.name] = _convert(key, props[key], hints[f.name])
                break
    values.update(overrides)
    return cls(**values)


def check_unknown_keys(props: Mapping[str, str], classes: Iterable[type]) -> None:
    known: set[str] = set()
    for cls in classes:
        for f in dataclasses.fields(cls):
            known.update((f.name, snake_to_camel(f.name)))
    unknown = sorted(set(props) - known)
    if unknown:
        raise ConfigError(f"unknown config keys: {', '.join(unknown)}")
