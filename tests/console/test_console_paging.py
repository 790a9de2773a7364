"""The topics page with thousands of topics: the first page renders fast, paging and the
filter work. The broker boots with a topics.json of 2000 topics, as if it had created them."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.cluster import start_cluster
from tests.console.console_env import ConsoleEnv, start_console, stop_console, write_topics

TOPICS = 2000


def test_thousands_of_topics_page_fast(tmp_path: Path) -> None:
    with start_cluster(tmp_path, brokers=()) as cluster:
        write_topics(tmp_path / "broker-a" / "store", TOPICS)
        cluster.add_broker("broker-a")
        process, url = start_console(cluster.namesrv_addr, None, tmp_path)
        env = ConsoleEnv(cluster, tmp_path / "lake", url, process)
        try:
            started = time.perf_counter()
            status, page = env.get("/topics")
            first_page_s = time.perf_counter() - started
            assert status == 200, page
            assert re.search(rf'id="topic-total">{TOPICS:,}<', page), re.findall(r"topic-total.{0,40}|error.{0,200}", page)
            names = re.findall(r">(bulk-\d{5})</a>", page)
            assert names == [f"bulk-{i:05d}" for i in range(50)]
            assert "page 1 of 40" in page
            assert first_page_s < 3.0, f"page 1 took {first_page_s:.2f}s"

            status, page = env.get("/topics?page=40")
            assert re.findall(r">(bulk-\d{5})</a>", page)[-1] == "bulk-01999" and 'rel="next"' not in page
            status, page = env.get("/topics?q=bulk-0123*")
            assert re.findall(r">(bulk-\d{5})</a>", page) == [f"bulk-0123{i}" for i in range(10)]
            assert "page 1 of 1" in page
        finally:
            stop_console(process)
