"""broker.conf as every command reads it: the broker, ``tier``, ``reindex``, the sweeps and the DAGs.

One file serves the broker and the lake jobs, so each of them reads it the same way: RocketMQ's
spellings (``brokerIP1``) renamed, a key no part owns refused, and every part bound once so
that a bad value (``flushDiskType=ASYNC``) fails the job as it would fail the broker's start,
instead of being ignored by a job that happens not to use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lakemq.broker.config import BrokerConfig, apply_key_aliases
from lakemq.broker.ha.config import HaConfig
from lakemq.common.config import bind, check_unknown_keys, read_properties
from lakemq.errors import ConfigError
from lakemq.store.config import StoreConfig
from lakemq.tiering.config import LAKE_JOB_CONFIGS

__all__ = ["BROKER_CONF_PARTS", "read_broker_conf"]

# Every dataclass a broker.conf key may belong to.
BROKER_CONF_PARTS: tuple[type, ...] = (BrokerConfig, StoreConfig, HaConfig, *LAKE_JOB_CONFIGS)


def read_broker_conf(path: str | Path | None, overrides: Mapping[str, object] | None = None) -> dict[str, str]:
    """The properties of broker.conf ``path`` (none without it) with ``overrides`` (camelCase
    keys, e.g. a DAG's ``conf``) on top, checked: ConfigError names an unknown key or a bad value."""
    props = read_properties(path) if path else {}
    props.update({str(k): str(v) for k, v in (overrides or {}).items()})
    props = apply_key_aliases(props)
    try:
        check_unknown_keys(props, BROKER_CONF_PARTS)
        for part in BROKER_CONF_PARTS:
            bind(part, props)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (in {path})" if path else str(exc)) from exc
    return props
