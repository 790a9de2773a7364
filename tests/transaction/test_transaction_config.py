"""The transaction keys of conf/broker.conf: documented there with BrokerConfig's defaults,
bound under RocketMQ's names, bad values refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakemq.broker.config import BrokerConfig
from lakemq.cli.broker_cmds import load_broker_configs
from lakemq.errors import ConfigError

CONF = Path(__file__).resolve().parents[2] / "conf" / "broker.conf"
KEYS = {
    "transactionTimeOut": "transaction_time_out",
    "transactionCheckInterval": "transaction_check_interval",
    "transactionCheckMax": "transaction_check_max",
    "endTransactionThreadPoolNums": "end_transaction_thread_pool_nums",
}


def test_shipped_conf_documents_the_transaction_defaults() -> None:
    lines = {
        line.split("=", 1)[0] for line in CONF.read_text().splitlines() if "=" in line and line[0] != "#"
    }
    assert set(KEYS) <= lines
    shipped, _, _ = load_broker_configs(str(CONF))
    defaults = BrokerConfig()
    for field in KEYS.values():
        assert getattr(shipped, field) == getattr(defaults, field), field


def test_transaction_keys_bind_and_bad_values_are_refused(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("transactionTimeOut=0\ntransactionCheckInterval=250\ntransactionCheckMax=2\n")
    broker, _, _ = load_broker_configs(str(conf))
    assert (broker.transaction_time_out, broker.transaction_check_interval, broker.transaction_check_max) == (
        0,
        250,
        2,
    )
    for bad, key in (
        ("transactionTimeOut=-1", "transactionTimeOut"),
        ("transactionCheckMax=0", "transaction_check_max"),
        ("transactionCheckInterval=0", "transaction_check_interval"),
    ):
        conf.write_text(bad + "\n")
        with pytest.raises(ConfigError, match=key):
            load_broker_configs(str(conf))
