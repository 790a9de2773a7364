"""GET_BROKER_RUNTIME_INFO's table: a running broker's store, pools, held pulls and
replication, under RocketMQ's key names (what mqadmin brokerStatus and the console show)."""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING

from lakemq import __version__
from lakemq.common.record import STORE_TIMESTAMP_POS

if TYPE_CHECKING:
    from lakemq.broker.broker_controller import BrokerController

__all__ = ["disk_used_ratio", "runtime_info"]

FORCED_DELETIONS_SHOWN = 5  # the newest forced deletions in the table (one line each)


def runtime_info(broker: BrokerController) -> dict[str, str]:
    """The table of a started ``broker``, read now (every value as text)."""
    store = broker.store
    assert store is not None
    send_pool, pull_pool = broker.send_pool, broker.pull_pool
    now = int(time.time() * 1000)
    info = {
        "brokerVersionDesc": f"lakemq {__version__}",
        "bootTimestamp": broker.boot_timestamp,
        "runtime": f"{(now - broker.boot_timestamp) // 1000} s",
        "commitLogMinOffset": store.get_min_phy_offset(),
        "commitLogMaxOffset": store.get_max_phy_offset(),
        "dispatchBehindBytes": store.dispatch_behind_bytes(),
        "diskUsedRatio": f"{store.health.disk_used_ratio:.1f}",
        # Why sends are refused now (disk full, dispatch failing or behind); empty: taken.
        "putRefusal": refusal[1].remark if (refusal := store.health.refusal) else "",
        "dispatchFailures": store.health.dispatch_failures,
        # CommitLog files deleted before fileReservedTime, what they held, and the newest few.
        "forcedDeletedFiles": (clean := store.clean_service).deleted_files["forced"],
        "forcedDeletedMessages": sum(clean.forced_messages_deleted.values()),
        "unconsumedMessagesDeleted": sum(clean.unconsumed_messages_deleted.values()),
        "forcedDeletions": "\n".join(d.summary() for d in list(clean.forced_deletions)[-FORCED_DELETIONS_SHOWN:]),
        "sendThreadPoolQueueSize": send_pool.queue_size,
        "sendThreadPoolQueueCapacity": broker.broker_config.send_thread_pool_queue_capacity,
        "pullThreadPoolQueueSize": pull_pool.queue_size,
        "pullThreadPoolQueueCapacity": broker.broker_config.pull_thread_pool_queue_capacity,
        "sendRejectedTimes": send_pool.rejected,
        "heldPullRequests": broker.hold_service.held_count if broker.hold_service else 0,
        "brokerAddr": broker.broker_addr,
        "storePathRootDir": broker.store_config.store_path_root_dir,
        "brokerRole": broker.role.name,
        "brokerId": broker.broker_config.broker_id,
        "haServerAddr": broker.ha_server_addr,
        "earliestMessageTimeStamp": store.commit_log.pickup_store_timestamp(
            store.get_min_phy_offset(), STORE_TIMESTAMP_POS + 8),
        "commitLogDiskRatio": f"{disk_used_ratio(broker.store_config.store_path_root_dir):.4f}",
        "pageCacheLockTimeMills": store.commit_log.lock_time_ms(),
        "sendThreadPoolQueueHeadWaitTimeMills": send_pool.head_wait_ms(),
        "pullThreadPoolQueueHeadWaitTimeMills": pull_pool.head_wait_ms(),
        **broker.runtime_stats.info(),
    }
    replication, ha_client = broker.replication, broker.ha_client
    if broker.role.is_master:
        links = replication.snapshot()
        info["haConnectedSlaves"] = len(links)
        # RocketMQ's slaveFallBehindMuch: the max offset less the furthest slave acknowledgement.
        info["slaveFallBehindBytes"] = max(0, store.get_max_phy_offset() - replication.acked_offset)
        for i, (link, lag_bytes, lag_seconds) in enumerate(links):
            info[f"haSlave{i}Addr"] = link.addr
            info[f"haSlave{i}AckOffset"] = link.ack_offset
            info[f"haSlave{i}LagBytes"] = lag_bytes
            info[f"haSlave{i}LagSeconds"] = f"{lag_seconds:.3f}"
    elif ha_client is not None:
        info["haMasterAddress"] = ha_client.master_address
        info["haConnected"] = str(ha_client.connected).lower()
        info["masterAddr"] = (broker.slave_sync.master_addr if broker.slave_sync else None) or ""
    return {k: str(v) for k, v in info.items()}


def disk_used_ratio(path: str) -> float:
    """Used share of the store's disk, as RocketMQ's commitLogDiskRatio (0 when unknown)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return 0.0
    return (usage.total - usage.free) / usage.total if usage.total else 0.0
