"""Stored bodies back to the bytes that were sent: what the COMPRESSED sys flag and the
compression type bits (8-10, RocketMQ 4.9.4+ and 5.x clients' ``rocketmq.message.compressType``)
say. Type 0 (older clients) and 3 are zlib, 1 an LZ4 frame (lz4-java's LZ4FrameOutputStream,
read by the lz4 package), 2 a Zstandard frame (zstd-jni's ZstdOutputStream, read by
zstandard). The broker stores and delivers bodies as sent; only readers of bodies (clients,
the lake's jobs, the console) decompress.
"""

from __future__ import annotations

import zlib
from typing import Final

import lz4.frame
import zstandard

from lakemq.common.message import MessageSysFlag
from lakemq.errors import RecordError

__all__ = ["COMPRESSION_LZ4_TYPE", "COMPRESSION_ZSTD_TYPE", "MAX_DECOMPRESSED_SIZE", "compression_name",
           "decompress_body"]

# A body from a peer inflates to at most this (a record is at most 4 MiB; 256 MiB is far past
# any real ratio), so a bomb cannot make its reader allocate without bound.
MAX_DECOMPRESSED_SIZE: Final = 256 << 20
COMPRESSION_LZ4_TYPE: Final = 0x100
COMPRESSION_ZSTD_TYPE: Final = 0x200
_NAMES: Final = {0: "ZLIB", COMPRESSION_LZ4_TYPE: "LZ4", COMPRESSION_ZSTD_TYPE: "ZSTD",
                 MessageSysFlag.COMPRESSION_ZLIB_TYPE: "ZLIB"}


def compression_name(sys_flag: int) -> str | None:
    """ZLIB, LZ4 or ZSTD for a compressed body, None for a plain one."""
    if not sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        return None
    return _NAMES.get(sys_flag & MessageSysFlag.COMPRESSION_TYPE_MASK, "unknown")


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """``body`` as sent, at most MAX_DECOMPRESSED_SIZE bytes; RecordError when it does not
    decompress as its sys flag says, is cut short, or inflates past the bound."""
    if not sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        return body
    kind = sys_flag & MessageSysFlag.COMPRESSION_TYPE_MASK
    name = compression_name(sys_flag)
    limit = MAX_DECOMPRESSED_SIZE
    try:
        if kind in (0, MessageSysFlag.COMPRESSION_ZLIB_TYPE):
            inflater = zlib.decompressobj()
            out = inflater.decompress(body, limit + 1)
            complete = inflater.eof
        elif kind == COMPRESSION_LZ4_TYPE:
            lz4_reader = lz4.frame.LZ4FrameDecompressor()
            out = bytes(lz4_reader.decompress(body, max_length=limit + 1))
            complete = lz4_reader.eof
        elif kind == COMPRESSION_ZSTD_TYPE:
            # A streamed frame does not record its size, which ZstdDecompressor.decompress needs.
            with zstandard.ZstdDecompressor().stream_reader(body) as zstd_reader:
                out = zstd_reader.read(limit + 1)
            complete = True  # a cut frame raises ZstdError
        else:
            raise RecordError(f"unknown body compression type {kind >> 8} (sys flag 0x{sys_flag:x})")
    except (zlib.error, RuntimeError, zstandard.ZstdError) as exc:
        raise RecordError(f"{name} body does not decompress: {exc}") from exc
    if len(out) > limit:
        raise RecordError(f"{name} body inflates past {limit} bytes")
    if not complete:
        raise RecordError(f"{name} body is truncated")
    return out
