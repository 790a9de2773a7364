"""metricsPort: what each value means, and values refused with a clear error."""

from __future__ import annotations

import pytest

from lakemq.broker.config import BrokerConfig
from lakemq.common.metrics_http import metrics_port_for
from lakemq.errors import ConfigError
from lakemq.namesrv.config import NamesrvConfig


def test_metrics_port_meanings() -> None:
    assert metrics_port_for(-1, 10911) == 10913  # next to RocketMQ's ports by default
    assert metrics_port_for(-1, 0) == 0  # an ephemeral listen port gets an ephemeral metrics port
    assert metrics_port_for(0, 10911) == 0
    assert metrics_port_for(-2, 10911) is None
    assert metrics_port_for(9100, 10911) == 9100


@pytest.mark.parametrize("port", [-3, 65536])
def test_bad_metrics_port_is_refused(port: int) -> None:
    with pytest.raises(ConfigError, match="metricsPort"):
        BrokerConfig(metrics_port=port)
    with pytest.raises(ConfigError, match="metricsPort"):
        NamesrvConfig(metrics_port=port)
