"""Consumer offsets, subscription groups, client managers, tag filter, queue locks."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lakemq.broker.config import BrokerConfig
from lakemq.broker.consumer_manager import ClientChannelInfo, ConsumerGroupEvent, ConsumerManager
from lakemq.broker.consumer_offset_manager import ConsumerOffsetManager
from lakemq.broker.filter import TagMessageFilter, from_heartbeat
from lakemq.broker.producer_manager import ProducerManager
from lakemq.broker.rebalance_lock_manager import RebalanceLockManager
from lakemq.broker.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager
from lakemq.common.message import tags_hash_code
from lakemq.common.message_queue import MessageQueue
from lakemq.common.subscription import SubscriptionData
from lakemq.errors import CorruptFileError, FilterExpressionError, InvalidNameError
from lakemq.filter import parse_subscription


def test_offsets_persist_and_survive_restart(tmp_path) -> None:
    mgr = ConsumerOffsetManager(tmp_path)
    assert mgr.query_offset("g1", "T", 0) == -1
    mgr.commit_offset("127.0.0.1:1", "g1", "T", 0, 12)
    mgr.commit_offset("127.0.0.1:1", "g1", "T", 3, 7)
    mgr.commit_offset("127.0.0.1:1", "g2", "U", 0, 1)
    assert mgr.persist() is True
    assert mgr.persist() is False  # nothing changed since
    again = ConsumerOffsetManager(tmp_path)
    again.load()
    assert again.query_offsets("g1", "T") == {0: 12, 3: 7}
    assert again.which_topic_by_consumer("g1") == {"T"}
    assert again.which_group_by_topic("U") == {"g2"}
    assert json.loads((tmp_path / "consumerOffset.json").read_text())["offsetTable"]["T@g1"] == {
        "0": 12,
        "3": 7,
    }
    again.remove_topic("T")
    assert again.query_offset("g1", "T", 0) == -1


def test_offset_changes_are_what_was_committed_since_a_number(tmp_path) -> None:
    master, slave = ConsumerOffsetManager(tmp_path / "m"), ConsumerOffsetManager(tmp_path / "s")
    master.commit_offset("h", "g1", "T", 0, 5)
    master.commit_offset("h", "g2", "T", 1, 9)
    seq, everything = master.changes_since("", 0)  # an unknown epoch: the whole table
    assert everything == {"offsetTable": {"T@g1": {"0": 5}, "T@g2": {"1": 9}}}
    master.commit_offset("h", "g1", "T", 1, 3)
    later, changed = master.changes_since(master.epoch, seq)
    assert later == seq + 1 and changed == {"offsetTable": {"T@g1": {"0": 5, "1": 3}}}
    assert master.changes_since(master.epoch, later) == (later, {"offsetTable": {}})
    master.remove_group("g1")
    assert master.changes_since(master.epoch, seq)[1] == {"offsetTable": {}}
    slave.put_changes_from_master(everything)
    slave.put_changes_from_master(changed)
    assert slave.query_offsets("g1", "T") == {0: 5, 1: 3} and slave.query_offsets("g2", "T") == {1: 9}
    assert ConsumerOffsetManager(tmp_path / "m").epoch != master.epoch  # a restarted master numbers anew


def test_offset_file_that_does_not_parse_is_an_error(tmp_path) -> None:
    (tmp_path / "consumerOffset.json").write_text('{"offsetTable": {"T@g": {"x": 1}}}')
    with pytest.raises(CorruptFileError):
        ConsumerOffsetManager(tmp_path).load()


def test_subscription_groups_auto_create_and_persist(tmp_path) -> None:
    mgr = SubscriptionGroupManager(BrokerConfig(), tmp_path)
    cfg = mgr.find_subscription_group_config("cg1")
    assert cfg is not None and cfg.retry_max_times == 16 and cfg.consume_enable
    assert mgr.find_subscription_group_config("bad group") is None
    mgr.update_subscription_group_config(
        SubscriptionGroupConfig("cg2", consume_enable=False, retry_max_times=3)
    )
    again = SubscriptionGroupManager(BrokerConfig(), tmp_path)
    again.load()
    assert again.groups()["cg2"] == SubscriptionGroupConfig("cg2", consume_enable=False, retry_max_times=3)
    assert "cg1" in again.groups()
    off = SubscriptionGroupManager(BrokerConfig(auto_create_subscription_group=False), tmp_path / "o")
    assert off.find_subscription_group_config("cg3") is None


def test_subscription_parsing_and_tag_filter() -> None:
    sub = parse_subscription("T", " tagA || tagB ")
    assert sub.tags_set == {"tagA", "tagB"}
    assert sub.code_set == {tags_hash_code("tagA"), tags_hash_code("tagB")}
    f = TagMessageFilter(sub)
    assert f.is_matched_by_consume_queue(tags_hash_code("tagA"))
    assert not f.is_matched_by_consume_queue(tags_hash_code("tagC"))
    assert f.is_matched_by_consume_queue(None)
    everything = TagMessageFilter(parse_subscription("T", "*"))
    assert everything.is_matched_by_consume_queue(tags_hash_code("x"))
    assert TagMessageFilter(parse_subscription("T", "")).is_matched_by_consume_queue(123)
    with pytest.raises(FilterExpressionError):
        parse_subscription("T", "||")
    with pytest.raises(FilterExpressionError):
        parse_subscription("T", "a", "XPATH")
    parsed = from_heartbeat(SubscriptionData("T", "tagA", frozenset({"ignored"}), frozenset({1}), 5))
    assert parsed.code_set == {tags_hash_code("tagA")} and parsed.sub_version == 5


def test_consumer_manager_notifies_on_change_and_expires_silent_clients() -> None:
    events: list[tuple[ConsumerGroupEvent, str, list[object]]] = []
    mgr = ConsumerManager(lambda e, g, ch: events.append((e, g, ch)), channel_expired_timeout_ms=100)
    sub = parse_subscription("T", "*")
    a, b = object(), object()
    assert mgr.register_consumer(
        "g", ClientChannelInfo(a, "c1"), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub]
    )
    assert events[-1][0] is ConsumerGroupEvent.CHANGE and events[-1][2] == [a]
    # A repeated heartbeat with the same subscriptions changes nothing and notifies nobody.
    n = len(events)
    assert not mgr.register_consumer(
        "g", ClientChannelInfo(a, "c1"), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub]
    )
    assert len(events) == n
    mgr.register_consumer(
        "g", ClientChannelInfo(b, "c2"), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub]
    )
    assert sorted(mgr.get_consumer_group_info("g").all_client_ids()) == ["c1", "c2"]
    assert mgr.find_subscription_data("g", "T") == sub
    assert mgr.query_topic_consume_by_who("T") == {"g"}
    time.sleep(0.06)
    mgr.register_consumer(
        "g", ClientChannelInfo(b, "c2"), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub]
    )  # b stays alive
    time.sleep(0.06)
    expired = mgr.scan_not_active_channel()
    assert [c.client_id for c in expired] == ["c1"]
    assert mgr.get_consumer_group_info("g").all_client_ids() == ["c2"]
    assert events[-1] == (ConsumerGroupEvent.CHANGE, "g", [b])
    mgr.do_channel_close_event(b)
    assert mgr.get_consumer_group_info("g") is None
    assert events[-1][0] is ConsumerGroupEvent.UNREGISTER


def test_producer_manager_expiry_and_round_robin() -> None:
    mgr = ProducerManager(channel_expired_timeout_ms=50)
    a, b = object(), object()
    mgr.register_producer("pg", ClientChannelInfo(a, "p1"))
    mgr.register_producer("pg", ClientChannelInfo(b, "p2"))
    picked = {mgr.get_available_channel("pg").client_id for _ in range(4)}
    assert picked == {"p1", "p2"}
    time.sleep(0.08)
    mgr.register_producer("pg", ClientChannelInfo(b, "p2"))
    assert [c.client_id for c in mgr.scan_not_active_channel()] == ["p1"]
    assert [c.client_id for c in mgr.groups()["pg"]] == ["p2"]
    mgr.do_channel_close_event(b)
    assert mgr.get_available_channel("pg") is None and mgr.groups() == {}


def test_rebalance_locks_exclusive_until_expiry() -> None:
    mgr = RebalanceLockManager(max_live_time_ms=80)
    q0, q1 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)
    assert mgr.try_lock_batch("g", [q0, q1], "c1") == {q0, q1}
    assert mgr.try_lock_batch("g", [q0, q1], "c2") == set()
    assert mgr.try_lock_batch("g", [q0], "c1") == {q0}  # renewal
    mgr.unlock_batch("g", [q1], "c2")  # not the owner: no effect
    assert mgr.is_locked("g", q1, "c1")
    mgr.unlock_batch("g", [q1], "c1")
    assert mgr.try_lock_batch("g", [q1], "c2") == {q1}
    time.sleep(0.1)
    assert mgr.try_lock_batch("g", [q0], "c2") == {q0}  # c1's lock expired
    assert MessageQueue.from_json(q0.to_json()) == q0


def test_config_files_written_by_rocketmq_load(tmp_path: Path) -> None:
    # Apache RocketMQ 4.9 writes its offset table with fastjson's bare integer keys.
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "consumerOffset.json").write_text(
        '{\n\t"offsetTable":{\n\t\t"T1@g1":{0:8,1:7\n\t\t},\n\t\t"%RETRY%g1@g1":{0:0\n\t\t}\n\t}\n}')
    offsets = ConsumerOffsetManager(config_dir)
    offsets.load()
    assert offsets.query_offsets("g1", "T1") == {0: 8, 1: 7} and offsets.query_offset("g1", "%RETRY%g1", 0) == 0


def test_offset_table_takes_only_valid_names(tmp_path) -> None:
    mgr = ConsumerOffsetManager(tmp_path)
    for group, topic in (("../escape", "T"), ("", "T"), ("g" * 256, "T"), ("g", "a@b"), ("g", "")):
        with pytest.raises(InvalidNameError):
            mgr.commit_offset("127.0.0.1:1", group, topic, 0, 1)
    mgr.commit_offset("127.0.0.1:1", "g", "T", 0, 1)
    mgr.persist()
    assert json.loads((tmp_path / "consumerOffset.json").read_text())["offsetTable"] == {"T@g": {"0": 1}}
    # A file written by a broker that took any name: those entries are left out on load.
    (tmp_path / "consumerOffset.json").write_text(json.dumps({"offsetTable": {
        "T@g": {"0": 1}, "LegitT@../escape": {"0": 9}, "LegitT@": {"0": 9}}}))
    again = ConsumerOffsetManager(tmp_path)
    again.load()
    assert again.which_group_by_topic("LegitT") == set() and again.query_offset("g", "T", 0) == 1


def test_groups_created_at_once_by_many_threads_all_reach_the_file(tmp_path) -> None:
    """Heartbeats in the client-manage pool create groups concurrently; each persist must
    leave a whole file holding every group created so far (they once shared one tmp file)."""
    from concurrent.futures import ThreadPoolExecutor

    mgr = SubscriptionGroupManager(BrokerConfig(), tmp_path)
    with ThreadPoolExecutor(8) as pool:
        created = list(pool.map(mgr.find_subscription_group_config, [f"g{i}" for i in range(400)]))
    assert all(created)
    on_disk = json.loads((tmp_path / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    assert set(on_disk) >= {f"g{i}" for i in range(400)}
