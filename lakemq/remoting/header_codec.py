"""How custom headers (lakemq.remoting.headers) are read from and written to a command's
``extFields``: one decoder and one encoder generated per header class.

Each header is a frozen dataclass named and shaped like its Java CommandCustomHeader; its
snake_case fields map to the Java field names (``consumer_group`` <-> ``consumerGroup``; the
exceptions are listed in ``_WIRE_NAMES``). A field without a default is required, as
``@CFNotNull`` is in Java; values travel as strings, booleans as ``true``/``false`` (read
leniently: the C++ client sends ``0``/``1``). :func:`decode_header` raises
RemotingCommandError naming a missing or malformed field (the dispatcher answers it with
SYSTEM_ERROR, as RocketMQ does).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from lakemq.common.config import snake_to_camel
from lakemq.errors import RemotingCommandError
from lakemq.remoting.codec import RemotingCommand

__all__ = ["decode_header", "decoder_for", "encode_header", "encoder_for", "make_encoder"]

H = TypeVar("H")

# Java field names that snake_to_camel does not produce.
_WIRE_NAMES = {"client_id": "clientID"}


def _wire_name(field_name: str) -> str:
    return _WIRE_NAMES.get(field_name, snake_to_camel(field_name))


class _Field(typing.NamedTuple):
    name: str
    wire: str
    required: bool
    kind: type  # bool, int or str: how the string on the wire is read
    default: Any


@functools.cache
def _plan(cls: type) -> tuple[_Field, ...]:
    """Per header class, worked out once: decoding and encoding run per request."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        kind = hint if hint in (bool, int) else str
        plan.append(_Field(f.name, _wire_name(f.name), required, kind, None if required else f.default))
    return tuple(plan)


def _to_bool(raw: str) -> bool:
    # Java reads Boolean.parseBoolean (anything but "true" is false); the C++ client
    # writes "0"/"1", so "1" counts as true too.
    return raw == "true" or raw.strip().lower() in ("true", "1")


def _to_int(wire: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise RemotingCommandError(f"header field {wire}: expected a number, got {raw!r}") from None


def _bad_number(fields: Mapping[str, str], wires: tuple[tuple[str, str, bool], ...]) -> RemotingCommandError:
    """The error for the first numeric field that does not parse (the decoder's slow path)."""
    for wire, name, numeric in wires:
        raw = fields.get(wire)
        if numeric and raw is not None:
            _to_int(name, raw)
    return RemotingCommandError("a header field is not a number")


def _text(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _missing(wire: str) -> RemotingCommandError:
    return RemotingCommandError(f"the custom field <{wire}> is null")


_Decoder = Callable[[Mapping[str, str]], Any]
_DECODERS: dict[tuple[type, tuple[tuple[str, str], ...]], _Decoder] = {}
_ENCODERS: dict[tuple[type, tuple[tuple[str, str], ...]], Callable[[Any], dict[str, str]]] = {}


def decoder_for(cls: type, wire_names: tuple[tuple[str, str], ...] = ()) -> _Decoder:
    """The decoder of header ``cls``; ``wire_names`` renames fields on the wire."""
    decoder = _DECODERS.get((cls, wire_names))
    if decoder is None:
        decoder = _DECODERS[(cls, wire_names)] = _make_decoder(cls, wire_names)
    return decoder


def encoder_for(cls: type, wire_names: tuple[tuple[str, str], ...] = ()) -> Callable[[Any], dict[str, str]]:
    """The encoder of header ``cls``; ``wire_names`` renames fields on the wire."""
    encoder = _ENCODERS.get((cls, wire_names))
    if encoder is None:
        encoder = _ENCODERS[(cls, wire_names)] = make_encoder(cls, wire_names)
    return encoder


def _make_decoder(cls: type, wire_names: tuple[tuple[str, str], ...]) -> _Decoder:
    """A function reading header ``cls`` from extFields, generated once per class (as
    dataclasses generates ``__init__``): one ``get`` per field, no loop or reflection per
    request. ``wire_names`` renames fields on the wire (SendMessageRequestHeaderV2's letters).

    The header is filled through its slots' setters, which skips the frozen ``__init__``'s
    keyword parsing and per-field ``object.__setattr__`` (2.6x faster for the send header; the
    result is the same frozen instance). Numbers are converted inline under one ``try``; a
    bad one is reported by ``_bad_number``, which names the field."""
    renamed = dict(wire_names)
    plan = _plan(cls)
    lines = ["def decode(fields):", "    get = fields.get"]
    env: dict[str, Any] = {"_new": object.__new__, "cls": cls, "_to_bool": _to_bool, "_missing": _missing,
                           "_bad_number": _bad_number}
    wires = []
    for i, f in enumerate(plan):
        wire = renamed.get(f.wire, f.wire)
        wires.append((wire, f.wire, f.kind is int))
        lines.append(f"    v{i} = get({wire!r})")
        if f.required:
            lines.append(f"    if v{i} is None: raise _missing({f.wire!r})")
    # Slots filled directly only where __init__ does nothing more (no __post_init__).
    direct = not hasattr(cls, "__post_init__") and all(
        isinstance(cls.__dict__.get(f.name), types.MemberDescriptorType) for f in plan)
    lines += ["    try:", "        h = _new(cls)" if direct else "        h = cls("]
    for i, f in enumerate(plan):
        if f.kind is int:
            value = f"int(v{i})"
        elif f.kind is bool:
            value = f"_to_bool(v{i})"
        else:
            value = f"v{i}"
        if not f.required:
            env[f"d{i}"] = f.default
            value = f"d{i} if v{i} is None else {value}"
        if direct:
            env[f"s{i}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
            lines.append(f"        s{i}(h, {value})")
        else:
            lines.append(f"            {f.name}={value},")
    if not direct:
        lines.append("        )")
    lines += ["    except ValueError:", "        raise _bad_number(fields, wires) from None", "    return h"]
    env["wires"] = tuple(wires)
    exec("\n".join(lines), env)  # noqa: S102 - source built above from the dataclass's own fields
    return env["decode"]  # type: ignore[no-any-return]


def make_encoder(cls: type, wire_names: tuple[tuple[str, str], ...],
                 from_values: bool = False) -> Callable[..., dict[str, str]]:
    """The extFields writer for header ``cls``, generated once per class like the decoder.
    ``from_values``: a writer taking the fields' values (in declaration order, those with a
    default optional) instead of a header, for a hot path that need not build the header."""
    renamed = dict(wire_names)
    plan = _plan(cls)
    env: dict[str, Any] = {"_text": _text}
    if from_values:
        params = []
        for i, f in enumerate(plan):
            if f.required:
                params.append(f.name)
            else:
                env[f"d{i}"] = f.default
                params.append(f"{f.name}=d{i}")
        lines = [f"def encode({', '.join(params)}):", "    out = {}"]
    else:
        lines = ["def encode(h):", "    out = {}"]
    for f in plan:
        # By the declared kind: str() for an int field, true/false for a bool; _text for
        # anything else a caller put there.
        if f.kind is int:
            value = "str(v) if type(v) is int else _text(v)"
        elif f.kind is bool:
            value = "('true' if v else 'false') if type(v) is bool else _text(v)"
        else:
            value = "v if type(v) is str else _text(v)"
        lines.append(f"    v = {f.name}" if from_values else f"    v = h.{f.name}")
        lines.append("    if v is not None:")
        lines.append(f"        out[{renamed.get(f.wire, f.wire)!r}] = {value}")
    lines.append("    return out")
    exec("\n".join(lines), env)  # noqa: S102 - source built above from the dataclass's own fields
    return env["encode"]  # type: ignore[no-any-return]


def decode_header(cls: type[H], fields: Mapping[str, str] | RemotingCommand | None) -> H:
    """Build header ``cls`` from extFields (or straight from a command)."""
    if isinstance(fields, RemotingCommand):
        fields = fields.ext_fields
    header: H = decoder_for(cls)(fields or {})
    return header


def encode_header(header: object) -> dict[str, str]:
    """The extFields for a header; None fields are left out."""
    return encoder_for(type(header))(header)
