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

__all__ = ["COMPRESSION_LZ4_TYPE", "COMPRESSION_ZSTD_TYPE", "compression_name", "decompress_body"]

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
    """``body`` as sent; RecordError when it does not decompress as its sys flag says."""
    if not sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        return body
    kind = sys_flag & MessageSysFlag.COMPRESSION_TYPE_MASK
    try:
        if kind in (0, MessageSysFlag.COMPRESSION_ZLIB_TYPE):
            return zlib.decompress(body)
        if kind == COMPRESSION_LZ4_TYPE:
            return bytes(lz4.frame.decompress(body))
        if kind == COMPRESSION_ZSTD_TYPE:
            # A streamed frame does not record its size, which ZstdDecompressor.decompress needs.
            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(body))
    except (zlib.error, RuntimeError, zstandard.ZstdError) as exc:
        raise RecordError(f"{compression_name(sys_flag)} body does not decompress: {exc}") from exc
    raise RecordError(f"unknown body compression type {kind >> 8} (sys flag 0x{sys_flag:x})")
