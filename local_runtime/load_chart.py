"""The picture of partition load over time: write units per event-time second on the hottest keys.

:func:`chart_data` is pure (the unit tests feed it by hand): it groups the
stored items by partition-key *family* (the key without its time bucket, as
the hot-key metrics do, so one shard is one line across buckets), keeps the
families with the highest peaks, and adds the peak over every other key.
:func:`draw` renders it with matplotlib's Agg backend (no display needed):
the split boundary as a vertical line, the 1,000 WCU/s a key can take and
the detector's threshold as horizontal ones.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.config import PARTITION_WCU
from keydesign import format_ts, item_size, parse_timestamp, write_units
from keydesign.layouts import LayoutKind, key_family

OTHERS = "every other key (peak)"


@dataclass(frozen=True, slots=True)
class LoadChart:
    """What the picture shows; ``seconds`` are since ``origin_ms`` (the first event-time second)."""

    origin_ms: int
    seconds: list[int]
    series: list[tuple[str, list[int]]]
    boundary_s: float | None
    threshold_wcu: int
    limit_wcu: int = PARTITION_WCU

    def as_dict(self) -> dict[str, Any]:
        return {
            "origin": format_ts(self.origin_ms),
            "seconds": len(self.seconds),
            "series": [{"label": label, "peak_wcu_per_s": max(values, default=0)} for label, values in self.series],
            "boundary_s": self.boundary_s,
            "threshold_wcu": self.threshold_wcu,
            "limit_wcu": self.limit_wcu,
        }


def chart_data(
    items: Iterable[Mapping[str, Any]],
    *,
    layout_kind: LayoutKind,
    threshold_wcu: int,
    boundary_ms: int | None = None,
    top: int = 6,
) -> LoadChart | None:
    """The hottest ``top`` key families' WCU per event-time second, and the peak of all the others.
    None when there are no items."""
    per_family: dict[str, Counter[int]] = defaultdict(Counter)
    for item in items:
        second = parse_timestamp(str(item["t"]), "t") // 1000
        per_family[key_family(str(item["pk"]), layout_kind)][second] += write_units(item_size(item))
    if not per_family:
        return None
    first = min(min(c) for c in per_family.values())
    last = max(max(c) for c in per_family.values())
    seconds = list(range(first, last + 1))
    ranked = sorted(per_family, key=lambda f: (-max(per_family[f].values()), f))
    shown = ranked[:top]
    series = [(family, [per_family[family].get(s, 0) for s in seconds]) for family in shown]
    rest = ranked[top:]
    if rest:
        series.append((OTHERS, [max(per_family[f].get(s, 0) for f in rest) for s in seconds]))
    boundary = (boundary_ms / 1000 - first) if boundary_ms is not None else None
    return LoadChart(
        origin_ms=first * 1000,
        seconds=[s - first for s in seconds],
        series=series,
        boundary_s=boundary,
        threshold_wcu=threshold_wcu,
    )


@contextmanager
def png(path: Path, *, title: str, legend: Mapping[str, Any]) -> Iterator[Any]:
    """The axes of a demo-sized figure to draw on; then titled, gridded, with ``legend``, saved to
    ``path`` as a PNG (Agg backend) and closed."""
    import matplotlib  # noqa: PLC0415 - only the demo draws; a second to import

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(figsize=(11, 5.5), dpi=110)
    try:
        yield axes
        axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend(**legend)
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path)
    finally:
        plt.close(figure)


def draw(chart: LoadChart, path: Path, *, title: str) -> Path:
    """Render ``chart`` to a PNG at ``path``."""
    legend = {"loc": "upper right", "fontsize": 8, "title": "partition key, without its bucket", "title_fontsize": 8}
    with png(path, title=title, legend=legend) as axes:
        for label, values in chart.series:
            style: dict[str, Any] = (
                {"color": "0.6", "linewidth": 0.8, "linestyle": ":"} if label == OTHERS else {"linewidth": 1.1}
            )
            axes.plot(chart.seconds, values, label=label, **style)
        axes.axhline(
            chart.limit_wcu, color="crimson", linestyle="--", linewidth=1, label="1,000 WCU/s: one key's limit"
        )
        axes.axhline(
            chart.threshold_wcu, color="darkorange", linestyle=":", linewidth=1, label="hot-key split threshold"
        )
        if chart.boundary_s is not None:
            axes.axvline(chart.boundary_s, color="black", linewidth=1.2, label="split takes effect")
        axes.set_xlabel(f"event time, seconds since {format_ts(chart.origin_ms)}")
        axes.set_ylabel("write units per second")
        axes.set_ylim(bottom=0)
    return path
