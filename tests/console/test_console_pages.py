"""The console's pages over HTTP against a real cluster, lake and console process."""

from __future__ import annotations

import html
import re
import time

from tests.console.console_env import DEAD, GROUP, HOT_ONLY, TIERED, TOPIC, ConsoleEnv


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_overview_lists_the_broker(console: ConsoleEnv) -> None:
    status, page = console.get("/")
    assert status == 200
    assert "broker-a" in page and console.cluster.broker_addr("broker-a") in page
    assert re.search(r'id="broker-count">1<', page)


def test_search_by_key_marks_hot_and_lake_rows(console: ConsoleEnv) -> None:
    status, page = console.get(f"/search?topic={TOPIC}&key=order-3&go=1")
    assert status == 200, page
    assert re.search(r'id="result-count">1<', page)
    assert console.msg_ids["order-3"] in page
    assert ">hot<" in page and ">lake<" in page  # tiered and still hot: both tiers hold it
    status, page = console.get(f"/search?topic={TOPIC}&key=order-{TIERED + 1}&go=1")
    assert console.msg_ids[f"order-{TIERED + 1}"] in page
    assert ">lake<" not in page.split('id="messages"')[1]  # produced after the lake run


def test_time_range_search_finds_every_message(console: ConsoleEnv) -> None:
    status, page = console.get(f"/search?topic={TOPIC}&begin=0&go=1&limit=500")
    assert status == 200, page
    assert re.search(rf'id="result-count">{TIERED + HOT_ONLY}<', page)


def test_time_range_bounds_apply_to_both_tiers(console: ConsoleEnv) -> None:
    _, page = console.get(f"/search?topic={TOPIC}&end={console.split_ms}&go=1&limit=500")
    assert re.search(rf'id="result-count">{TIERED}<', page), page
    assert re.search(rf'id="lake-count">{TIERED} in lake<', page)
    _, page = console.get(f"/search?topic={TOPIC}&begin={console.split_ms}&go=1&limit=500")
    assert re.search(rf'id="result-count">{HOT_ONLY}<', page)
    assert re.search(r'id="lake-count">0 in lake<', page)


def test_search_says_when_its_limit_cut_the_result(console: ConsoleEnv) -> None:
    status, page = console.get(f"/search?topic={TOPIC}&begin=0&go=1&limit=20")
    assert status == 200, page
    assert re.search(r'id="result-count">20<', page)
    more = page.split('id="more"')[1].split("</div>")[0]
    assert "newest 20 matches" in more and "limit=200" in html.unescape(more)
    status, page = console.get(f"/search?topic={TOPIC}&begin=0&go=1&limit={TIERED + HOT_ONLY}")
    assert re.search(rf'id="result-count">{TIERED + HOT_ONLY}<', page) and 'id="more"' not in page
    status, page = console.get(f"/search?topic={TOPIC}&key=order-3&go=1&limit=1")
    assert re.search(r'id="result-count">1<', page) and 'id="more"' not in page  # one match, nothing cut


def test_a_cut_search_keeps_the_newest_listed_oldest_first(console: ConsoleEnv) -> None:
    """The rule of ``admin message query``: the newest LIMIT matches of both tiers, oldest first."""
    def keys(limit: int) -> tuple[list[int], str]:
        status, page = console.get(f"/search?topic={TOPIC}&end={console.produced_ms}&go=1&limit={limit}")
        assert status == 200 and 'id="more"' in page, page
        table = page.split('id="messages"')[1]
        return [int(k) for k in re.findall(r"<td>order-(\d+)</td>", table)], page

    found, page = keys(HOT_ONLY)  # the hot-only messages are the newest: none of the lake's
    assert found == list(range(TIERED, TIERED + HOT_ONLY)), found
    assert re.search(r'id="lake-count">0 in lake<', page)
    found, page = keys(HOT_ONLY + 5)  # five more, held by both tiers
    assert found == list(range(TIERED - 5, TIERED + HOT_ONLY)), found
    assert re.search(r'id="lake-count">5 in lake<', page)


def test_a_unique_key_given_as_message_id_is_searched_as_one(console: ConsoleEnv) -> None:
    status, page = console.get(f"/search?topic={TOPIC}&msg_id={console.unique_keys['order-3']}&go=1")
    assert status == 200, page
    assert re.search(r'id="result-count">1<', page) and console.msg_ids["order-3"] in page
    assert "is a unique key" in html.unescape(page)


def test_message_detail_shows_properties_body_and_dead_letter_trace(console: ConsoleEnv) -> None:
    key = console.dead_keys[0]
    status, page = console.get(f"/message?id={console.msg_ids[key]}&topic={TOPIC}")
    assert status == 200, page
    text = _text(page)
    assert f'"order": {key.split("-")[1]}' in text and "KEYS" in text and key in text
    assert "UNIQ_KEY" in text and console.unique_keys[key] in text
    trace = page.split('id="trace"')[1]
    assert f"%DLQ%{GROUP}" in trace


def test_lake_only_lookup_by_message_id(console: ConsoleEnv) -> None:
    msg_id = console.msg_ids["order-5"]
    status, page = console.get(f"/message?id={msg_id}&topic={TOPIC}&source=lake")
    assert status == 200, page
    assert '"order": 5' in _text(page)
    assert re.search(r'id="source">\s*<span class="badge teal">lake<', page)


def test_lag_page_shows_per_queue_lag_and_a_chart(console: ConsoleEnv) -> None:
    status, page = console.get("/groups")
    assert status == 200
    assert GROUP in page
    deadline = time.monotonic() + 10
    while True:  # the chart needs two samples (0.5 s apart)
        status, page = console.get(f"/groups/{GROUP}")
        if "<polyline" in page or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status == 200
    lags = [int(x) for x in re.findall(r'<td class="n lag[^"]*">(\d+)</td>', page)]
    assert len(lags) == 2 and sum(lags) == int(re.search(r'id="total-lag">([\d,]+)<', page).group(1).replace(",", ""))
    assert sorted(lags) == sorted(console.lags) and sum(lags) > 0
    assert "<svg" in page and 'data-series="total lag"' in page


def test_tiering_page_shows_segments_and_delta_versions(console: ConsoleEnv) -> None:
    status, page = console.get("/tiering")
    assert status == 200, page
    section = page.split('data-broker="broker-a"')[1]
    committed = int(re.search(r'class="num committed">(\d+)<', section).group(1))
    verified = int(re.search(r'class="num verified">(\d+)<', section).group(1))
    assert committed + verified >= 1
    assert re.search(r'class="num untiered-bytes">[\d,]+<', section)  # the tail past the lake's end
    assert re.search(r'class="num untiered-messages">[\d,]+<', section)
    versions = int(re.search(r'id="version-count">(\d+)<', page).group(1))
    assert versions >= 1 and '<rect class="bar"' in page


def test_dlq_page_lists_dead_letters_and_resends_one(console: ConsoleEnv) -> None:
    status, page = console.get(f"/dlq?topic=%25DLQ%25{GROUP}")
    assert status == 200, page
    ids = re.findall(r'name="id" value="([0-9A-F]+)"', page)
    assert len(ids) == DEAD
    assert page.count(f"<td>{TOPIC}</td>") == DEAD  # the original topic of each
    status, page = console.get("/dlq/resend", "POST", {"id": ids[0], "topic": f"%DLQ%{GROUP}"})
    assert status == 200, page
    assert re.search(rf'id="resent">re-sent to {TOPIC}: [0-9A-F]+<', page)
    before = sum(console.lags)
    console.refresh_lags()
    assert sum(console.lags) == before + 1  # the re-sent letter waits for GROUP in TOPIC


def test_topic_create_and_update(console: ConsoleEnv) -> None:
    status, page = console.get("/topics/edit", "POST", {"name": "payments", "queues": "3", "perm": "6"})
    assert status == 200 and 'id="saved"' in page
    row = page.split(">payments</a>")[1].split("</tr>")[0]
    assert re.findall(r'class="n">(\d+)<', row)[:2] == ["3", "3"]
    status, page = console.get("/topics/edit", "POST", {"name": "payments", "queues": "5", "perm": "4",
                                                        "order": "on"})
    row = page.split(">payments</a>")[1].split("</tr>")[0]
    assert re.findall(r'class="n">(\d+)<', row)[:2] == ["5", "5"] and "read only" in row and "ordered" in row


def test_bad_input_is_a_readable_error(console: ConsoleEnv) -> None:
    status, page = console.get("/topics/edit", "POST", {"name": "bad topic!", "queues": "3", "perm": "6"})
    assert status == 400 and 'id="error"' in page
    status, page = console.get("/search?topic=orders&begin=yesterday&go=1")
    assert status == 400 and "neither epoch milliseconds" in html.unescape(page)


def test_unreachable_name_server_is_a_page_not_a_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.console.console_env import start_console, stop_console

    process, url = start_console("127.0.0.1:1", None, tmp_path)
    try:
        env = ConsoleEnv(None, tmp_path, url, process)  # type: ignore[arg-type]
        status, page = env.get("/")
        assert status == 502 and "127.0.0.1:1" in html.unescape(page)
        assert env.get("/static/console.css")[0] == 200  # still serving
    finally:
        stop_console(process)


def test_topics_page_shows_tps_of_live_traffic(console: ConsoleEnv) -> None:
    import asyncio
    import threading

    from lakemq.client.producer import Producer
    from lakemq.common.message import Message

    def tps_of_audit() -> str:
        page = console.get("/topics?q=audit")[1]
        return re.search(r'>audit</a>.*?class="n tps">([^<]+)<', page, re.DOTALL).group(1)

    # No traffic yet: no rate (one sample) or a zero one (an earlier page put audit in the sampler).
    assert tps_of_audit() in ("–", "0.0")

    async def traffic() -> None:
        async with Producer("console_tps_producer", namesrv_addr=console.cluster.namesrv_addr) as producer:
            for i in range(150):
                await producer.send(Message("audit", f"event {i}".encode()))
                await asyncio.sleep(0.02)

    # The rate is polled while messages flow: TPS is the difference of the last two samples.
    sender = threading.Thread(target=asyncio.run, args=(traffic(),))
    sender.start()
    rates = []
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sender.is_alive():
            time.sleep(0.4)
            rates.append(tps_of_audit())
            if rates[-1] not in ("–", "0.0"):
                break
    finally:
        sender.join()
    assert rates and float(rates[-1]) > 0, rates
