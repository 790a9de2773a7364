"""The console's pages: one handler per page, each rendering one template."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from aiohttp.typedefs import Handler

from lakemq.common.timeparse import parse_millis
from lakemq.console.data import GroupRow
from lakemq.console.settings import DATA_KEY, JINJA_KEY, SETTINGS_KEY
from lakemq.console.svg import bar_chart, line_chart
from lakemq.errors import LakeMQError, RemotingError

__all__ = ["install"]

log = logging.getLogger(__name__)
PERMS = {6: "read + write", 4: "read only", 2: "write only"}
SEARCH_LIMIT = 100  # rows a search shows unless the page asks for more (?limit=)
MAX_SEARCH_LIMIT = 10_000


async def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    page = request.app[JINJA_KEY].get_template(template)
    html = await page.render_async(request=request, settings=settings, perms=PERMS, **context)
    return web.Response(text=html, content_type="text/html", status=status)


def _int(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, default))
    except ValueError as exc:
        raise LakeMQError(f"{name} must be a whole number") from exc


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Cluster and input errors become a readable page; the console keeps serving."""
    try:
        return await handler(request)
    except (TimeoutError, LakeMQError, OSError) as exc:
        log.warning("page %s failed", request.path, exc_info=True)
        unreachable = isinstance(exc, (RemotingError, OSError, asyncio.TimeoutError))
        return await render(request, "error.html", status=502 if unreachable else 400,
                            error=str(exc) or type(exc).__name__)


async def overview(request: web.Request) -> web.Response:
    data = request.app[DATA_KEY]
    brokers, counts = await asyncio.gather(data.brokers(), data.counts())
    return await render(request, "overview.html", brokers=brokers, counts=counts, lake=data.lake, nav="overview")


async def topics(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    pattern = request.query.get("q", "").strip()
    show_system = request.query.get("system") == "1"
    page = max(_int(request, "page", 1), 1)
    started = time.perf_counter()
    rows, total = await request.app[DATA_KEY].topics(pattern=pattern, page=page, per_page=settings.page_size,
                                                     show_system=show_system)
    pages = max(math.ceil(total / settings.page_size), 1)
    return await render(request, "topics.html", rows=rows, total=total, page=page, pages=pages, q=pattern,
                        system=show_system, elapsed_ms=(time.perf_counter() - started) * 1000, nav="topics")


async def topic_form(request: web.Request) -> web.Response:
    name = request.query.get("name", "")
    config = await request.app[DATA_KEY].topic_config(name) if name else None
    return await render(request, "topic_form.html", name=name, config=config or {}, existing=config is not None,
                        nav="topics")


async def topic_save(request: web.Request) -> web.Response:
    form = await request.post()
    name = str(form.get("name", "")).strip()
    try:
        queues, perm = int(str(form.get("queues", "4"))), int(str(form.get("perm", "6")))
    except ValueError as exc:
        raise LakeMQError("queues and perm must be whole numbers") from exc
    brokers = await request.app[DATA_KEY].save_topic(name, queues, perm, form.get("order") == "on")
    raise web.HTTPSeeOther("/topics?" + urlencode({"q": name, "saved": ",".join(brokers)}))


async def groups(request: web.Request) -> web.Response:
    data = request.app[DATA_KEY]
    show_system = request.query.get("system") == "1"
    names = await data.group_names(show_system=show_system)
    rows = []
    for name in names:
        try:
            rows.append(await data.group(name))
        except LakeMQError:
            rows.append(GroupRow(name, 0, []))  # no progress on any broker yet: listed, as counted
    return await render(request, "groups.html", rows=rows, system=show_system, nav="groups")


async def group_detail(request: web.Request) -> web.Response:
    data = request.app[DATA_KEY]
    name = request.match_info["group"]
    row = await data.group(name)
    history = data.sampler.lag_history(name)
    series = [("total lag", [(p.at_ms, float(p.total)) for p in history])]
    busiest = sorted(row.queues, key=lambda q: -q[3])[:4]
    series += [(q[0].split(" · ")[1], [(p.at_ms, float(p.per_queue.get(q[0], 0))) for p in history])
               for q in busiest if q[3] > 0]
    chart = line_chart(series, label=f"lag of {name} over time")
    return await render(request, "group.html", row=row, chart=chart, samples=len(history), nav="groups")


async def search(request: web.Request) -> web.Response:
    q = request.query
    topic, key = q.get("topic", "").strip(), q.get("key", "").strip()
    msg_id, unique_key = q.get("msg_id", "").strip(), q.get("unique_key", "").strip()
    begin, end = parse_millis(q.get("begin"), None), parse_millis(q.get("end"), None)
    asked = any((key, msg_id, unique_key, begin, end)) or "go" in q
    rows: list[Any] = []
    notes: list[str] = []
    more = False
    limit = _int(request, "limit", SEARCH_LIMIT)
    if not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise LakeMQError(f"limit must be within 1..{MAX_SEARCH_LIMIT}")
    if asked:
        if not (topic or msg_id or unique_key):
            raise LakeMQError("give a topic (with a key or a time range), a message id or a unique key")
        found = await request.app[DATA_KEY].search(topic=topic, key=key, msg_id=msg_id, unique_key=unique_key,
                                                   begin_ms=begin or 0, end_ms=end, limit=limit)
        rows, notes, more = found.rows, found.notes, found.more
    wider = min(limit * 10, MAX_SEARCH_LIMIT)
    return await render(request, "search.html", rows=rows, notes=notes, asked=asked, q=q, more=more, limit=limit,
                        wider_url=f"/search?{urlencode({**q, 'limit': wider})}" if more and wider > limit else "",
                        wider=wider, nav="search")


async def message(request: web.Request) -> web.Response:
    data = request.app[DATA_KEY]
    msg_id = request.query.get("id", "")
    msg = await data.message(msg_id, request.query.get("topic", ""), request.query.get("source", "hot"))
    if msg is None:
        return await render(request, "error.html", status=404,
                            error=f"message {msg_id} is in neither the hot tier nor the lake")
    return await render(request, "message.html", msg=msg, trace=await data.trace(msg), nav="search")


async def tiering(request: web.Request) -> web.Response:
    data = request.app[DATA_KEY]
    brokers, versions = await data.tiering()
    chart = bar_chart([(f"v{v.version}", float(v.rows)) for v in reversed(versions[:30])],
                      label="rows committed per Delta version")
    return await render(request, "tiering.html", brokers=brokers, versions=versions, chart=chart, lake=data.lake,
                        nav="tiering")


async def dlq(request: web.Request) -> web.Response:
    data = request.app[DATA_KEY]
    names = await data.dlq_topics()
    topic = request.query.get("topic") or (names[0] if names else "")
    rows, notes = await data.dlq_messages(topic) if topic else ([], [])
    return await render(request, "dlq.html", names=names, topic=topic, rows=rows, notes=notes,
                        resent=request.query.get("resent", ""), nav="dlq")


async def dlq_resend(request: web.Request) -> web.Response:
    form = await request.post()
    target, new_id = await request.app[DATA_KEY].resend(str(form.get("id", "")), str(form.get("topic", "")))
    raise web.HTTPSeeOther("/dlq?" + urlencode({"topic": str(form.get("topic", "")), "resent": f"{target}: {new_id}"}))


def install(app: web.Application) -> None:
    from importlib.resources import files

    app.middlewares.append(errors)
    app.router.add_get("/", overview)
    app.router.add_get("/topics", topics)
    app.router.add_get("/topics/edit", topic_form)
    app.router.add_post("/topics/edit", topic_save)
    app.router.add_get("/groups", groups)
    app.router.add_get("/groups/{group}", group_detail)
    app.router.add_get("/search", search)
    app.router.add_get("/message", message)
    app.router.add_get("/tiering", tiering)
    app.router.add_get("/dlq", dlq)
    app.router.add_post("/dlq/resend", dlq_resend)
    app.router.add_static("/static", str(files("lakemq.console") / "static"))
