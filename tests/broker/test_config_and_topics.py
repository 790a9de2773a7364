"""BrokerConfig binding and the topic config table (system topics, TBW102, persistence)."""

from __future__ import annotations

import json

import pytest

from lakemq.broker.config import BrokerConfig
from lakemq.broker.topic_config_manager import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    SCHEDULE_TOPIC,
    TopicConfig,
    TopicConfigManager,
)
from lakemq.cli.broker_cmds import load_broker_configs
from lakemq.common.config import bind, read_properties
from lakemq.common.constants import PermName
from lakemq.errors import ConfigError, CorruptFileError, InvalidNameError
from lakemq.tiering.config import DelaySweepConfig, TieringConfig, TransactionSweepConfig


def test_bind_from_rocketmq_keys() -> None:
    cfg = bind(
        BrokerConfig,
        {
            "brokerName": "broker-b",
            "namesrvAddr": "127.0.0.1:9876;127.0.0.1:9877",
            "autoCreateTopicEnable": "false",
            "listenPort": "0",
        },
    )
    assert cfg.broker_name == "broker-b"
    assert cfg.namesrv_addr == ("127.0.0.1:9876", "127.0.0.1:9877")
    assert cfg.auto_create_topic_enable is False
    assert cfg.broker_addr == "127.0.0.1:0"


@pytest.mark.parametrize(
    "props",
    [
        {"namesrvAddr": "nohost"},
        {"listenPort": "70000"},
        {"brokerName": "a/b"},
        {"defaultTopicQueueNums": "0"},
        {"brokerPermission": "7"},
    ],
)
def test_bad_values_are_refused(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        bind(BrokerConfig, props)


def test_system_topics_and_tbw102(tmp_path) -> None:
    mgr = TopicConfigManager(BrokerConfig(), tmp_path)
    tbw = mgr.select_topic_config(AUTO_CREATE_TOPIC_KEY_TOPIC)
    assert tbw is not None and PermName.is_inherited(tbw.perm) and tbw.write_queue_nums == 8
    assert mgr.select_topic_config(SCHEDULE_TOPIC).read_queue_nums == 18
    assert mgr.select_topic_config("DefaultCluster") is not None
    assert mgr.select_topic_config("broker-a") is not None
    off = TopicConfigManager(BrokerConfig(auto_create_topic_enable=False), tmp_path / "x")
    assert off.select_topic_config(AUTO_CREATE_TOPIC_KEY_TOPIC) is None


def test_auto_create_inherits_from_template_and_survives_restart(tmp_path) -> None:
    mgr = TopicConfigManager(BrokerConfig(), tmp_path)
    changes: list[str] = []
    mgr.on_change.append(lambda tc: changes.append(tc.topic_name))
    version = mgr.data_version.counter
    tc = mgr.create_topic_in_send_message_method("OrderTopic", AUTO_CREATE_TOPIC_KEY_TOPIC, 4)
    assert tc is not None
    assert (tc.read_queue_nums, tc.write_queue_nums) == (4, 4)
    assert tc.perm == PermName.PERM_READ | PermName.PERM_WRITE  # inherit bit dropped
    assert changes == ["OrderTopic"] and mgr.data_version.counter == version + 1
    # A producer asking for more queues than the template has gets the template's count.
    assert (
        mgr.create_topic_in_send_message_method("Wide", AUTO_CREATE_TOPIC_KEY_TOPIC, 64).write_queue_nums == 8
    )

    again = TopicConfigManager(BrokerConfig(), tmp_path)
    again.load()
    assert again.select_topic_config("OrderTopic") == tc
    assert again.data_version.counter == mgr.data_version.counter
    on_disk = json.loads((tmp_path / "topics.json").read_text())
    assert on_disk["topicConfigTable"]["OrderTopic"]["writeQueueNums"] == 4


def test_auto_create_refused_without_inheritable_template(tmp_path) -> None:
    mgr = TopicConfigManager(BrokerConfig(), tmp_path)
    mgr.update_topic_config(TopicConfig("Plain", 2, 2))
    assert mgr.create_topic_in_send_message_method("New1", "Plain", 4) is None
    assert mgr.create_topic_in_send_message_method("New2", "Missing", 4) is None
    assert mgr.select_topic_config("New1") is None
    with pytest.raises(InvalidNameError):
        mgr.create_topic_in_send_message_method("bad/name", AUTO_CREATE_TOPIC_KEY_TOPIC, 4)


def test_a_slave_learns_topics_from_its_log_until_the_master_config_comes(tmp_path) -> None:
    master, slave = TopicConfigManager(BrokerConfig(), tmp_path / "m"), TopicConfigManager(BrokerConfig(), tmp_path / "s")
    master.update_topic_config(TopicConfig("Orders", 8, 8))
    assert slave.replace_from_master(master.encode())
    master.update_topic_config(TopicConfig("Fresh", 4, 4))  # made on the master; the slave's sync is due later
    learned = slave.learn_queues([("Fresh", 0), ("Fresh", 2), ("Orders", 5), ("Orders", 9)])
    assert learned == [TopicConfig("Fresh", 3, 3), TopicConfig("Orders", 10, 10)]
    assert slave.learn_queues([("Fresh", 1)]) == []  # covered already
    on_disk = json.loads((tmp_path / "s" / "topics.json").read_text())["topicConfigTable"]
    assert on_disk["Fresh"]["readQueueNums"] == 3
    assert slave.data_version != master.data_version  # even where counters meet: the next sync takes over
    assert slave.data_version.counter == master.data_version.counter
    assert slave.replace_from_master(master.encode())
    assert slave.select_topic_config("Fresh") == TopicConfig("Fresh", 4, 4)


def test_topic_config_validation() -> None:
    with pytest.raises(InvalidNameError):
        TopicConfig("../etc")
    with pytest.raises(InvalidNameError):
        TopicConfig("T", read_queue_nums=5000)
    with pytest.raises(InvalidNameError):
        TopicConfig("T", topic_filter_type="SQL")


def test_corrupt_file_falls_back_to_backup(tmp_path) -> None:
    mgr = TopicConfigManager(BrokerConfig(), tmp_path)
    mgr.update_topic_config(TopicConfig("A", 1, 1))
    mgr.update_topic_config(TopicConfig("B", 1, 1))  # the first write is now topics.json.bak
    (tmp_path / "topics.json").write_text("{not json")
    again = TopicConfigManager(BrokerConfig(), tmp_path)
    again.load()
    assert again.select_topic_config("A") is not None
    (tmp_path / "topics.json.bak").write_text("")
    with pytest.raises(CorruptFileError):
        TopicConfigManager(BrokerConfig(), tmp_path).load()


def test_one_broker_conf_serves_the_broker_and_the_lake_jobs(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-j\nlakeUri=/lake\ntierSealIdleMs=5000\ndelaySweepBatch=8\n"
                    "transactionSweepBatch=16\n")
    broker, _, _ = load_broker_configs(str(conf), data_dir=str(tmp_path / "store"))
    props = read_properties(conf)
    assert (broker.broker_name, broker.lake_uri) == ("broker-j", "/lake")
    assert bind(TieringConfig, props).tier_seal_idle_ms == 5000
    assert bind(DelaySweepConfig, props).delay_sweep_batch == 8
    assert bind(TransactionSweepConfig, props).transaction_sweep_batch == 16
    conf.write_text("brokerName=broker-j\ntierSealIdleMz=5000\n")
    with pytest.raises(ConfigError, match="unknown config keys: tierSealIdleMz"):
        load_broker_configs(str(conf), data_dir=str(tmp_path / "store"))
