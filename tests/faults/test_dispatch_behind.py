"""Dispatch that cannot keep up: puts are refused while the CommitLog's end is more than
``maxDispatchBehindBytes`` ahead of what the ConsumeQueues hold (an acknowledged message that no
one can read yet is what the refusal prevents piling up), and taken again once dispatch has
caught up; every message acknowledged before becomes readable."""

from __future__ import annotations

from pathlib import Path

from lakemq.store.config import StoreConfig
from lakemq.store.get_results import GetMessageStatus
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from lakemq.store.results import PutMessageStatus
from tests.store.store_helpers import make_msg, wait_dispatched

TOPIC = "DispatchBehind"
LIMIT = 64 * 1024


def test_puts_are_refused_while_dispatch_is_too_far_behind(tmp_path: Path) -> None:
    store = MessageStore(StoreConfig(
        store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1 << 20,
        message_index_enable=False, warm_mapped_file_ahead=0, max_dispatch_behind_bytes=LIMIT,
        clean_resource_interval=3_600_000))  # the test checks health itself
    assert store.load()
    store.start()
    try:
        acked = 0
        # Holding the reput's pass lock stalls dispatch as a dispatcher that cannot keep up would.
        with store.reput._lock:  # the one way to stall a real reput pass
            while store.dispatch_behind_bytes() <= LIMIT:
                assert store.put(MessagesPut.of(make_msg(TOPIC, b"x" * 1024))).is_ok
                acked += 1
            store.health.check()  # the clean service does this about every 100 ms
            refused = store.put(MessagesPut.of(make_msg(TOPIC, b"refused")))
            assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            assert f"dispatch is more than {LIMIT} bytes behind" in refused.remark
            assert store.health.refused_puts["dispatch_behind"] == 1
            assert store.get_max_offset_in_queue(TOPIC, 0) < acked
        wait_dispatched(store)
        store.health.check()
        assert store.health.refusal is None
        assert store.put(MessagesPut.of(make_msg(TOPIC, b"after"))).is_ok
        wait_dispatched(store)
        assert store.get_max_offset_in_queue(TOPIC, 0) == acked + 1  # every acked one, none refused
        got = store.get_message("g", TOPIC, 0, acked, 32)
        assert got.status is GetMessageStatus.FOUND
    finally:
        store.shutdown()
