"""NamesrvConfig: what ``conf/namesrv.conf`` may set (RocketMQ's camelCase keys)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lakemq.common.config import bind, check_unknown_keys, read_properties
from lakemq.remoting.codec import DEFAULT_MAX_FRAME_LENGTH
from lakemq.remoting.server import ServerConfig

__all__ = ["NamesrvConfig", "load_namesrv_config"]


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 9876
    kv_config_path: str = str(Path("~") / "namesrv" / "kvConfig.json")
    log_dir: str | None = None
    # A broker silent this long is dropped (RocketMQ: 2 minutes); brokers register every 30 s.
    broker_channel_expired_millis: int = 120_000
    scan_not_active_broker_interval: int = 10_000
    order_message_enable: bool = False
    max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH

    @property
    def kv_path(self) -> Path:
        return Path(self.kv_config_path).expanduser()

    def server_config(self) -> ServerConfig:
        return ServerConfig(self.listen_host, self.listen_port, self.max_frame_length)


def load_namesrv_config(path: str | Path | None = None, **overrides: object) -> NamesrvConfig:
    """Read a namesrv.conf (unknown keys are an error), then apply ``overrides``."""
    props = read_properties(path) if path is not None else {}
    check_unknown_keys(props, [NamesrvConfig])
    return bind(NamesrvConfig, props, **overrides)
