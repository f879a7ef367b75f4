"""The demo's presentation: the summary on stdout and the two pictures.

:mod:`local_runtime.demo_report` decides what passed; this module only shows it. The pictures are drawn
with matplotlib's Agg backend (no display needed): ``partition-load.png``, each hot partition key
family's write units per second (the key without its bucket, as the hot-key metrics name it, so a shard
is one line across buckets), and with the rotation ``table-writes.png``, readings per table over event
time with the rotator's drops marked.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infra.config import Context
from keydesign import format_ts
from keydesign.capacity import PARTITION_WCU
from keydesign.layouts import key_family
from local_runtime.demo_report import HOT_SENSOR, NOT_RUN, SLICE_MS, DemoFacts, newest_copies, table_writes

OTHERS = "every other key (peak)"
#: What the partition-load figures measure, said wherever they are shown.
LOAD_BASIS = "each block's write units at the second of its first reading"


def draw_pictures(facts: DemoFacts, config: Context, out_dir: Path, *, top: int = 6) -> None:
    """Partition load (``partition-load.png``) and, with rotation, table writes (``table-writes.png``)."""
    per_family: dict[str, Counter[int]] = defaultdict(Counter)
    for block in facts.story():
        per_family[key_family(block.pk, config.layout().kind)][block.first_ms // 1000] += block.write_units
    if per_family:
        facts.picture = draw_load(
            per_family,
            out_dir / "partition-load.png",
            threshold=config.split_threshold_wcu,
            boundary_ms=facts.boundary_ms,
            top=top,
        )
    if facts.rotation is not None:
        by_table: dict[str, list[Any]] = defaultdict(list)
        for _, reading, block in newest_copies(facts.blocks).values():
            by_table[block.table].append(reading)
        counted = table_writes({**facts.exported, **by_table})
        if counted is not None:
            runs = facts.rotation.runs
            replayed = facts.rotation.clock.get("caught_up_after_s") is not None and len(runs) > 1
            # The first run on the wall clock is the last; the one before it ended the replay.
            caught_up = int(runs[-2]["now_ms"]) if replayed else None
            drops = [(t, int(r["now_ms"])) for r in runs for t in (r.get("summary") or {}).get("deleted", [])]
            facts.rotation_picture = draw_tables(
                *counted, out_dir / "table-writes.png", drops=drops, caught_up_ms=caught_up
            )


def load_series(per_family: Mapping[str, Counter[int]], top: int) -> tuple[int, list[tuple[str, list[int]]]]:
    """The first second, and the ``top`` hottest families' write units per second from it, then the peak
    of all the others (second by second)."""
    first = min(min(c) for c in per_family.values())
    seconds = range(first, max(max(c) for c in per_family.values()) + 1)
    ranked = sorted(per_family, key=lambda f: (-max(per_family[f].values()), f))
    series = [(family, [per_family[family].get(s, 0) for s in seconds]) for family in ranked[:top]]
    if ranked[top:]:
        series.append((OTHERS, [max(per_family[f].get(s, 0) for f in ranked[top:]) for s in seconds]))
    return first, series


def draw_load(
    per_family: Mapping[str, Counter[int]], path: Path, *, threshold: int, boundary_ms: int | None, top: int = 6
) -> dict[str, Any]:
    first, series = load_series(per_family, top)
    split = f"; {HOT_SENSOR} split at {format_ts(boundary_ms)}" if boundary_ms is not None else ""
    legend = {"loc": "upper right", "fontsize": 8, "title": "partition key, without its bucket", "title_fontsize": 8}
    with _png(path, title=f"Write units per second, hottest partition keys{split}", legend=legend) as axes:
        for label, values in series:
            style = {"color": "0.6", "linewidth": 0.8, "linestyle": ":"} if label == OTHERS else {"linewidth": 1.1}
            axes.plot(range(len(values)), values, label=label, **style)
        axes.axhline(PARTITION_WCU, color="crimson", linestyle="--", linewidth=1, label="1,000 WCU/s: one key's limit")
        axes.axhline(
            threshold,
            color="darkorange",
            linestyle=":",
            linewidth=1,
            label=f"split threshold, lowered to {threshold} WCU/s for the demo",
        )
        if boundary_ms is not None:
            axes.axvline(boundary_ms / 1000 - first, color="black", linewidth=1.2, label="split takes effect")
        axes.set_yscale("symlog", linthresh=10)
        axes.set_ylim(bottom=0)
        axes.set_xlabel(f"seconds since {format_ts(first * 1000)} (event time of each block's first reading)")
        axes.set_ylabel("write units per second (log scale)")
    return {
        "path": str(path),
        "origin": format_ts(first * 1000),
        "measures": LOAD_BASIS,
        "series": [{"label": label, "peak_wcu_per_s": max(values)} for label, values in series],
        "threshold_wcu": threshold,
        "limit_wcu": PARTITION_WCU,
    }


def draw_tables(
    origin_ms: int,
    counts: Mapping[str, list[int]],
    path: Path,
    *,
    drops: list[tuple[str, int]],
    caught_up_ms: int | None,
) -> dict[str, Any]:
    """Stacked bars of readings per slice, one colour per table; the rotator's drops marked along the
    top, the moment the replayed clock met the wall clock as a line."""
    import matplotlib  # noqa: PLC0415 - only the demo draws

    def hours(ms: int) -> float:
        return (ms - origin_ms) / 3_600_000

    width = len(next(iter(counts.values())))
    x = [hours(origin_ms + n * SLICE_MS) for n in range(width)]
    legend = {"loc": "upper left", "fontsize": 7, "title": "table", "title_fontsize": 8}
    with _png(path, title="Readings per table over event time, and the rotator's drops", legend=legend) as axes:
        colour = {name: matplotlib.colormaps["tab10"](i % 10) for i, name in enumerate(counts)}
        bottom = [0] * width
        for name, values in counts.items():
            axes.bar(x, values, width=SLICE_MS / 3_600_000, bottom=bottom, align="edge", color=colour[name], label=name)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        axes.set_yscale("symlog", linthresh=10)
        axes.set_ylim(bottom=0)
        for name, at_ms in drops:
            axes.scatter([hours(at_ms)], [max(bottom) * 2], marker="x", color=colour.get(name, "0.3"))
        axes.scatter([], [], marker="x", color="0.3", label="rotator: dropped (after its export)")
        if caught_up_ms is not None:
            axes.axvline(hours(caught_up_ms), color="black", linewidth=1, label="replay met the wall clock")
        axes.set_xlabel(f"event time, hours since {format_ts(origin_ms)}")
        axes.set_ylabel(f"readings per {SLICE_MS // 60_000} min (log scale)")
    return {
        "path": str(path),
        "origin": format_ts(origin_ms),
        "slice_minutes": SLICE_MS // 60_000,
        "tables": [{"table": name, "readings": sum(values)} for name, values in counts.items()],
    }


@contextmanager
def _png(path: Path, *, title: str, legend: Mapping[str, Any]) -> Iterator[Any]:
    """The axes of a demo-sized figure; then titled, gridded, with ``legend``, saved as a PNG and closed."""
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


# -- the summary on stdout ------------------------------------------------------------------------------


def render(report: Mapping[str, Any]) -> str:
    """A short human summary: the figures that tell the story, each query's verdict, then what failed
    (``report.json`` holds the rest)."""
    r, d, hot, split = report["readings"], report["design"], report["hot_keys"], report["shard_map_changes"]
    cost = report["cost_per_reading"]["all"]
    lines = [
        f"Local demo: {report['scenario'].get('sensors', 0):,} sensors + {HOT_SENSOR} "
        f"(faults: {report['scenario'].get('faults', 'none')}); {d['bucket']} buckets, hot-key split threshold "
        f"lowered to {d['hot_split_threshold_wcu']} WCU/s for the demo (the stack's: 500)",
        f"readings: published {r['published']:,}, written {r['written']:,}, in exports of dropped tables "
        f"{r['exported_then_dropped']:,}, rejected {r['rejected']:,}; lost {r['lost']:,}, "
        f"duplicates {r['duplicates']:,}",
    ]
    if cost.get("readings"):
        one = cost["one_item_per_reading"]
        lines.append(
            f"per reading: {cost['write_units_per_reading']:.4f} write units, {cost['billed_bytes_per_reading']:.1f} "
            f"billed bytes ({cost['readings_per_block']:g} a block); one item each: "
            f"{one['write_units_per_reading']:.2f} and {one['billed_bytes_per_reading']:.1f}"
        )
    lines.append(f"hot keys: {hot['windows_with_hot_keys']} of {hot['windows_judged']} judged window(s) had one")
    lines += [
        f"shard map: {c['entity']} {c['from_sub_shards']} -> {c['to_sub_shards']} sub-shards from {c['effective_from']}"
        for c in split.get("changes", [])
    ]
    for when in ("before", "after"):
        load = report[f"partition_load_{when}_split"]
        if load.get("partition_keys"):
            peak = f"{load['hottest_key']} at {load['hottest_peak_wcu_per_s']} WCU/s"
            lines.append(f"{when} the split: hottest key {peak} ({LOAD_BASIS})")
    if report["rollups"].get("through"):
        lines.append(f"rollups: applied through {report['rollups']['through']}")
    lines += [
        f"query {c['name']}: " + ("equal" if c["equal"] else f"DIFFERENT ({c['difference']})")
        for c in report["queries"].get("checks", [])
    ]
    rotation = report["rotation"]
    if rotation.get("status") == NOT_RUN:
        lines.append(f"rotation: not run ({rotation['reason']})")
    else:
        life = rotation["lifecycle"]
        lines.append(
            f"rotation: {rotation['period']} tables, {rotation['runs']} rotator runs; prebuilt "
            f"{len(life['prebuilt'])}, exported {len(life['exported'])}, dropped {len(life['dropped'])}"
        )
    pictures = [report["partition_load_picture"].get("path"), rotation.get("picture", {}).get("path")]
    lines += [f"picture: {path}" for path in pictures if path]
    failed = [name.replace("_", " ") for name, passed in report["checks"].items() if not passed]
    total = report.get("timings_s", {}).get("total")
    lines.append(("OK" + (f" in {total:.0f} s" if total else "")) if report["ok"] else "FAILED: " + "; ".join(failed))
    return "\n".join(lines)
