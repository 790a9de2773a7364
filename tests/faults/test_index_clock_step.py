"""The IndexService under store times stepped back an hour, as a wall clock step makes them
(the unit-level side of test_clock_step.py): a file named after the step (files are named by
their first record's store time) still sorts after the older ones, at once (the search for a
later time-based name used to spin millisecond by millisecond in the reput thread), and a
time-window query reaches files older than one that begins before the window."""

from __future__ import annotations

import time
from pathlib import Path

from lakemq.store.commit_log_scan import DispatchRequest
from lakemq.store.index_service import IndexService

HOUR = 3_600_000


def _request(offset: int, key: str, ts: int) -> DispatchRequest:
    return DispatchRequest(msg_size=100, topic="T", commit_log_offset=offset, store_timestamp=ts, keys=key)


def test_a_step_back_keeps_file_order_and_window_queries(tmp_path: Path) -> None:
    service = IndexService(tmp_path / "index", hash_slot_num=8, index_num=4)  # 3 keys a file
    now = int(time.time() * 1000)
    before = [_request(i * 100, f"a{i}", now + i) for i in range(3)]
    for req in before:
        service.dispatch(req)
    began = time.monotonic()
    after = [_request((3 + i) * 100, f"b{i}", now - HOUR + i) for i in range(3)]
    for req in after:
        service.dispatch(req)
    took = time.monotonic() - began
    names = [f.file_name for f in service.index_files]
    print(f"injected: store times stepped back 1 h between two index files; measured: file names {names}, "
          f"the step-back file made in {took * 1000:.1f} ms")
    assert len(names) == 2 and names == sorted(names) and names[0] != names[1]
    assert took < 1.0
    for req in before:  # the newer file begins an hour before this window: the older one is still asked
        found = service.query_offset("T", req.keys, 8, now - 1, now + 10)
        assert found.phy_offsets == [req.commit_log_offset]
    for req in after:
        found = service.query_offset("T", req.keys, 8, now - HOUR - 1, now - HOUR + 10)
        assert found.phy_offsets == [req.commit_log_offset]
    service.shutdown()

    reloaded = IndexService(tmp_path / "index", hash_slot_num=8, index_num=4)
    reloaded.load(True, 0)
    assert [f.file_name for f in reloaded.index_files] == names
    reloaded.shutdown()
