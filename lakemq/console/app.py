"""The console's aiohttp application: its Jinja2 environment, state and life cycle."""

from __future__ import annotations

from datetime import datetime

import jinja2
from aiohttp import web

from lakemq import __version__
from lakemq.console.data import ConsoleData
from lakemq.console.routes import install
from lakemq.console.settings import DATA_KEY, JINJA_KEY, SETTINGS_KEY, ConsoleSettings
from lakemq.tiering.lake_fs import LakeLocation

__all__ = ["create_app"]


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
    install(app)
    return app
