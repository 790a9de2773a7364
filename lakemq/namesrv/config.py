"""NamesrvConfig: what ``conf/namesrv.conf`` may set (RocketMQ's camelCase keys)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lakemq.common.config import bind, check_unknown_keys, read_properties
from lakemq.errors import ConfigError
from lakemq.remoting.codec import DEFAULT_MAX_FRAME_LENGTH
from lakemq.remoting.server import DEFAULT_BACKLOG, ServerConfig

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
    # Connections the kernel queues before the server accepts them (RocketMQ's default).
    server_socket_backlog: int = DEFAULT_BACKLOG
    # Prometheus metrics over HTTP on listenHost (GET /metrics): -1 = listenPort + 2 (a free
    # port when listenPort is 0), 0 = a free port, -2 = off; the URL is printed at boot.
    metrics_port: int = -1

    def __post_init__(self) -> None:
        if not -2 <= self.metrics_port <= 65535:
            raise ConfigError(f"metricsPort must be -2..65535, got {self.metrics_port}")
        if self.server_socket_backlog <= 0:
            raise ConfigError(f"serverSocketBacklog must be > 0, got {self.server_socket_backlog}")

    @property
    def kv_path(self) -> Path:
        return Path(self.kv_config_path).expanduser()

    def server_config(self) -> ServerConfig:
        return ServerConfig(self.listen_host, self.listen_port, self.max_frame_length, self.server_socket_backlog)


def load_namesrv_config(path: str | Path | None = None, **overrides: object) -> NamesrvConfig:
    """Read a namesrv.conf (unknown keys are an error), then apply ``overrides``."""
    props = read_properties(path) if path is not None else {}
    check_unknown_keys(props, [NamesrvConfig])
    return bind(NamesrvConfig, props, **overrides)
