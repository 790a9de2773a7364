"""glibc's malloc in a long-running server: a fixed mmap threshold.

glibc serves an allocation above its mmap threshold (128 KiB at start) with a mapping of its
own, unmapped when freed. But each time such a chunk is freed it raises the threshold to that
chunk's size (up to 32 MiB), so after the first large buffers come and go, later ones of up to
that size are carved from the heap. A broker's large buffers (pull answers, batches, reads of
the store) differ in size from one to the next; carved among long-lived objects they leave
gaps that later ones do not fit, and the heap grows while the bytes in use stay flat. The
2-hour soak measured that: glibc's heap grew from 26.7 to 38.4 MB with 23-24 MB in use, about
0.2 MB a minute, until the threshold was fixed in the running broker; then it stopped growing
(BENCHMARKS.md, "Soak"). Setting the threshold explicitly (``M_MMAP_THRESHOLD``) turns that
adjustment off: large buffers are mapped and unmapped as they come and go.
"""

from __future__ import annotations

import ctypes
import logging
import platform

__all__ = ["MMAP_THRESHOLD", "fix_mmap_threshold"]

log = logging.getLogger(__name__)

MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value, kept for good
_M_MMAP_THRESHOLD = -3  # malloc.h


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process; False where the C
    library is not glibc (nothing to do) or refuses."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError as exc:
        log.warning("glibc's mmap threshold left adjustable: %s", exc)
        return False
    done = bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
    if not done:
        log.warning("glibc refused mallopt(M_MMAP_THRESHOLD, %d)", threshold)
    return done
