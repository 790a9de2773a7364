"""RemotingCommand and its frame: pure bytes in, bytes out, no I/O.

A frame on the wire (big endian)::

    +-------------+--------------------+-------------+----------+
    | length (4)  | type (1) | hlen (3)| header      | body     |
    +-------------+--------------------+-------------+----------+
    length = 4 + hlen + len(body); type 0 = JSON, 1 = ROCKETMQ

The JSON header is what fastjson writes for a RemotingCommand: an object with ``code``,
``extFields`` (string to string, left out when empty), ``flag``, ``language`` (enum name),
``opaque``, ``remark`` (left out when null), ``serializeTypeCurrentRPC`` and ``version``, keys
sorted. The ROCKETMQ header (RocketMQSerializable) is::

    code (2) | language (1) | version (2) | opaque (4) | flag (4)
    | remark length (4) | remark | ext length (4) | { key length (2) | key | value length (4) | value }*

Flag bit 0 marks a response, bit 1 a oneway request. A response uses the serialization its
request used; the C++ client (rocketmq-client-cpp 2.0) reads the 4 header-length bytes as a
plain length, so it only understands type 0 (JSON), which is what it sends.

This module is the codec's definition. The common path (whole frames, JSON headers in the form
every client writes) runs compiled in lakemq.remoting._codec, which hands whatever it does not
take back to the functions here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final

import orjson

from lakemq.errors import FrameError
from lakemq.remoting._codec import bind, decode_frames, encode_head
from lakemq.remoting._codec import encode_frame as _encode_frame

__all__ = [
    "DEFAULT_MAX_FRAME_LENGTH",
    "DEFAULT_VERSION",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "FrameDecoder",
    "LanguageCode",
    "RemotingCommand",
    "SerializeType",
    "decode_frame",
    "encode",
    "encode_frame",
    "encode_parts",
]

FLAG_RESPONSE: Final = 1 << 0
FLAG_ONEWAY: Final = 1 << 1
# MQVersion.Version.V4_9_4.ordinal(): from this version on, name servers answer routes in
# standard JSON (quoted broker-id keys) instead of fastjson's bare-key dialect.
DEFAULT_VERSION: Final = 401
DEFAULT_MAX_FRAME_LENGTH: Final = 16 << 20

FRAME_LENGTH_SIZE: Final = 4  # the length prefix, not counted in itself
HEADER_MARK_SIZE: Final = 4  # serialization type << 24 | header length
SERIALIZE_TYPE_SHIFT: Final = 24
_HEADER_LENGTH_MASK: Final = 0xFFFFFF
_ROCKETMQ_FIXED = struct.Struct(">hBhii")
_PREFIX = struct.Struct(">II")  # frame length, then serialization type << 24 | header length
_U32 = struct.Struct(">I")
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13

    @classmethod
    def parse(cls, value: object) -> LanguageCode:
        """A peer's language by name (JSON) or number (ROCKETMQ); unknown ones are OTHER."""
        if isinstance(value, str):
            return _LANGUAGE_BY_NAME.get(value, cls.OTHER)
        if isinstance(value, int) and value in cls._value2member_map_:
            return cls(value)
        return cls.OTHER


_LANGUAGE_BY_NAME: Final = dict(LanguageCode.__members__)
_LANGUAGE_NAME: Final = {language: language.name for language in LanguageCode}  # Enum.name is slow


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. ``opaque`` is set by the connection that sends a request."""

    code: int
    language: LanguageCode = LanguageCode.PYTHON
    version: int = DEFAULT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @classmethod
    def request(cls, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"",
                *, oneway: bool = False) -> RemotingCommand:
        return cls(code=code, ext_fields=dict(ext_fields or {}), body=body,
                   flag=FLAG_ONEWAY if oneway else 0)

    def reply(self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None,
              body: bytes = b"") -> RemotingCommand:
        """The response to this request: same opaque and serialization, response flag set."""
        return RemotingCommand(code=code, opaque=self.opaque, flag=FLAG_RESPONSE, remark=remark,
                               ext_fields=dict(ext_fields or {}), body=body,
                               serialize_type=self.serialize_type)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


def encode(command: RemotingCommand) -> bytes:
    """The whole frame, length prefix included."""
    return encode_frame(command)


def encode_frame(command: RemotingCommand) -> bytes:
    """The whole frame, length prefix included, in one buffer."""
    frame = _encode_frame(command)
    return frame if frame is not None else b"".join(_encode_parts(command))


def encode_parts(command: RemotingCommand) -> tuple[bytes, bytes]:
    """The frame as (length prefix + header, body): a large body is written after its head
    as it is (``transport.writelines``), not copied into one buffer first."""
    head = encode_head(command)
    return (head, command.body) if head is not None else _encode_parts(command)


def _encode_parts(command: RemotingCommand) -> tuple[bytes, bytes]:
    kind = command.serialize_type
    # 1 is SerializeType.ROCKETMQ (an enum member's lookup costs more than the test).
    header = _encode_rocketmq_header(command) if kind == 1 else _encode_json_header(command)
    length = len(header)
    if length > _HEADER_LENGTH_MASK:
        raise FrameError(f"header of {length} bytes does not fit the 3-byte length")
    body = command.body
    return _PREFIX.pack(4 + length + len(body), (kind << 24) | length) + header, body


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode one frame without its 4-byte length prefix."""
    if not isinstance(frame, (bytes, bytearray)):
        frame = bytes(frame)
    return _decode(frame, 0, len(frame))


def _decode(buffer: bytes | bytearray, start: int, end: int) -> RemotingCommand:
    """The frame in ``buffer[start:end]`` (after its length prefix); the body is copied out
    once, so ``buffer`` may be reused."""
    if end - start < 4:
        raise FrameError(f"frame of {end - start} bytes has no header length")
    (mark,) = _U32.unpack_from(buffer, start)
    kind, header_length = mark >> 24, mark & _HEADER_LENGTH_MASK
    header_end = start + 4 + header_length
    if header_end > end:
        raise FrameError(f"header length {header_length} exceeds frame of {end - start} bytes")
    if kind == 0:  # SerializeType.JSON (an enum member's lookup costs more than the test)
        command = _decode_json_header(buffer[start + 4:header_end])
    elif kind == SerializeType.ROCKETMQ:
        # A sliced copy: a view into the decoder's bytearray would pin it (a resize raises
        # BufferError) for as long as an error's traceback holds the view.
        command = _decode_rocketmq_header(memoryview(buffer[start + 4:header_end]))
    else:
        raise FrameError(f"unknown serialization type {kind}")
    if header_end < end:
        if type(buffer) is bytes:
            command.body = buffer[header_end:end]
        else:
            command.body = bytes(memoryview(buffer)[header_end:end])
    return command


class FrameDecoder:
    """Turns a byte stream into commands. ``max_frame_length`` bounds the length field plus
    its own 4 bytes (as Netty's LengthFieldBasedFrameDecoder in RocketMQ does); a frame over
    it is refused as soon as its length is read. After a FrameError the stream is unusable."""

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        self._failed: FrameError | None = None

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        if self._failed is not None:
            raise self._failed
        buffer = self._buffer
        if buffer:
            buffer += data
            source: bytes | bytearray = buffer
        else:  # nothing left over (the usual case): frames are decoded from ``data`` itself
            source = data if isinstance(data, bytes) else bytes(data)
        size = len(source)
        try:
            # Consumed bytes (pos) are cut once at the end: many frames in one read stay linear.
            commands, pos = decode_frames(source, 0, self.max_frame_length)
        except FrameError as exc:
            self._failed = exc
            buffer.clear()
            raise
        if source is buffer:
            del buffer[:pos]
        elif pos < size:
            buffer += memoryview(source)[pos:]
        return commands


def _encode_json_header(command: RemotingCommand) -> bytes:
    # Keys in fastjson's (sorted) order; orjson keeps insertion order and, like fastjson,
    # writes non-ASCII text as UTF-8 and control characters as \u escapes.
    header: dict[str, Any] = {"code": command.code}
    if command.ext_fields:
        header["extFields"] = command.ext_fields
    header["flag"] = command.flag
    header["language"] = _LANGUAGE_NAME[command.language]
    header["opaque"] = command.opaque
    if command.remark is not None:
        header["remark"] = command.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = command.version
    try:
        return orjson.dumps(header)
    except TypeError as exc:  # a lone surrogate, a value that is not text
        raise FrameError(f"header not encodable as JSON: {exc}") from exc


def _int_field(header: dict[str, Any], name: str, default: int | None = None) -> int:
    value = header.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FrameError(f"header field {name} must be an integer, got {value!r}")
    if not _INT_MIN <= value <= _INT_MAX:
        raise FrameError(f"header field {name}={value} is out of the int range")
    return value


def _ext_value(value: Any) -> str:
    # Java writes String values; be lenient with numbers and booleans from other clients.
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    raise FrameError(f"extFields value {value!r} is not a string")


def _decode_json_header(data: bytes | bytearray) -> RemotingCommand:
    try:
        header = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"bad JSON header: {exc}") from exc
    if type(header) is not dict:
        raise FrameError("JSON header is not an object")
    get = header.get
    code, flag, opaque, version = get("code"), get("flag", 0), get("opaque", 0), get("version", 0)
    ext, remark = get("extFields"), get("remark")
    # The fast path takes what Java, C++ and lakemq write (ints in 0 .. 2^31 - 1, string
    # extFields); anything else is checked field by field below, with an error naming the
    # field. ``str.join`` is the cheapest way to ask whether every extFields value is text.
    if (type(code) is int and type(flag) is int and type(opaque) is int and type(version) is int
            and not (code | flag | opaque | version) >> 31 and (remark is None or type(remark) is str)):
        if ext is None:
            ext = {}
            texts = True
        elif type(ext) is dict:
            try:
                "".join(ext.values())
                texts = True
            except TypeError:
                texts = False
        else:
            texts = False
        if texts:
            language = get("language")
            return RemotingCommand(
                code, _LANGUAGE_BY_NAME.get(language, LanguageCode.OTHER) if type(language) is str
                else LanguageCode.parse(language), version, opaque, flag, remark, ext)
    if remark is not None and not isinstance(remark, str):
        raise FrameError(f"header field remark must be a string, got {remark!r}")
    ext = {} if ext is None else ext
    if not isinstance(ext, dict):
        raise FrameError("header field extFields must be an object")
    return RemotingCommand(
        code=_int_field(header, "code"),
        language=LanguageCode.parse(header.get("language")),
        version=_int_field(header, "version", 0),
        opaque=_int_field(header, "opaque", 0),
        flag=_int_field(header, "flag", 0),
        remark=remark,
        ext_fields={str(k): _ext_value(v) for k, v in ext.items() if v is not None},
        serialize_type=SerializeType.JSON,
    )


def _encode_rocketmq_header(command: RemotingCommand) -> bytes:
    try:
        fixed = _ROCKETMQ_FIXED.pack(command.code, command.language, command.version,
                                     command.opaque, command.flag)
    except struct.error as exc:
        raise FrameError(f"command does not fit the ROCKETMQ header: {exc}") from exc
    parts = [fixed]
    remark = (command.remark or "").encode("utf-8")
    parts += [struct.pack(">i", len(remark)), remark]
    ext = bytearray()
    for key, value in command.ext_fields.items():
        k, v = key.encode("utf-8"), value.encode("utf-8")
        if len(k) > 0x7FFF:
            raise FrameError(f"extFields key of {len(k)} bytes does not fit a 2-byte length")
        ext += struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
    parts += [struct.pack(">i", len(ext)), bytes(ext)]
    return b"".join(parts)


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise FrameError(f"ROCKETMQ header truncated reading {what} ({n} bytes at {self.pos})")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def text(self, length_fmt: str, what: str) -> str:
        raw = self.take(self.unpack(length_fmt, what + " length"), what)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError(f"ROCKETMQ header {what} is not UTF-8") from exc


def _decode_rocketmq_header(data: memoryview) -> RemotingCommand:
    reader = _Reader(data)
    code, language, version, opaque, flag = _ROCKETMQ_FIXED.unpack(
        reader.take(_ROCKETMQ_FIXED.size, "fixed fields"))
    remark = reader.text(">i", "remark")
    ext_reader = _Reader(reader.take(reader.unpack(">i", "extFields length"), "extFields"))
    ext: dict[str, str] = {}
    while ext_reader.pos < len(ext_reader.data):
        key = ext_reader.text(">h", "extFields key")
        ext[key] = ext_reader.text(">i", "extFields value")
    if reader.pos != len(data):
        raise FrameError(f"ROCKETMQ header has {len(data) - reader.pos} trailing bytes")
    return RemotingCommand(code=code, language=LanguageCode.parse(language), version=version,
                           opaque=opaque, flag=flag, remark=remark or None, ext_fields=ext,
                           serialize_type=SerializeType.ROCKETMQ)


bind(RemotingCommand, _decode, FrameError, _LANGUAGE_BY_NAME, LanguageCode.OTHER,
            [_LANGUAGE_NAME[language] for language in sorted(LanguageCode)], SerializeType.JSON)
