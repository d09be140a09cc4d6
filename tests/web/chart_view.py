"""What a uPlot chart of the dashboard shows, read in the browser: its lines (read back from
the chart's uPlot instance), its axes, its legend while the mouse hovers a step, and a zoom by
dragging the mouse across it (charts.js)."""

from __future__ import annotations

from typing import Any


def plot(key: str, axis: str | None = None) -> str:
    """The selector of the plot element of `key`'s chart (of its time-keyed rows: axis "time")."""
    where = f'[data-axis="{axis}"]' if axis else ""
    return f'figure.chart[data-key="{key}"]{where} .plot'


def lines(page, key: str, meta: str | None = None, axis: str | None = None) -> list[dict]:
    """The chart's lines, [{meta, name, color, opacity, x, y, step}], those of kind `meta`
    ("value", "min", "max", "smoothed", "p10", ...) when given."""
    drawn = page.eval_on_selector(plot(key, axis), "(el) => el.seriesChart.drawn()")
    return [line for line in drawn if meta is None or line["meta"] == meta]


def axes(page, key: str, axis: str | None = None) -> dict[str, Any]:
    """{"x": {"type", "title", "min", "max"}, "y": {"type"}} as the chart draws them."""
    return page.eval_on_selector(plot(key, axis), "(el) => el.seriesChart.axes()")


def _page_x(page, key: str, x: float) -> tuple[float, float]:
    """Where on the page the chart draws x, at the middle of its plotting area."""
    return page.eval_on_selector(
        plot(key),
        """(el, x) => {
          const u = el.seriesChart.uplot;
          const box = u.over.getBoundingClientRect();
          return [box.left + u.valToPos(x, "x"), box.top + box.height / 2];
        }""",
        x,
    )


def hover(page, key: str, x: float) -> None:
    """Move the mouse over the chart at x."""
    page.locator(plot(key)).scroll_into_view_if_needed()
    page.mouse.move(*_page_x(page, key, x))


def drag(page, key: str, lo: float, hi: float) -> None:
    """Drag the mouse across the chart from x `lo` to x `hi` (a zoom)."""
    page.locator(plot(key)).scroll_into_view_if_needed()
    start, end = _page_x(page, key, lo), _page_x(page, key, hi)
    page.mouse.move(*start)
    page.mouse.down()
    page.mouse.move((start[0] + end[0]) / 2, start[1], steps=4)
    page.mouse.move(*end, steps=4)
    page.mouse.up()
