"""The console's charts: value axes carry true, distinct labels."""

from __future__ import annotations

import re

from lakemq.console.svg import bar_chart, line_chart


def _value_labels(svg: str) -> list[str]:
    return re.findall(r'<text class="axis" x="50" y="[\d.]+" text-anchor="end">([^<]+)</text>', svg)


def test_a_flat_zero_lag_series_is_labelled_truthfully() -> None:
    chart = line_chart([("total lag", [(1_000, 0.0), (2_000, 0.0), (3_000, 0.0)])], label="lag")
    labels = _value_labels(chart)
    assert labels == ["4", "3", "2", "1", "0"]  # was "1, 1, 0, 0, 0"
    assert len(set(labels)) == 5


def test_axis_labels_are_whole_distinct_steps_above_the_peak() -> None:
    for peak, expected in ((1, ["4", "3", "2", "1", "0"]), (10, ["20", "15", "10", "5", "0"]),
                           (37, ["40", "30", "20", "10", "0"]), (1234, ["2,000", "1,500", "1,000", "500", "0"])):
        chart = line_chart([("lag", [(0, 0.0), (1_000, float(peak))])], label="lag")
        assert _value_labels(chart) == expected, peak
        bars = bar_chart([("v1", float(peak)), ("v2", 0.0)], label="rows")
        assert _value_labels(bars) == expected, peak
