"""The console's aiohttp application: settings, Jinja2 environment, life cycle."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

import jinja2
from aiohttp import web

from lakemq import __version__
from lakemq.console.data import ConsoleData
from lakemq.tiering.lake_fs import LakeLocation

__all__ = ["DATA_KEY", "JINJA_KEY", "SETTINGS_KEY", "ConsoleSettings", "create_app"]


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


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds") if ms else ""


def _preview(body: bytes, limit: int = 4096) -> tuple[str, str]:
    """("text", decoded) for UTF-8 bodies, else ("hex", a hex dump), cut at ``limit`` bytes."""
    try:
        return "text", body.decode("utf-8")[:limit]
    except UnicodeDecodeError:
        chunk = body[:limit]
        lines = (f"{i:08x}  {chunk[i:i + 16].hex(' ')}" for i in range(0, len(chunk), 16))
        return "hex", "\n".join(lines)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("lakemq.console", "templates"),
                             autoescape=jinja2.select_autoescape(["html"]), enable_async=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = _when
    env.globals["preview"] = _preview
    env.globals["version"] = __version__
    return env


def create_app(settings: ConsoleSettings) -> web.Application:
    from lakemq.console import routes

    app = web.Application()
    app[SETTINGS_KEY] = settings
    app[JINJA_KEY] = _environment()
    lake = LakeLocation.of(settings.lake_uri, dict(settings.storage_options)) if settings.lake_uri else None
    app[DATA_KEY] = ConsoleData(settings.namesrv_addr, lake, store_dirs=dict(settings.store_dirs),
                                sample_interval_s=settings.sample_interval_s)

    async def start(app: web.Application) -> None:
        await app[DATA_KEY].start()

    async def stop(app: web.Application) -> None:
        await app[DATA_KEY].close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    routes.install(app)
    return app
