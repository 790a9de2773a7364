"""A slave started empty catches up with a master that already holds a large CommitLog
file (an empty slave starts at the beginning of the master's last file, as RocketMQ's). The
rate is printed (``-s``); 1 GiB is the ``slow`` variant, the default suite copies 96 MiB."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lakemq.common.config import bind
from lakemq.common.message import MessageExtBrokerInner
from lakemq.store.config import StoreConfig
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut
from tests.cluster import SMALL_STORE, start_cluster
from tests.ha.ha_helpers import (
    FAST_HA,
    assert_same_commit_logs,
    commit_log_dir,
    ha_errors,
    max_offset,
    slave_name,
    wait_caught_up,
)

MIB = 1 << 20


def fill_store(root: Path, file_size: int, total: int) -> int:
    """A master's store holding ``total`` bytes of 16 KiB messages, written in-process (much
    faster than sending them); returns its max offset."""
    config = bind(StoreConfig, SMALL_STORE, store_path_root_dir=str(root), mapped_file_size_commit_log=file_size)
    store = MessageStore(config)  # the store the launcher's broker opens: same file sizes
    assert store.load()
    store.start()
    try:
        body = bytes(range(256)) * 64
        i = 0
        while store.get_max_phy_offset() < total:
            batch = [MessageExtBrokerInner(topic="CatchUp", body=body, queue_id=(i + k) % 8, born_timestamp=1,
                                           born_host="127.0.0.1:1", properties={"KEYS": f"k{i + k}"})
                     for k in range(64)]
            assert store.put(MessagesPut(tuple(batch))).is_ok
            i += 64
        return store.get_max_phy_offset()
    finally:
        store.shutdown()


@pytest.mark.parametrize("file_size,total", [
    pytest.param(128 * MIB, 96 * MIB, id="96MiB"),
    pytest.param(1024 * MIB, 1000 * MIB, id="1GiB", marks=pytest.mark.slow),
])
async def test_an_empty_slave_catches_up(tmp_path: Path, file_size: int, total: int) -> None:
    end = fill_store(tmp_path / "broker-a" / "store", file_size, total)
    conf = {"mappedFileSizeCommitLog": str(file_size)}
    with start_cluster(tmp_path, brokers=()) as cluster:
        cluster.add_broker("broker-a", {**FAST_HA, **conf})
        assert await max_offset(cluster.broker_addr("broker-a"), cluster.namesrv_addr) == end
        started = time.monotonic()
        cluster.add_broker(slave_name("broker-a"), {**FAST_HA, **conf, "brokerName": "broker-a",
                                                    "brokerRole": "SLAVE", "brokerId": "1"})
        booted = time.monotonic() - started
        assert await wait_caught_up(cluster, timeout=600) == end
        elapsed = time.monotonic() - started
        print(f"\nan empty slave took {end / MIB:.0f} MiB in {elapsed:.1f} s from its start, its boot "
              f"({booted:.1f} s) included: {end / MIB / elapsed:.0f} MiB/s")
        cluster.stop_broker("broker-a")
        cluster.stop_broker(slave_name("broker-a"))
        assert_same_commit_logs(commit_log_dir(cluster, "broker-a"), commit_log_dir(cluster, slave_name("broker-a")))
        assert not ha_errors(cluster, "broker-a", slave_name("broker-a"))
