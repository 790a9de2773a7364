"""The servers' log hygiene: client text is escaped, floods are rate limited."""

from __future__ import annotations

import logging
import sys

from lakemq.common.logs import EscapingFormatter, LogLimiter, escape_control


def _record(msg: str, *args: object, exc_info: object = None) -> logging.LogRecord:
    return logging.LogRecord("t", logging.WARNING, __file__, 1, msg, args, exc_info)  # type: ignore[arg-type]


def test_a_message_with_control_characters_stays_one_line() -> None:
    fmt = EscapingFormatter("%(levelname)s %(message)s")
    topic = "T\x00\x1b[31m\n2026-01-01 ERROR forged\r\tend\x7f\u2028"
    line = fmt.format(_record("the topic[%s] is invalid", topic))
    assert "\n" not in line and "\x1b" not in line and "\x00" not in line and "\u2028" not in line
    assert line == ("WARNING the topic[T\\x00\\x1b[31m\\n2026-01-01 ERROR forged\\r\\tend\\x7f\\u2028] "
                    "is invalid")
    assert escape_control("plain ascii, ünïcode") == "plain ascii, ünïcode"


def test_a_traceback_keeps_its_lines_and_loses_other_controls() -> None:
    fmt = EscapingFormatter("%(message)s")
    try:
        raise ValueError("bad \x1b[2J value")
    except ValueError:
        text = fmt.format(_record("failed", exc_info=sys.exc_info()))
    assert text.startswith("failed\nTraceback")
    assert "\x1b" not in text and "bad \\x1b[2J value" in text


def test_limiter_lets_a_burst_through_then_counts_what_it_held_back(caplog) -> None:  # type: ignore[no-untyped-def]
    now = [0.0]
    limiter = LogLimiter(burst=3, period_s=10.0, clock=lambda: now[0])
    log = logging.getLogger("lakemq.test.limiter")
    with caplog.at_level(logging.INFO, logger="lakemq.test.limiter"):
        passed = [limiter.log(log, logging.WARNING, "bad request %d", i) for i in range(10)]
        assert passed == [True] * 3 + [False] * 7
        now[0] = 10.5
        assert limiter.log(log, logging.WARNING, "bad request %d", 10)
    messages = [r.getMessage() for r in caplog.records]
    assert messages[:3] == ["bad request 0", "bad request 1", "bad request 2"]
    assert messages[3] == "bad request 10 (7 more like this not logged in the previous 10 s)"
    assert not limiter.log(log, logging.DEBUG, "below the level")  # filtered records spend no budget
