"""The vectorized record finder gives what the record-by-record walk gives, on clean ranges and
on every kind of damage it must hand back to the walk."""

from __future__ import annotations

import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakemq.common.record import BLANK_MAGIC_CODE, BODY_POS, MESSAGE_MAGIC_CODE, encode_host, encode_record
from lakemq.errors import CorruptSegmentError
from lakemq.tiering import walk as walk_module
from lakemq.tiering.walk import walk_records

BASE = 5 << 20


def _segment(bodies: list[bytes], base: int = BASE) -> bytearray:
    buf = bytearray()
    for i, body in enumerate(bodies):
        buf += encode_record(
            topic=b"T", queue_id=0, body=body, flag=0, properties=b"KEYS\x01k\x02", sys_flag=0,
            born_timestamp=1, born_host=encode_host("10.0.0.1:1"), store_host=encode_host("10.0.0.2:2"),
            reconsume_times=0, prepared_transaction_offset=0, queue_offset=i, physical_offset=base + len(buf),
            store_timestamp=2,
        )
    return buf


def _slow(buf: bytes, start: int, end: int, *, verify: bool, on_bad: str) -> object:
    """The walk with the vectorized path switched off."""
    saved = walk_module._chain
    walk_module._chain = lambda *a, **k: None  # type: ignore[assignment]
    try:
        return _walk(buf, start, end, verify=verify, on_bad=on_bad)
    finally:
        walk_module._chain = saved


def _walk(buf: bytes, start: int, end: int, *, verify: bool, on_bad: str) -> object:
    try:
        w = walk_records(buf, BASE, start, end, verify=verify, on_bad=on_bad)  # type: ignore[arg-type]
    except CorruptSegmentError as exc:
        return ("raise", exc.offset)
    return (w.starts.tolist(), w.stop, w.blank_at, w.corrupt)


# A body holding the magic code, and one holding a whole record with a wrong PHYSICALOFFSET.
_TRICKY = [b"x" * 40, struct.pack(">iI", 200, MESSAGE_MAGIC_CODE) * 3, bytes(_segment([b"inner"], base=7)), b""]


def _cases() -> list[tuple[str, bytes]]:
    clean = bytes(_segment(_TRICKY * 5))
    blank = clean + struct.pack(">iI", 64, BLANK_MAGIC_CODE) + bytes(56)
    flipped = bytearray(clean)
    flipped[len(_segment(_TRICKY[:2])) + BODY_POS] ^= 1  # a body byte: only the CRC can tell
    bad_size = bytearray(clean)
    bad_size[len(_segment(_TRICKY[:3])) + 3] ^= 0x40  # a record's size
    torn = clean[:-10]
    zeros = clean + bytes(300)
    return [("clean", clean), ("blank tail", blank), ("flipped body", bytes(flipped)),
            ("bad size", bytes(bad_size)), ("torn tail", torn), ("zero tail", zeros)]


@pytest.mark.parametrize(("name", "buf"), _cases(), ids=[c[0] for c in _cases()])
@pytest.mark.parametrize("verify", [False, True])
@pytest.mark.parametrize("on_bad", ["raise", "stop", "resync"])
def test_vectorized_walk_equals_the_walk(name: str, buf: bytes, verify: bool, on_bad: str) -> None:
    starts = [0, len(_segment(_TRICKY[:4]))]
    for start in starts:
        assert _walk(buf, start, len(buf), verify=verify, on_bad=on_bad) == _slow(
            buf, start, len(buf), verify=verify, on_bad=on_bad), name


def test_clean_ranges_take_the_vectorized_path() -> None:
    buf = bytes(_segment(_TRICKY * 50))
    chain = walk_module._chain(buf, BASE, 0, len(buf), True)
    assert chain is not None and len(chain.starts) == 200 and chain.stop == len(buf)
    raw = np.frombuffer(buf, dtype=np.uint8)
    layout = walk_module.record_layout(raw, chain.starts, BASE, check_crc=True)
    assert layout.ok.all() and (layout.header["queue_offset"] == np.arange(200)).all()


def test_grouped_decode_puts_each_partition_together_in_commitlog_order() -> None:
    from lakemq.jobs.decode import decode_range

    buf = bytearray()
    for i in range(60):
        buf += encode_record(
            topic=f"T{i % 3}".encode(), queue_id=0, body=b"b%d" % i, flag=0, properties=b"", sys_flag=0,
            born_timestamp=1, born_host=encode_host("10.0.0.1:1"), store_host=encode_host("10.0.0.2:2"),
            queue_offset=i, physical_offset=BASE + len(buf), store_timestamp=(i % 2) * 86_400_000 + i,
        )
    plain, _ = decode_range(bytes(buf), BASE, skip_corrupt=False)
    grouped, _ = decode_range(bytes(buf), BASE, skip_corrupt=False, grouped=True)
    assert sorted(grouped.to_pylist(), key=lambda r: r["commitlog_offset"]) == plain.to_pylist()
    keys = [(r["topic"], r["store_date"]) for r in grouped.to_pylist()]
    runs = [k for j, k in enumerate(keys) if j == 0 or keys[j - 1] != k]
    assert len(runs) == len(set(keys)) == 6  # every partition is one run
    for run in runs:
        offsets = [r["commitlog_offset"] for r in grouped.to_pylist() if (r["topic"], r["store_date"]) == run]
        assert offsets == sorted(offsets)


# Bytes from a small alphabet, so that the needles occur often and across windows' edges.
_DATA = st.lists(st.sampled_from([b"a", b"b", b"\x00", b"\xda", b"\xa3"]), max_size=40).map(b"".join)


@given(data=_DATA, subs=st.lists(st.sampled_from([b"\xda\xa3", b"ab", b"\x00\x00"]), min_size=1, max_size=3),
       bounds=st.tuples(st.integers(0, 42), st.integers(0, 42)), window=st.integers(1, 9))
def test_window_search_finds_what_bytes_find_finds(data: bytes, subs: list[bytes], bounds: tuple[int, int],
                                                   window: int) -> None:
    saved = walk_module._FIND_WINDOW
    walk_module._FIND_WINDOW = window  # small windows: every match across a window's edge
    try:
        start, end = min(bounds), min(max(bounds), len(data))
        hits = [at for at in (data.find(sub, start, end) for sub in subs) if at >= 0]
        assert walk_module._find_first(data, tuple(subs), start, end) == (min(hits) if hits else -1)
    finally:
        walk_module._FIND_WINDOW = saved


@pytest.mark.parametrize("window", [1, 2, 3, 4, 5])
def test_a_match_across_windows_is_found(window: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walk_module, "_FIND_WINDOW", window)
    for at in range(12):
        data = b"x" * at + struct.pack(">I", MESSAGE_MAGIC_CODE) + b"y" * 5
        assert walk_module._find_first(data, (walk_module._MAGIC, walk_module._BLANK), 0, len(data)) == at


_PAST_THE_FILE = """
import mmap, sys, tempfile
from lakemq.tiering.walk import walk_records
page = mmap.PAGESIZE
with tempfile.TemporaryFile() as fh:
    fh.write(bytes(3 * page))
    fh.flush()
    with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        fh.truncate(2 * page)  # the mapping's third page is past the file: reading it is SIGBUS
        for start in range(5):  # one of five alignments made mmap.find read the byte at the end
            w = walk_records(buf, 0, start, 2 * page, verify=True, on_bad="resync")
            assert w.corrupt == ((start, 2 * page),) and w.starts.size == 0, w
print("walked")
"""


def test_resync_reads_nothing_past_its_range() -> None:
    """A live CommitLog file's zero tail resynchronised to the end of the file: mmap.find of
    CPython before 3.11.5 (Debian 12's python3.11) reads the byte after its range, which killed
    `lakemq tier run` with SIGBUS/SIGSEGV at the end of a file's mapping. In a subprocess, so
    that a crash is this test's failure."""
    done = subprocess.run([sys.executable, "-c", _PAST_THE_FILE], check=False, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "walked", (done.returncode, done.stderr[-2000:])
