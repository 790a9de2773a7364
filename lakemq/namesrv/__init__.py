"""The name server: broker registration and expiry, topic routes, cluster info, KV config."""

from lakemq.namesrv.config import NamesrvConfig, load_namesrv_config
from lakemq.namesrv.controller import NamesrvController, run_namesrv
from lakemq.namesrv.kv_config import KVConfigManager
from lakemq.namesrv.route_info import RouteInfoManager

__all__ = [
           "KVConfigManager",
           "NamesrvConfig",
           "NamesrvController",
           "RouteInfoManager",
           "load_namesrv_config",
           "run_namesrv",
]
