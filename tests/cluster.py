"""The tests' name for :mod:`lakemq.launcher` (real NameServer and broker processes on loopback),
and ``lakemq tier run`` as a subprocess over one of their stores."""

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from lakemq.launcher import SMALL_STORE, Cluster, ServerProcess, lakemq_command, spawn, start_cluster

__all__ = ["SMALL_STORE", "Cluster", "ServerProcess", "cold_read_broker_conf", "lakemq_command", "spawn",
           "start_cluster", "tier_run_args", "tier_run_process", "write_tier_conf"]


def cold_read_broker_conf(lake: Path, **extra: str) -> dict[str, str]:
    """A broker that reads its lake (``lakeUri``) below the hot tier, on 64 KiB CommitLog files
    that its clean-up deletes as soon as they are sealed and tiered (any hour, no reserve)."""
    return {
        "mappedFileSizeCommitLog": str(64 << 10),
        "fileReservedTime": "0",
        "deleteWhen": ";".join(f"{h:02d}" for h in range(24)),
        "cleanResourceInterval": "300",
        "lakeUri": str(lake),
        **extra,
    }


def write_tier_conf(root: Path, store: Path, broker: str, broker_conf: Mapping[str, str] | None = None) -> Path:
    """ROOT/tier.conf for a ``lakemq tier run`` over STORE that seals idle files at once, with
    the broker's keys ``broker_conf`` (its ``lakeUri`` and ``fileReservedTime`` decide retention)."""
    conf = root / "tier.conf"
    keys = {"storePathRootDir": str(store), "brokerName": broker, "tierSealIdleMs": "1", **(broker_conf or {})}
    conf.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
    return conf


def tier_run_args(conf: Path, lake: Path, *options: str) -> list[str]:
    """The arguments of one ``lakemq tier run`` (Spark local[1], no maintain) of CONF into LAKE."""
    return ["tier", "run", "-c", str(conf), "--lake", str(lake), "--master", "local[1]", "--no-maintain", *options]


def tier_run_process(root: Path, store: Path, lake: Path, broker: str, *options: str,
                     env: Mapping[str, str] | None = None,
                     broker_conf: Mapping[str, str] | None = None,
                     timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """One ``lakemq tier run`` in a process of its own over STORE into LAKE (write_tier_conf);
    its logs go to ROOT/tier-logs."""
    conf = write_tier_conf(root, store, broker, broker_conf)
    run_env = {**(os.environ if env is None else env), "LAKEMQ_LOG_DIR": str(root / "tier-logs")}
    return subprocess.run(lakemq_command(*tier_run_args(conf, lake, *options)),
                          env=run_env, capture_output=True, text=True, timeout=timeout, check=False)
