"""The checksum that ties lake rows to the CommitLog records they came from.

Per record: ``commitlog_offset * φ64 XOR crc32c(body)``; per segment: the sum of those,
modulo 2**64. A sum does not depend on row order (Spark writes rows in any order and
files), yet a missing, duplicated, moved or altered row changes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import crc32c
import numpy as np

__all__ = ["GOLDEN", "body_crc32c", "combine", "crc32c_slices", "digest_of"]

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def body_crc32c(bodies: Iterable[bytes | memoryview | None]) -> np.ndarray:
    return np.fromiter((crc32c.crc32c(b) if b is not None else 0 for b in bodies), dtype=np.uint64)


def crc32c_slices(buf: memoryview, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CRC32C of ``buf[s:e]`` for each (s, e), read in place (chained maps: the cheapest per-slice
    loop CPython has)."""
    slices = map(slice, starts.tolist(), ends.tolist())
    return np.fromiter(map(crc32c.crc32c, map(buf.__getitem__, slices)), dtype=np.uint64, count=len(starts))


def digest_of(offsets: np.ndarray | Sequence[int], crcs: np.ndarray) -> int:
    """The digest of rows with these CommitLog offsets and body CRC32Cs."""
    offs = np.asarray(offsets, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        return int(((offs * GOLDEN) ^ crcs.astype(np.uint64)).sum(dtype=np.uint64))


def combine(digests: Iterable[int]) -> int:
    """The digest of a union of disjoint row sets."""
    return sum(digests) % (1 << 64)
