"""The console's settings and the keys its application state is stored under (shared by the
application and its routes)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import jinja2
from aiohttp import web

from lakemq.console.data import ConsoleData

__all__ = ["DATA_KEY", "JINJA_KEY", "SETTINGS_KEY", "ConsoleSettings"]


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    namesrv_addr: str = "127.0.0.1:9876"
    lake_uri: str | None = None
    storage_options: tuple[tuple[str, str], ...] = ()
    # broker name -> store root, for brokers whose runtime info names a directory elsewhere
    store_dirs: tuple[tuple[str, str], ...] = ()
    sample_interval_s: float = 5.0
    page_size: int = 50
    refresh_s: int = 0  # pages reload themselves every refresh_s seconds; 0: never
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))


DATA_KEY = web.AppKey("data", ConsoleData)
JINJA_KEY = web.AppKey("jinja", jinja2.Environment)
SETTINGS_KEY = web.AppKey("settings", ConsoleSettings)
