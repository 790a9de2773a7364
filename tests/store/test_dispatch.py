"""ReputMessageService over a real CommitLog: every record dispatched once, across file ends,
listeners for queue records only, woken by puts instead of spinning."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakemq.common.message import MessageSysFlag, tags_hash_code
from lakemq.store.commit_log import CommitLog
from lakemq.store.commit_log_scan import DispatchRequest
from lakemq.store.delay_levels import SCHEDULE_TOPIC
from lakemq.store.dispatch import ReputMessageService
from lakemq.store.put_request import MessagesPut
from tests.store.store_helpers import make_msg, small_config


class Recorder:
    def __init__(self) -> None:
        self.requests: list[DispatchRequest] = []

    def dispatch(self, request: DispatchRequest) -> None:
        self.requests.append(request)


class CountingReader:
    """The CommitLog, counting how often the reput asks for its end."""

    def __init__(self, commit_log: CommitLog) -> None:
        self._cl = commit_log
        self.calls = 0

    def get_min_offset(self) -> int:
        return self._cl.get_min_offset()

    def get_max_offset(self) -> int:
        self.calls += 1
        return self._cl.get_max_offset()

    def get_data(self, offset: int) -> memoryview | None:
        return self._cl.get_data(offset)

    def roll_next_file(self, offset: int) -> int:
        return self._cl.roll_next_file(offset)


@pytest.fixture
def commit_log(tmp_path: Path) -> Iterator[CommitLog]:
    cl = CommitLog(small_config(tmp_path, mapped_file_size_commit_log=1024))
    cl.load()
    cl.start()
    yield cl
    cl.shutdown()


def test_every_record_once_across_files(commit_log: CommitLog) -> None:
    recorder = Recorder()
    arrivals: list[tuple[str, int, int, int]] = []
    reput = ReputMessageService(commit_log, [recorder], reput_from_offset=0, delay_levels=commit_log.delay_levels,
                                listeners=[lambda batch: arrivals.extend(a[:4] for a in batch)])
    offsets = []
    for i in range(40):
        flag = MessageSysFlag.TRANSACTION_PREPARED_TYPE if i == 5 else 0
        # varying sizes leave blank tails of different lengths, some only 8-11 bytes
        r = commit_log.put(MessagesPut.of(make_msg("TopicD", b"x" * (i * 7 % 50), tags=f"t{i % 2}", keys=f"k{i}",
                                            sys_flag=flag)))
        assert r.append_result is not None
        offsets.append(r.append_result.wrote_offset)
    assert len(commit_log.mapped_file_queue.mapped_files) > 3
    assert reput.do_reput() == 40
    assert reput.do_reput() == 0
    assert [r.commit_log_offset for r in recorder.requests] == offsets
    assert reput.dispatch_behind_bytes() == 0
    assert recorder.requests[3].keys == "k3" and recorder.requests[3].tags_code == tags_hash_code("t1")
    # the prepared record is dispatched (the index wants it) but wakes no consumer
    assert len(arrivals) == 39
    assert arrivals[0] == ("TopicD", 0, 1, tags_hash_code("t0"))
    assert arrivals[-1][2] == 39


def test_delayed_record_carries_delivery_time(commit_log: CommitLog) -> None:
    recorder = Recorder()
    reput = ReputMessageService(commit_log, [recorder], reput_from_offset=0, delay_levels=commit_log.delay_levels)
    r = commit_log.put(MessagesPut.of(make_msg("TopicD", b"later", delay=2)))
    assert r.append_result is not None
    reput.do_reput()
    (req,) = recorder.requests
    assert (req.topic, req.queue_id) == (SCHEDULE_TOPIC, 1)
    assert req.tags_code == r.append_result.store_timestamp + 2000  # level 2 is "2s" in the test config


def test_woken_by_puts_and_idle_without_spinning(commit_log: CommitLog) -> None:
    reader = CountingReader(commit_log)
    arrived = threading.Event()
    reput = ReputMessageService(reader, [Recorder()], reput_from_offset=0, delay_levels=None,
                                listeners=[lambda *args: arrived.set()], wait_interval_s=5.0)
    reput.start()
    try:
        time.sleep(0.3)
        assert reader.calls < 10  # idle: asleep on the event, not polling
        begin = time.monotonic()
        commit_log.put(MessagesPut.of(make_msg("TopicD", b"now")))
        reput.wakeup()
        assert arrived.wait(2.0)
        assert time.monotonic() - begin < 1.0  # well inside the 5 s timeout: the wakeup did it
    finally:
        reput.shutdown()


def test_shutdown_drains_what_was_written(commit_log: CommitLog) -> None:
    recorder = Recorder()
    reput = ReputMessageService(commit_log, [recorder], reput_from_offset=0, delay_levels=None, wait_interval_s=5.0)
    reput.start()
    for i in range(10):
        commit_log.put(MessagesPut.of(make_msg("TopicD", b"%d" % i)))
    reput.shutdown()
    assert len(recorder.requests) == 10


def test_short_blank_tail_rolls_to_next_file(commit_log: CommitLog) -> None:
    """A file may end in a blank record of only 8 bytes (size + magic); dispatch moves on."""
    first = commit_log.put(MessagesPut.of(make_msg("TopicD", b"f" * (1024 - 10 - 97))))  # leaves 10 bytes
    assert first.append_result is not None and first.append_result.wrote_bytes == 1014
    second = commit_log.put(MessagesPut.of(make_msg("TopicD", b"next")))
    assert second.append_result is not None and second.append_result.wrote_offset == 1024
    recorder = Recorder()
    reput = ReputMessageService(commit_log, [recorder], reput_from_offset=0, delay_levels=None)
    assert reput.do_reput() == 2
    assert [r.commit_log_offset for r in recorder.requests] == [0, 1024]
