"""What mqadmin's getBrokerConfig / updateBrokerConfig and clusterList / brokerStatus read,
below the wire (tests/compat/test_mqadmin.py runs mqadmin itself)."""

from __future__ import annotations

import dataclasses

import pytest

from lakemq.broker.config import BrokerConfig, apply_key_aliases
from lakemq.broker.processor.broker_config_processor import BrokerConfigProcessor, config_properties
from lakemq.broker.runtime_stats import RuntimeStats
from lakemq.common.codes import RequestCode
from lakemq.common.config import bind
from lakemq.errors import BrokerError
from lakemq.remoting.codec import RemotingCommand
from lakemq.store.config import FlushDiskType, StoreConfig


def test_broker_config_text_is_a_loadable_broker_conf() -> None:
    broker = BrokerConfig(broker_name="b-1", namesrv_addr=("127.0.0.1:1", "127.0.0.2:2"), transaction_check_max=3)
    store = StoreConfig(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    props = config_properties(broker, store)
    assert props["brokerIP1"] == "127.0.0.1" and props["namesrvAddr"] == "127.0.0.1:1;127.0.0.2:2"
    assert props["flushDiskType"] == "SYNC_FLUSH" and props["autoCreateTopicEnable"] == "true"
    # What getBrokerConfig prints, read back as broker.conf, is the same configuration.
    assert bind(BrokerConfig, apply_key_aliases(props)) == broker
    assert bind(StoreConfig, props) == store


def test_update_changes_runtime_keys_only() -> None:
    applied: list[BrokerConfig] = []
    current = BrokerConfig()
    processor = BrokerConfigProcessor(lambda: (applied[-1] if applied else current,), applied.append)
    updated = processor._with(current, {"transactionCheckMax": "7", "transactionTimeOut": "2500"})
    assert (updated.transaction_check_max, updated.transaction_time_out) == (7, 2500)
    assert dataclasses.replace(updated, transaction_check_max=15, transaction_time_out=6000) == current
    with pytest.raises(BrokerError, match="transaction_check_max must be > 0"):
        processor._with(current, {"transactionCheckMax": "0"})  # out of range: nothing changes
    with pytest.raises(BrokerError, match="bad value"):
        processor._with(current, {"transactionCheckInterval": "soon"})


def test_update_that_is_not_utf8_is_refused_with_a_reason() -> None:
    current = BrokerConfig()
    processor = BrokerConfigProcessor(lambda: (current,), lambda _: None)
    update = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, {}, body=b"transactionCheckMax=\x86\xff")
    with pytest.raises(BrokerError, match="not UTF-8"):
        processor.process_request(None, update)  # type: ignore[arg-type]


def test_runtime_stats_rates_and_totals() -> None:
    puts = [0]
    stats = RuntimeStats(lambda: puts[0], lambda: puts[0] // 2, interval_s=0.01)
    assert stats.info()["putTps"] == "0.00 0.00 0.00"
    stats.sample()
    puts[0] = 100
    stats._samples[-1] = (stats._samples[-1][0] - 1.0, 0, 0)  # the first sample a second ago
    stats.sample()
    info = stats.info()
    put_tps = [float(x) for x in info["putTps"].split()]
    assert len(put_tps) == 3 and all(95 < r < 105 for r in put_tps)
    assert info["msgPutTotalTodayNow"] == "100" and info["msgGetTotalTodayNow"] == "50"
