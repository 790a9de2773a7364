"""Replication keys of broker.conf (RocketMQ keeps them in MessageStoreConfig; lakemq's store
does no networking, so the keys of the HA connections are bound here). ``brokerRole``,
``slaveTimeout`` and ``haSlaveFallbehindMax`` are the store's (:class:`StoreConfig`): the
store refuses a slave's puts and owns the send acknowledgements."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from lakemq.broker.config import BrokerConfig
from lakemq.common.constants import MASTER_ID
from lakemq.errors import ConfigError
from lakemq.store.config import BrokerRole, StoreConfig

__all__ = ["HaConfig", "check_role"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HaConfig:
    # A master's HA listener: -1 is listenPort + 1 (what RocketMQ always uses; a free port
    # when listenPort is 0), 0 a free port. It listens on brokerIP2 (else brokerIP1).
    ha_listen_port: int = -1
    # A slave's master, host:port of its HA listener; empty: the haServerAddr the NameServer
    # answers the slave's registration with (the master registered it).
    ha_master_address: str = ""
    # Each side speaks at least this often (ms): the slave reports its offset, the master
    # sends an empty transfer.
    ha_send_heartbeat_interval: int = 5_000
    # A link silent this long (ms) is closed by either side; the slave then connects again.
    ha_housekeeping_interval: int = 20_000
    # At most this many CommitLog bytes per transfer.
    ha_transfer_batch_size: int = 32 * 1024

    def __post_init__(self) -> None:
        if not -1 <= self.ha_listen_port <= 65535:
            raise ConfigError(f"haListenPort must be -1..65535, got {self.ha_listen_port}")
        for name in ("ha_send_heartbeat_interval", "ha_housekeeping_interval", "ha_transfer_batch_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.ha_master_address:
            host, sep, port = self.ha_master_address.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"haMasterAddress {self.ha_master_address!r} is not host:port")

    def listen_port(self, broker_listen_port: int) -> int:
        if self.ha_listen_port >= 0:
            return self.ha_listen_port
        return broker_listen_port + 1 if broker_listen_port else 0


def check_role(broker: BrokerConfig, store: StoreConfig) -> BrokerConfig:
    """``broker`` made consistent with the store's role, as RocketMQ's BrokerStartup does: a
    SLAVE needs a brokerId > 0 (ConfigError), a master's brokerId is 0."""
    if store.broker_role is BrokerRole.SLAVE:
        if broker.broker_id <= MASTER_ID:
            raise ConfigError(
                f"brokerRole=SLAVE needs a brokerId > 0 (0 is the master's id), got brokerId={broker.broker_id}")
        return broker
    if broker.broker_id != MASTER_ID:
        log.warning("brokerRole=%s: brokerId %d becomes %d (a master's id)", store.broker_role.name,
                    broker.broker_id, MASTER_ID)
        return dataclasses.replace(broker, broker_id=MASTER_ID)
    return broker
