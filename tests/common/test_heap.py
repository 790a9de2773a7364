"""glibc's fixed mmap threshold (lakemq.common.heap): a large buffer freed does not move the
next ones of its size into the heap. Each case runs in a fresh interpreter, whose malloc
settings are its own."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

# Two malloc(1 MiB) in turn, straight from the C library (Python's allocators stay out):
# where the second one lives says whether freeing the first raised the mmap threshold.
_PROBE = """
import ctypes, json, sys
from lakemq.common.heap import fix_mmap_threshold
fixed = fix_mmap_threshold() if sys.argv[1] == "fixed" else None

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
size = 1 << 20
libc.free(libc.malloc(size))
before = libc.mallinfo2().hblkhd
second = libc.malloc(size)
mapped = libc.mallinfo2().hblkhd - before >= size
libc.free(second)
print(json.dumps({"fixed": fixed, "mapped": mapped}))
"""


def _probe(mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_fixed_threshold_keeps_large_buffers_mapped() -> None:
    # glibc's default: freeing the first 1 MiB chunk raised the threshold, the second is heap.
    assert _probe("default") == {"fixed": None, "mapped": False}
    assert _probe("fixed") == {"fixed": True, "mapped": True}
