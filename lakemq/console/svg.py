"""Charts as inline SVG, rendered on the server: a line chart over time and a bar chart."""

from __future__ import annotations

import time
from collections.abc import Sequence

from markupsafe import Markup, escape

__all__ = ["bar_chart", "line_chart"]

_PAD_L, _PAD_R, _PAD_T, _PAD_B = 56, 12, 12, 28
_LEGEND_H = 20  # a line chart's legend row, below the time labels
_COLORS = ("#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2")


def _axis_top(peak: float) -> float:
    """The top of a value axis with 4 steps, each step 1, 2 or 5 times a power of ten, so
    every label is a true whole number (a flat zero series gets 0..4, not 1, 1, 0, 0, 0)."""
    magnitude = 1.0
    while True:
        for step in (magnitude, 2 * magnitude, 5 * magnitude):
            if step * 4 >= peak:
                return step * 4
        magnitude *= 10


def _frame(width: int, height: int, top: float, label: str, extra_height: int = 0) -> list[str]:
    inner_h = height - _PAD_T - _PAD_B
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="{escape(label)}" '
              f'viewBox="0 0 {width} {height + extra_height}">'),
             f'<title>{escape(label)}</title>']
    for i in range(5):
        y = _PAD_T + inner_h * i / 4
        value = top * (4 - i) / 4
        parts.append(f'<line class="grid" x1="{_PAD_L}" y1="{y:.1f}" x2="{width - _PAD_R}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{_PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{value:,.0f}</text>')
    return parts


def line_chart(series: Sequence[tuple[str, Sequence[tuple[int, float]]]], *, label: str, width: int = 1200,
               height: int = 260) -> Markup:
    """One polyline per (name, [(epoch ms, value)]) series on a shared time axis."""
    points = [p for _, pts in series for p in pts]
    if not points:
        return Markup(f'<p class="empty">{escape(label)}: no samples yet</p>')
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    top = _axis_top(max(v for _, v in points))
    span = max(t1 - t0, 1)
    inner_w, inner_h = width - _PAD_L - _PAD_R, height - _PAD_T - _PAD_B
    # The legend has a row of its own under the time axis, so neither covers the other.
    parts = _frame(width, height, top, label, extra_height=_LEGEND_H)
    for i, (name, pts) in enumerate(series):
        coords = " ".join(f"{_PAD_L + inner_w * (t - t0) / span:.1f},{_PAD_T + inner_h * (1 - v / top):.1f}"
                          for t, v in pts)
        color = _COLORS[i % len(_COLORS)]
        parts.append(f'<polyline class="series" data-series="{escape(name)}" fill="none" stroke="{color}" '
                     f'stroke-width="2" points="{coords}"/>')
        parts.append(f'<text class="legend" x="{_PAD_L + 8 + 140 * i}" y="{height + _LEGEND_H - 6}" fill="{color}">'
                     f'{escape(name)}</text>')
    for t, anchor, x in ((t0, "start", _PAD_L), (t1, "end", width - _PAD_R)):
        stamp = time.strftime("%H:%M:%S", time.localtime(t / 1000))
        parts.append(f'<text class="axis" x="{x}" y="{height - 14}" text-anchor="{anchor}">{stamp}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def bar_chart(bars: Sequence[tuple[str, float]], *, label: str, width: int = 1200, height: int = 240) -> Markup:
    """Vertical bars, one per (label, value), left to right."""
    if not bars:
        return Markup(f'<p class="empty">{escape(label)}: nothing to show yet</p>')
    top = _axis_top(max(v for _, v in bars))
    inner_w, inner_h = width - _PAD_L - _PAD_R, height - _PAD_T - _PAD_B
    step = inner_w / len(bars)
    parts = _frame(width, height, top, label)
    for i, (name, value) in enumerate(bars):
        h = inner_h * value / top
        x = _PAD_L + step * i + step * 0.15
        parts.append(f'<rect class="bar" x="{x:.1f}" y="{_PAD_T + inner_h - h:.1f}" width="{step * 0.7:.1f}" '
                     f'height="{h:.1f}"><title>{escape(name)}: {value:,.0f}</title></rect>')
        if len(bars) <= 24:
            parts.append(f'<text class="axis" x="{x + step * 0.35:.1f}" y="{height - 14}" '
                         f'text-anchor="middle">{escape(name)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
