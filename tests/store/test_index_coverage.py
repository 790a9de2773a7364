"""What a key query says of the index's coverage, which the ``lakemq`` source's key reads
(lakemq.jobs.live_index) rely on: a record's keys are indexed by the time its ConsumeQueue entry
raises the max offset; ``index_whole_from`` is where this process's indexing began (None with
the index off); ``index_cut`` says the answer may lack matches."""

from __future__ import annotations

import threading
from pathlib import Path

from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from tests.store.store_helpers import make_msg, open_store, wait_dispatched

_EVERYTHING = 2**62


def test_a_message_below_the_max_offset_is_already_in_the_index(tmp_path: Path) -> None:
    store = open_store(tmp_path, max_hash_slot_num=5_000_000, max_index_num=20_000_000)
    assert store.dispatchers[0] is store.index_service  # the index first, then the ConsumeQueues
    total = 3000
    done = threading.Event()

    def produce() -> None:
        try:
            for i in range(total):
                store.put(MessagesPut.of(make_msg("TopicR", b"m", keys=f"k{i}")))
        finally:
            done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    checked = 0
    try:
        # Each round reads the max offset, then looks up the newest message below it: with the
        # index built after the ConsumeQueue, a round inside that window finds nothing.
        while not done.is_set() or checked == 0:
            newest = store.get_max_offset_in_queue("TopicR", 0) - 1
            if newest < 0:
                continue
            found = store.query_message("TopicR", f"k{newest}", 4, 0, _EVERYTHING)
            assert len(found.messages) == 1, (newest, checked)
            checked += 1
    finally:
        producer.join()
        store.shutdown()
    assert checked > 10


def test_whole_from_is_where_this_process_began_indexing(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        for i in range(5):
            store.put(MessagesPut.of(make_msg("TopicW", b"x", keys=f"k{i} shared")))
        wait_dispatched(store)
        found = store.query_message("TopicW", "k1", 8, 0, _EVERYTHING)
        assert len(found.messages) == 1 and found.index_whole_from == 0 and not found.index_cut
        end = store.get_max_phy_offset()
    finally:
        store.shutdown()
    # A restarted broker vouches only for what it dispatches itself: a previous run may have had
    # the index off or dropped keys.
    store = open_store(tmp_path)
    try:
        assert store.query_message("TopicW", "k1", 8, 0, _EVERYTHING).index_whole_from == end
    finally:
        store.shutdown()
    store = open_store(tmp_path, message_index_enable=False)
    try:
        off = store.query_message("TopicW", "k1", 8, 0, _EVERYTHING)
        assert off.messages == [] and off.index_whole_from is None
    finally:
        store.shutdown()


def test_an_answer_as_long_as_the_limit_says_it_may_be_cut(tmp_path: Path) -> None:
    store: MessageStore = open_store(tmp_path, max_msgs_num_batch=3)
    try:
        for i in range(5):
            store.put(MessagesPut.of(make_msg("TopicC", b"x", keys=f"k{i} shared" if i < 3 else f"k{i} other")))
        wait_dispatched(store)
        shared = store.query_message("TopicC", "shared", 100, 0, _EVERYTHING)
        assert len(shared.messages) == 3 and shared.index_cut  # the broker's limit, 3, reached
        other = store.query_message("TopicC", "other", 100, 0, _EVERYTHING)
        assert len(other.messages) == 2 and not other.index_cut
        asked = store.query_message("TopicC", "other", 2, 0, _EVERYTHING)
        assert len(asked.messages) == 2 and asked.index_cut  # the asked maxNum reached
    finally:
        store.shutdown()
