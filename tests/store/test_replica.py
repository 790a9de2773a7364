"""A SLAVE store: puts refused, the master's CommitLog bytes appended at the same offsets
(files identical byte for byte), ConsumeQueues and IndexFiles dispatched from them, offsets
not corrected, the delay offsets taken from the master."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest

from lakemq.common.record import decode_record
from lakemq.errors import StoreError
from lakemq.store.config import BrokerRole
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut, PlainPut
from lakemq.store.results import PutMessageStatus
from tests.store.store_helpers import make_msg, open_store, wait_dispatched


def _copy(master: MessageStore, slave: MessageStore, batch: int) -> None:
    """What a master sends: its bytes from the slave's end, at most ``batch`` at a time and
    never across a file (here applied as they come; the HA client cuts at whole records)."""
    while True:
        offset = slave.get_max_phy_offset()
        data = master.get_commit_log_data(offset)
        if data is None or not len(data):
            return
        with data:
            slave.append_to_commit_log(offset, data[:batch])


def test_a_slave_holds_the_masters_commit_log_and_dispatches_it(tmp_path: Path) -> None:
    master = open_store(tmp_path / "m", mapped_file_size_commit_log=4096)
    slave = open_store(tmp_path / "s", mapped_file_size_commit_log=4096, broker_role=BrokerRole.SLAVE)
    try:
        for i in range(90):  # about 10 files, each sealed with a blank record
            assert master.put(MessagesPut.of(make_msg("TopicA", b"m-%d-" % i + b"x" * (i * 7), queue_id=i % 3,
                                               keys=f"key-{i}", tags="t"))).is_ok
        _copy(master, slave, batch=700)
        assert slave.get_max_phy_offset() == master.get_max_phy_offset()
        master.commit_log.mapped_file_queue.flush(0)
        slave.commit_log.mapped_file_queue.flush(0)
        names = sorted(p.name for p in master.config.commit_log_dir.iterdir())
        assert len(names) >= 8 and names == sorted(p.name for p in slave.config.commit_log_dir.iterdir())
        for name in names:
            assert filecmp.cmp(master.config.commit_log_dir / name, slave.config.commit_log_dir / name,
                               shallow=False), name
        wait_dispatched(slave)
        for queue_id in range(3):
            got = slave.get_message("g", "TopicA", queue_id, 0, 100)
            want = master.get_message("g", "TopicA", queue_id, 0, 100)
            assert got.status is GetMessageStatus.FOUND and got.buffers == want.buffers
        hits = slave.query_message("TopicA", "key-42", 10, 0, 2**62).messages
        assert [decode_record(h).body[:5] for h in hits] == [b"m-42-"]
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_slave_refuses_puts_and_misplaced_bytes(tmp_path: Path) -> None:
    master = open_store(tmp_path / "m", mapped_file_size_commit_log=4096)
    slave = open_store(tmp_path / "s", mapped_file_size_commit_log=4096, broker_role=BrokerRole.SLAVE)
    try:
        refused = slave.put(MessagesPut.of(make_msg("TopicA", b"local")))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "SLAVE" in refused.remark
        plain = slave.put(PlainPut("TopicA", 0, b"b", "", 0, 0, 1, "127.0.0.1:1", 0))
        assert plain.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        for i in range(3):
            master.put(MessagesPut.of(make_msg("TopicA", b"%d" % i)))
        data = master.get_commit_log_data(0)
        assert data is not None
        first = int.from_bytes(data[:4], "big")  # the first record's size: whole records only
        with pytest.raises(StoreError, match="not at a CommitLog file boundary"):
            slave.append_to_commit_log(100, data[:10])
        assert slave.append_to_commit_log(0, data[:first]) == first
        with pytest.raises(StoreError, match=f"start at 40, but this CommitLog ends at {first}"):
            slave.append_to_commit_log(40, data[40:60])
        with pytest.raises(StoreError, match="cross the end of CommitLog file"):
            slave.append_to_commit_log(first, bytes(4096))
        assert slave.get_max_phy_offset() == first  # nothing written by the refused appends
        data.release()
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_slave_keeps_consumer_offsets_it_cannot_vouch_for(tmp_path: Path) -> None:
    slave = open_store(tmp_path / "s", broker_role=BrokerRole.SLAVE)
    checking = open_store(tmp_path / "c", broker_role=BrokerRole.SLAVE, offset_check_in_slave=True)
    try:
        assert slave.get_message("g", "Nope", 0, 57, 10).next_begin_offset == 57
        assert checking.get_message("g", "Nope", 0, 57, 10).next_begin_offset == 0
    finally:
        slave.shutdown()
        checking.shutdown()


def test_a_slave_takes_the_masters_delay_offsets_and_delivers_nothing(tmp_path: Path) -> None:
    slave = open_store(tmp_path / "s", broker_role=BrokerRole.SLAVE)
    try:
        slave.schedule.replace_offsets('{"offsetTable":{1:5,2:7}}')  # fastjson's bare keys, as Java writes
        assert slave.schedule.offset_table == {1: 5, 2: 7}
        assert json.loads(slave.config.delay_offset_path.read_text())["offsetTable"] == {"1": 5, "2": 7}
        with pytest.raises(ValueError, match="not a delay offset table"):
            slave.schedule.replace_offsets("[1, 2]")
        assert slave.schedule.offset_table == {1: 5, 2: 7}
        assert slave.schedule._thread is None  # a slave's delays are delivered by its master
    finally:
        slave.shutdown()
    reopened = MessageStore(slave.config)
    assert reopened.load() and reopened.schedule.offset_table == {1: 5, 2: 7}
