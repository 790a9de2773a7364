"""The console in a real browser: headless Chromium clicks through search, message detail,
consumer lag and tiering, and checks what a person sees."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.console.browser import missing, start_browser
from tests.console.console_env import GROUP, TIERED, TOPIC, ConsoleEnv

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()


def test_search_by_key_then_open_the_message(console: ConsoleEnv, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(console.url)
    browser.find_element(By.LINK_TEXT, "Messages").click()
    browser.find_element(By.ID, "topic").send_keys(TOPIC)
    browser.find_element(By.ID, "key").send_keys("order-7")
    browser.find_element(By.ID, "search").click()
    assert browser.find_element(By.ID, "result-count").text == "1"
    row = browser.find_element(By.CSS_SELECTOR, "#messages tr.msg-row")
    assert [b.text for b in row.find_elements(By.CSS_SELECTOR, ".badge.source")] == ["hot", "lake"]
    assert "order-7" in row.text and '"order": 7' in row.text
    row.find_element(By.CSS_SELECTOR, "a.msg-link").click()
    assert console.msg_ids["order-7"] in browser.find_element(By.TAG_NAME, "h1").text
    props = browser.find_element(By.ID, "properties").text
    assert "KEYS order-7" in props and "TAGS paid" in props
    assert browser.find_element(By.ID, "body").text == '{"order": 7, "amount": 70}'


def test_search_hot_only_message(console: ConsoleEnv, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(console.url + "search")
    browser.find_element(By.ID, "topic").send_keys(TOPIC)
    browser.find_element(By.ID, "key").send_keys(f"order-{TIERED + 2}")
    browser.find_element(By.ID, "search").click()
    row = browser.find_element(By.CSS_SELECTOR, "#messages tr.msg-row")
    assert [b.text for b in row.find_elements(By.CSS_SELECTOR, ".badge.source")] == ["hot"]


def test_dead_letter_trace_on_the_detail_page(console: ConsoleEnv, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(console.url + "search")
    browser.find_element(By.ID, "topic").send_keys(TOPIC)
    browser.find_element(By.ID, "key").send_keys(console.dead_keys[0])
    browser.find_element(By.ID, "search").click()
    browser.find_element(By.CSS_SELECTOR, "#messages a.msg-link").click()
    assert f"%DLQ%{GROUP}" in browser.find_element(By.ID, "trace").text


def test_trace_rows_held_by_both_tiers_say_so(console: ConsoleEnv, browser: Any) -> None:
    """The dead letters were sent before the lake run: each trace row is hot and in the lake."""
    from selenium.webdriver.common.by import By

    key = console.dead_keys[0]
    browser.get(console.url + "search")
    browser.find_element(By.ID, "topic").send_keys(TOPIC)
    browser.find_element(By.ID, "key").send_keys(key)
    browser.find_element(By.ID, "search").click()
    browser.find_element(By.CSS_SELECTOR, "#messages a.msg-link").click()
    assert [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#source .badge")] == ["hot", "lake"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#trace tr.msg-row")
    assert [r.find_element(By.CSS_SELECTOR, "td:nth-child(2)").text for r in rows] == [f"%DLQ%{GROUP}"]
    assert [b.text for b in rows[0].find_elements(By.CSS_SELECTOR, ".badge.source")] == ["hot", "lake"]
    # The dead letter's own page says the same.
    rows[0].find_element(By.CSS_SELECTOR, "a.msg-link").click()
    assert f"%DLQ%{GROUP}" in browser.find_element(By.ID, "facts").text
    assert [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#source .badge")] == ["hot", "lake"]


def test_lag_page_shows_queues_and_chart(console: ConsoleEnv, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(console.url)
    browser.find_element(By.LINK_TEXT, "Consumer lag").click()
    group_row = browser.find_element(By.XPATH, f"//table[@id='groups']//tr[td/a[text()='{GROUP}']]")
    assert group_row.find_element(By.CSS_SELECTOR, "td.lag").text == str(sum(console.lags))
    group_row.find_element(By.LINK_TEXT, GROUP).click()
    assert browser.find_element(By.ID, "total-lag").text == str(sum(console.lags))
    lags = [int(td.text) for td in browser.find_elements(By.CSS_SELECTOR, "#queues td.lag")]
    assert sorted(lags) == sorted(console.lags)
    for _ in range(20):  # two samples make a line; the page is rendered per request
        if browser.find_elements(By.CSS_SELECTOR, "#lag-chart svg polyline"):
            break
        browser.refresh()
    assert browser.find_element(By.CSS_SELECTOR, "#lag-chart svg").is_displayed()
    line = browser.find_element(By.CSS_SELECTOR, "#lag-chart svg polyline[data-series='total lag']")
    assert len(line.get_attribute("points").split()) >= 2  # a flat line: the lag stood still


def test_tiering_page_shows_segments_and_versions(console: ConsoleEnv, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(console.url)
    browser.find_element(By.LINK_TEXT, "Tiering").click()
    section = browser.find_element(By.CSS_SELECTOR, "section[data-broker='broker-a']")
    done = int(section.find_element(By.CSS_SELECTOR, ".num.committed").text) + \
        int(section.find_element(By.CSS_SELECTOR, ".num.verified").text)
    assert done >= 1
    states = [b.text for b in section.find_elements(By.CSS_SELECTOR, "table.segments .badge")]
    assert set(states) <= {"sealed", "committed", "verified", "in lake only"} and states
    assert int(browser.find_element(By.ID, "version-count").text) >= 1
    assert browser.find_elements(By.CSS_SELECTOR, "#delta-chart svg rect.bar")


def test_cluster_cards_count_what_the_lists_show(console: ConsoleEnv, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(console.url)
    topics = int(browser.find_element(By.ID, "topic-count").text)
    system_topics = int(browser.find_element(By.ID, "system-topic-count").text.split()[0].lstrip("+"))
    groups = int(browser.find_element(By.ID, "group-count").text)
    system_groups = int(browser.find_element(By.ID, "system-group-count").text.split()[0].lstrip("+"))
    assert system_topics > 0 and system_groups > 0  # TBW102, the broker's own, TOOLS_CONSUMER, ...
    browser.find_element(By.ID, "topic-count").click()  # the card opens the list it counts
    assert int(browser.find_element(By.ID, "topic-total").text) == topics
    browser.get(console.url + "topics?system=1")
    assert int(browser.find_element(By.ID, "topic-total").text.replace(",", "")) == topics + system_topics
    browser.get(console.url)
    browser.find_element(By.ID, "group-count").click()
    assert int(browser.find_element(By.ID, "group-total").text) == groups
    assert len(browser.find_elements(By.CSS_SELECTOR, "#groups tbody tr")) == groups


def test_consumer_lag_hides_system_groups_until_asked(console: ConsoleEnv, browser: Any) -> None:
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def names() -> set[str]:
        # Read in one go, again if the table was replaced meanwhile (the filter's page loading).
        for _ in range(50):
            try:
                return {a.text for a in browser.find_elements(By.CSS_SELECTOR, "#groups tbody td:first-child a")}
            except StaleElementReferenceException:
                continue
        raise AssertionError("the groups table kept changing")

    browser.get(console.url + "groups")
    shown = names()
    assert GROUP in shown and "TOOLS_CONSUMER" not in shown and "CID_SYS_RMQ_TRANS" not in shown
    browser.find_element(By.ID, "system").click()
    browser.find_element(By.ID, "filter").click()
    try:
        WebDriverWait(browser, 15).until(lambda _: {GROUP, "TOOLS_CONSUMER", "CID_SYS_RMQ_TRANS"} <= names())
    except TimeoutException:
        raise AssertionError(f"system groups not shown when asked: {sorted(names())}") from None
    assert browser.find_element(By.ID, "system").is_selected()


def test_lag_chart_time_labels_clear_of_the_legend(console: ConsoleEnv, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(console.url + f"groups/{GROUP}")
    for _ in range(20):  # two samples make a line; the page is rendered per request
        if browser.find_elements(By.CSS_SELECTOR, "#lag-chart svg polyline"):
            break
        browser.refresh()
    boxes = browser.execute_script(
        "return [...document.querySelectorAll('#lag-chart svg text')].map(t => {"
        " const r = t.getBoundingClientRect();"
        " return [t.getAttribute('class'), t.textContent, r.left, r.top, r.right, r.bottom]; })")
    legends = [b for b in boxes if b[0] == "legend"]
    times = [b for b in boxes if b[0] == "axis" and ":" in b[1]]  # the HH:MM:SS labels
    assert legends and len(times) == 2, boxes

    def overlap(a: list[Any], b: list[Any]) -> bool:
        return a[2] < b[4] and b[2] < a[4] and a[3] < b[5] and b[3] < a[5]

    assert not [(t[1], g[1]) for t in times for g in legends if overlap(t, g)], boxes
