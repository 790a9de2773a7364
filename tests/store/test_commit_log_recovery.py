from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from lakemq.common.record import BODY_POS, iter_records
from lakemq.store.commit_log import CommitLog
from lakemq.store.commit_log_scan import DispatchRequest
from lakemq.store.put_request import MessagesPut
from tests.store.store_helpers import make_message

Open = Callable[..., CommitLog]
SMALL = {"mapped_file_size_commit_log": 8192, "max_message_size": 4096}


def _fill(open_commit_log: Open, n: int = 30) -> tuple[list[tuple[int, int]], int]:
    cl = open_commit_log(**SMALL)
    cl.recover_normally()
    cl.start()
    spans = []
    for i in range(n):
        ar = cl.put(MessagesPut.of(make_message(body=bytes([i % 251]) * (300 + i), KEYS=f"k{i}"))).append_result
        assert ar is not None
        spans.append((ar.wrote_offset, ar.wrote_bytes))
    end = cl.get_max_offset()
    cl.shutdown()
    return spans, end


def _last_file(cl: CommitLog) -> str:
    return str(cl.mapped_file_queue.mapped_files[-1].path)


def _assert_all_readable(cl: CommitLog, spans: list[tuple[int, int]]) -> None:
    for offset, size in spans:
        raw = cl.get_message(offset, size)
        assert raw is not None
        assert len(list(iter_records(raw, check_crc=True))) == 1


@pytest.mark.parametrize("damage", ["garbage", "half_record", "flipped_crc"])
def test_corrupted_tail_is_cut_and_nothing_before_lost(open_commit_log: Open, damage: str) -> None:
    spans, end = _fill(open_commit_log)
    path = open_commit_log(**SMALL).mapped_file_queue.mapped_files[-1].path
    last_off, last_size = spans[-1]
    file_start = int(path.name)
    with open(path, "r+b") as f:
        if damage == "garbage":
            f.seek(end - file_start)
            f.write(b"\xda\xa3\x20\xa7" * 40)
        elif damage == "half_record":
            f.seek(last_off - file_start + last_size // 2)
            f.write(bytes(last_size - last_size // 2))
        else:
            f.seek(last_off - file_start + BODY_POS + 3)
            f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
    expected_end = end if damage == "garbage" else last_off
    cl = open_commit_log(**SMALL)
    assert cl.recover_normally() == expected_end
    assert cl.get_max_offset() == expected_end
    kept = spans if damage == "garbage" else spans[:-1]
    _assert_all_readable(cl, kept)
    data = cl.mapped_file_queue.mapped_files[-1].raw_view()
    assert bytes(data[expected_end - file_start :]).count(0) == len(data) - (expected_end - file_start)
    data.release()


def test_abnormal_recovery_replays_from_checkpoint_and_cuts_tail(open_commit_log: Open) -> None:
    spans, end = _fill(open_commit_log)
    cl = open_commit_log(**SMALL)
    with open(_last_file(cl), "r+b") as f:
        f.seek(end - int(os.path.basename(_last_file(cl))))
        f.write(b"\x00\x00\x01\x00\xda\xa3\x20\xa7partial")
    seen: list[DispatchRequest] = []
    # A checkpoint time before every record: replay from the first file.
    assert cl.recover_abnormally(0, seen.append) == end
    assert [(r.commit_log_offset, r.msg_size) for r in seen] == spans
    assert seen[5].keys == "k5" and seen[5].consume_queue_offset == 5
    # A checkpoint time after every record: replay only the last file.
    cl2 = open_commit_log(**SMALL)
    seen2: list[DispatchRequest] = []
    assert cl2.recover_abnormally(2**62, seen2.append) == end
    last_start = cl2.mapped_file_queue.mapped_files[-1].file_from_offset
    assert seen2 and seen2[0].commit_log_offset == last_start
    assert [(r.commit_log_offset, r.msg_size) for r in seen2] == [s for s in spans if s[0] >= last_start]


def test_recovery_of_empty_and_zero_size_last_file(open_commit_log: Open) -> None:
    cl = open_commit_log(**SMALL)
    assert cl.recover_normally() == 0 and cl.get_max_offset() == 0
    spans, end = _fill(open_commit_log)
    last = open_commit_log(**SMALL).mapped_file_queue.mapped_files[-1]
    next_name = last.path.parent / f"{last.file_from_offset + 8192:020d}"
    next_name.write_bytes(b"")  # a crash right after creating the next file
    cl2 = open_commit_log(**SMALL)
    assert cl2.recover_normally() == end
    _assert_all_readable(cl2, spans)
    assert not next_name.exists() or cl2.get_max_offset() == end


@pytest.mark.parametrize("blank", [8, 10, 11, 12])
def test_short_blank_record_still_leads_to_next_file(open_commit_log: Open, blank: int) -> None:
    """Regression: a file sealed with a blank record shorter than 12 bytes must not stop
    recovery (it once did, dropping every later file)."""
    config = {"mapped_file_size_commit_log": 4096, "max_message_size": 4096}
    cl = open_commit_log(**config)
    cl.recover_normally()
    cl.start()
    fixed = len(b"TopicTest") + 91
    first = cl.put(MessagesPut.of(make_message(body=b"a" * (4096 - blank - fixed)))).append_result
    second = cl.put(MessagesPut.of(make_message(body=b"b" * 50))).append_result
    assert first is not None and second is not None
    assert first.next_offset == 4096 - blank and second.wrote_offset == 4096
    end = cl.get_max_offset()
    cl.shutdown()
    for recover in ("normal", "abnormal"):
        again = open_commit_log(**config)
        seen: list[DispatchRequest] = []
        got = again.recover_normally() if recover == "normal" else again.recover_abnormally(0, seen.append)
        assert got == end
        _assert_all_readable(again, [(first.wrote_offset, first.wrote_bytes), (second.wrote_offset, second.wrote_bytes)])
        again.mapped_file_queue.shutdown()


def test_damage_in_the_middle_sets_later_files_aside(open_commit_log: Open) -> None:
    spans, _end = _fill(open_commit_log, n=60)
    cl = open_commit_log(**SMALL)
    files = [mf.path for mf in cl.mapped_file_queue.mapped_files]
    assert len(files) >= 3
    cl.mapped_file_queue.shutdown()
    damaged = files[-3]  # normal recovery walks the last three files
    start = int(damaged.name)
    index = [i for i, (o, _) in enumerate(spans) if start <= o < start + 8192][1]
    bad_offset = spans[index][0]
    with open(damaged, "r+b") as f:
        f.seek(bad_offset - start + BODY_POS + 5)
        f.write(b"\xff\xfe")
    later = {p.name: p.read_bytes() for p in files[-2:]}
    cl2 = open_commit_log(**SMALL)
    assert cl2.recover_normally() == bad_offset  # start does not fail
    _assert_all_readable(cl2, spans[:index])
    cut = cl2.config.root_dir / "commitlog.cut" / f"{bad_offset:020d}"
    assert {p.name: p.read_bytes() for p in cut.iterdir()} == later  # nothing destroyed
    assert [mf.path for mf in cl2.mapped_file_queue.mapped_files] == files[:-2]
