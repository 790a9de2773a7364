"""ConsumeQueue: 20-byte entries, idempotent re-dispatch, recovery, truncation, expiry, time search."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from lakemq.errors import InvalidNameError
from lakemq.store.consume_queue import BLANK_UNIT_SIZE, CQ_STORE_UNIT_SIZE, ConsumeQueue

FILE_SIZE = 10 * CQ_STORE_UNIT_SIZE  # 10 entries per file
MSG = 100  # every fake record is 100 bytes: record i sits at i * 100 and was stored at 1000 + i


def ts_of(offset: int, size: int) -> int:
    return 1000 + offset // MSG


def make_cq(root: Path, topic: str = "TopicA", queue_id: int = 0) -> ConsumeQueue:
    cq = ConsumeQueue(topic, queue_id, root, FILE_SIZE, ts_of)
    cq.load()
    cq.recover()
    return cq


def fill(cq: ConsumeQueue, start: int, count: int) -> None:
    for i in range(start, start + count):
        cq.put_message_position_info(i * MSG, MSG, i + 7, i)


def test_layout_and_reads(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 0, 25)
    assert cq.get_min_offset_in_queue() == 0
    assert cq.get_max_offset_in_queue() == 25
    assert cq.max_physic_offset == 25 * MSG
    files = sorted(p.name for p in (tmp_path / "TopicA" / "0").iterdir())
    assert files == ["00000000000000000000", "00000000000000000200", "00000000000000000400"]
    raw = (tmp_path / "TopicA" / "0" / "00000000000000000200").read_bytes()
    assert struct.unpack_from(">qiq", raw, 0) == (10 * MSG, MSG, 17)
    unit = cq.get_unit(13)
    assert unit is not None and (unit.commit_log_offset, unit.size, unit.tags_code) == (1300, MSG, 20)
    # a batch read stays inside the file holding its first entry
    assert [u.commit_log_offset for u in cq.read_units(8, 5)] == [800, 900]
    assert cq.get_unit(25) is None
    assert cq.get_unit(-1) is None


def test_redispatch_is_idempotent_and_gaps_are_blank(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 0, 5)
    fill(cq, 0, 5)  # replayed by an abnormal recovery: nothing changes
    assert cq.get_max_offset_in_queue() == 5
    cq.put_message_position_info(12 * MSG, MSG, 0, 12)  # entries 5..11 never came
    assert cq.get_max_offset_in_queue() == 13
    gap = cq.get_unit(7)
    assert gap is not None and gap.is_blank
    unit = cq.get_unit(12)
    assert unit is not None and unit.commit_log_offset == 1200


def test_queue_starting_past_zero_is_pre_blanked(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 23, 2)
    assert cq.get_min_offset_in_queue() == 23
    assert cq.get_max_offset_in_queue() == 25
    assert cq.get_unit(22) is None  # below the queue's min, even though it is on disk as blank
    assert [p.name for p in (tmp_path / "TopicA" / "0").iterdir()] == ["00000000000000000400"]


def test_recover_cuts_at_first_invalid_entry(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 0, 15)
    cq.shutdown()
    # a torn tail: entry 12 zeroed, 13 and 14 still hold data after it
    path = tmp_path / "TopicA" / "0" / "00000000000000000200"
    data = bytearray(path.read_bytes())
    data[2 * 20 : 3 * 20] = bytes(20)
    path.write_bytes(bytes(data))
    cq = make_cq(tmp_path)
    assert cq.get_max_offset_in_queue() == 12
    assert cq.max_physic_offset == 12 * MSG
    fill(cq, 12, 3)  # re-dispatch rebuilds what was cut
    assert [u.commit_log_offset for u in cq.read_units(10, 10)] == [1000, 1100, 1200, 1300, 1400]


def test_recover_finds_a_hole_behind_more_than_three_unflushed_files(tmp_path: Path) -> None:
    """A power cut kept entries 0..13 and the names of four newer files but none of their
    data: recovery cuts at 14 although the hole is behind the last three files."""
    cq = make_cq(tmp_path)
    fill(cq, 0, 55)
    cq.shutdown()
    directory = tmp_path / "TopicA" / "0"
    first_lost = directory / "00000000000000000200"
    data = bytearray(first_lost.read_bytes())
    data[4 * 20 :] = bytes(len(data) - 4 * 20)
    first_lost.write_bytes(bytes(data))
    for start in (400, 600, 800, 1000):
        (directory / f"{start:020d}").write_bytes(bytes(FILE_SIZE))
    cq = make_cq(tmp_path)
    assert cq.get_max_offset_in_queue() == 14
    assert cq.max_physic_offset == 14 * MSG
    fill(cq, 0, 55)  # the abnormal recovery's replay rebuilds every entry after the hole
    assert [u.commit_log_offset for u in cq.read_units(14, 3)] == [1400, 1500, 1600]
    assert cq.get_max_offset_in_queue() == 55


def test_truncate_dirty_logic_files(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 0, 25)
    cq.truncate_dirty_logic_files(12 * MSG + 50)  # record 12 is torn, so it goes too
    assert cq.get_max_offset_in_queue() == 12
    assert cq.max_physic_offset == 12 * MSG
    assert len(cq.mapped_file_queue.mapped_files) == 2
    cq.truncate_dirty_logic_files(10 * MSG)  # cut exactly at a file start
    assert cq.get_max_offset_in_queue() == 10
    cq.truncate_dirty_logic_files(0)
    assert cq.get_max_offset_in_queue() == 0 and cq.max_physic_offset == 0
    fill(cq, 0, 3)
    assert cq.get_max_offset_in_queue() == 3


def test_expiry_moves_min_offset_and_deletes_files(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 0, 25)
    cq.correct_min_offset(3 * MSG)
    assert cq.get_min_offset_in_queue() == 3
    assert cq.get_unit(2) is None
    assert cq.delete_expired_file(12 * MSG) == 1  # file 0 (entries 0..9) is wholly expired
    assert cq.get_min_offset_in_queue() == 12
    assert len(cq.mapped_file_queue.mapped_files) == 2
    cq.shutdown()
    cq = make_cq(tmp_path)
    cq.correct_min_offset(12 * MSG)
    assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (12, 25)


def test_expiry_moves_the_min_offset_before_it_deletes_files(tmp_path: Path, monkeypatch) -> None:
    """A reader that checks the min offset never looks for an entry in a deleted file."""
    cq = make_cq(tmp_path)
    fill(cq, 0, 25)
    seen = []
    real = cq.mapped_file_queue.delete_expired_file_by_offset
    monkeypatch.setattr(cq.mapped_file_queue, "delete_expired_file_by_offset",
                        lambda *a: seen.append(cq.get_min_offset_in_queue()) or real(*a))
    assert cq.delete_expired_file(12 * MSG) == 1
    assert seen == [12]
    cq.shutdown()


def test_offset_by_time(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 0, 25)
    assert cq.get_offset_in_queue_by_time(0) == 0
    assert cq.get_offset_in_queue_by_time(1013) == 13
    assert cq.get_offset_in_queue_by_time(1024) == 24
    assert cq.get_offset_in_queue_by_time(5000) == 25


def test_offset_at_a_commit_log_offset_counts_a_range(tmp_path: Path) -> None:
    cq = make_cq(tmp_path)
    fill(cq, 0, 25)  # entry i's record is at CommitLog offset i * MSG
    assert cq.offset_at_phy(0) == 0
    assert cq.offset_at_phy(10 * MSG) == 10 and cq.offset_at_phy(10 * MSG + 1) == 11
    assert cq.offset_at_phy(25 * MSG) == 25  # none that far: the max offset
    assert cq.offset_at_phy(20 * MSG) - cq.offset_at_phy(5 * MSG) == 15  # the messages of [5, 20) * MSG


def test_names_are_validated(tmp_path: Path) -> None:
    with pytest.raises(InvalidNameError):
        ConsumeQueue("../evil", 0, tmp_path, FILE_SIZE, ts_of)
    with pytest.raises(InvalidNameError):
        ConsumeQueue("a/b", 0, tmp_path, FILE_SIZE, ts_of)
    with pytest.raises(ValueError):
        ConsumeQueue("TopicA", -1, tmp_path, FILE_SIZE, ts_of)
    with pytest.raises(ValueError):
        ConsumeQueue("TopicA", True, tmp_path, FILE_SIZE, ts_of)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_blank_constant_matches_rocketmq() -> None:
    assert BLANK_UNIT_SIZE == 2**31 - 1


def test_store_skips_records_with_bad_names(tmp_path: Path) -> None:
    from lakemq.store.commit_log_scan import DispatchRequest
    from lakemq.store.consume_queue_store import ConsumeQueueStore

    store = ConsumeQueueStore(tmp_path, FILE_SIZE, ts_of)
    store.dispatch(DispatchRequest(msg_size=100, topic="../x", queue_id=0, commit_log_offset=0))
    store.dispatch(DispatchRequest(msg_size=100, topic="Good", queue_id=0, commit_log_offset=100))
    assert [p.name for p in tmp_path.iterdir()] == ["Good"]
    (tmp_path / "not a topic").mkdir()
    (tmp_path / "Good" / "007").mkdir()
    reloaded = ConsumeQueueStore(tmp_path, FILE_SIZE, ts_of)
    assert reloaded.load()
    assert [(cq.topic, cq.queue_id) for cq in reloaded.all()] == [("Good", 0)]
