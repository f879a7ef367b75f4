"""The simulation's figures for people: two tables and notes, and a PNG chart."""

from __future__ import annotations

from pathlib import Path

from keydesign import format_ts
from keydesign.capacity import PARTITION_WCU
from keydesign.rollup import MARK_SHARDS, hottest_rollup_keys

from .engine import LayoutResult, SimulationResult
from .reads import duration_label

#: Below this share of a throttled shared key's writes, its top writer is not "the" cause.
CAUSE_SHARE = 0.5


def _stamp(ms: int) -> str:
    return format_ts(ms)[11:19]  # HH:MM:SS: a run is hours long


def throttled_cause(result: LayoutResult) -> str:
    """Who the throttled keys belong to: an entity, or many entities sharing a key."""
    keys = result.writes.throttled_keys
    if not keys:
        return "-"
    seconds: dict[str, int] = {}
    for key in keys:
        cause = key.top_writer if key.top_writer_share >= CAUSE_SHARE else "many entities"
        seconds[cause] = seconds.get(cause, 0) + key.seconds
    causes = sorted(seconds, key=lambda c: (-seconds[c], c))  # the cause of most throttled seconds first
    return f"{len(keys)} ({', '.join(causes[:3])}{', ...' if len(causes) > 3 else ''})"


def after_change(result: LayoutResult) -> str:
    if not result.spec.adaptive:
        return "-"
    if result.first_change_ms is None:
        return "no change"
    if result.throttled_key_seconds_after_change is None:
        return f"change at {_stamp(result.first_change_ms)}, after the run"
    return f"{result.throttled_key_seconds_after_change:,} from {_stamp(result.first_change_ms)}"


def write_rows(sim: SimulationResult) -> list[list[object]]:
    return [
        [
            r.spec.label,
            r.writes.keys_written,
            r.writes.hottest_wcu,
            r.writes.p99_wcu,
            r.writes.mean_wcu,
            r.writes.imbalance,
            r.writes.throttled_key_seconds,
            r.writes.throttled_wcu,
            throttled_cause(r),
            after_change(r),
        ]
        for r in sim.layouts
    ]


WRITE_HEADERS = [
    "layout",
    "keys",
    "hottest WCU/s",
    "p99 WCU/s",
    "mean WCU/s",
    "max/mean",
    "throttled key-s",
    "throttled WCU",
    "throttled keys (cause)",
    "throttled after split",
]
READ_HEADERS = ["layout", "read", "partitions", "Query calls", "blocks read", "readings returned", "read units"]


def read_rows(sim: SimulationResult) -> list[list[object]]:
    rows: list[list[object]] = []
    for result in sim.layouts:
        for read in result.reads:
            if read.not_applicable is not None:
                figures: tuple[object, ...] = ("N/A", "N/A", "N/A", "N/A", "N/A (a Scan; see notes)")
            else:
                figures = (read.partitions, read.queries, read.blocks_read, read.readings_returned, read.read_units)
            rows.append([result.spec.label, read.read, *figures])
    return rows


def notes(sim: SimulationResult) -> list[str]:
    out: list[str] = []
    labels = {r.spec.kind: r.spec.label for r in sim.layouts}
    if "random" in labels and "calculated" in labels:
        out.append(
            "random and calculated spread blocks alike (a uniform draw vs the hash of the block id): with the "
            "same suffix count they share one draw and show the same load. They differ on redelivery: a "
            "redelivered batch's block keeps its calculated suffix but may get a new random one (a second copy "
            "that reads resolve by the block's version)."
        )
    reasons = {r.not_applicable for res in sim.layouts for r in res.reads if r.not_applicable}
    for reason in sorted(str(r) for r in reasons):
        out.append(f"N/A: {reason}.")
    adaptive = sim.adaptive
    for result in sim.layouts:
        for change in result.changes:
            if change.kind == "global":
                continue
            kind = change.kind.replace("_", "-")
            what = f"{change.entity} {kind} {change.from_shards} -> {change.to_shards} partitions"
            timing = (
                f"decided {_stamp(change.decided_at_ms)} on the window from {_stamp(change.window_start_ms)} "
                f"({change.wcu_per_s:,.0f} WCU/s)"
            )
            if change.applied:
                out.append(
                    f"{result.spec.label}: {what}, {timing}, effective {_stamp(change.effective_from_ms)} "
                    f"(the first {sim.bucket} boundary after now + cache TTL {adaptive.cache_ttl_ms // 1000}s "
                    f"+ margin {adaptive.margin_ms // 1000}s)."
                )
            else:
                out.append(f"{result.spec.label}: {what} called for ({timing}) but not applied.")
        recommended = [c for c in result.changes if c.kind == "global"]
        if recommended:
            first, last = recommended[0], recommended[-1]
            verdict = (
                f"applied from {_stamp(last.effective_from_ms)}"
                if last.applied
                else "not applied (auto-apply global is off)"
            )
            out.append(
                f"{result.spec.label}: the detector found base keys over its "
                f"{adaptive.detector.split_threshold_wcu:,.0f} WCU/s threshold without any hot entity on them "
                f"(first {first.key} at {first.wcu_per_s:,.0f} WCU/s, decided {_stamp(first.decided_at_ms)}) "
                f"and recommends global N {first.from_shards} -> {last.to_shards}; {verdict}."
            )
    start = sim.workload.start_ms
    longest = max([*sim.reads.windows_ms, sim.reads.cross_window_ms or 0])
    if longest > sim.workload.duration_s * 1000:
        out.append(
            f"reads end at the end of the run ({_stamp(sim.workload.end_ms)}); before the run "
            f"({format_ts(start)}) every entity is taken to write at its mean rate over the run: the fan-out is "
            "exact, the read units of that part an estimate."
        )
    mark_wcu, burst = hottest_rollup_keys(sim.workload.entities)
    out.append(
        f"rollups (1m,1h,1d): the hottest rollup key takes {mark_wcu:,.1f} WCU/s (ingest's marks, one per "
        f"entity-minute over {MARK_SHARDS} keys, whatever the rates) and at most {burst:,.1f} puts per rollup run; "
        "docs/rollups.md."
    )
    out.append(
        f"readings are stored in blocks: each entity's readings of an ingest batch ({sim.batch_seconds} s), "
        "cut at 10 s, 1,000 readings and 64 KB as Layout.pack cuts them; a batch's blocks are written in its "
        "last second. p99, mean and max/mean are over the key-seconds that took writes; a key-second over "
        f"{PARTITION_WCU:,} WCU is throttled and 'throttled WCU' is the excess."
    )
    return out


def header(sim: SimulationResult) -> str:
    """One line: what was simulated, and how long it took."""
    w = sim.workload
    hot = ", ".join(
        f"{h.entity_id} at {h.rate:,.0f}/s"
        + (" in " + ", ".join(f"{b.from_s}s-{b.to_s}s" for b in h.bursts) if h.bursts else "")
        for h in w.hot
    )
    return (
        f"simulated {w.duration_s:,} s from {format_ts(w.start_ms)}: {sim.simulated_writes:,} readings "
        f"({w.rate:,.0f}/s peak over {w.entities:,} entities, zipf {w.zipf:g}{'; ' + hot if hot else ''}; "
        f"{w.arrivals} arrivals), readings of {len(w.sample.measures)} measure(s) in blocks of {sim.batch_seconds} s "
        f"batches, {sim.bucket} buckets; {sim.wall_seconds:.1f} s wall"
    )


def chart(sim: SimulationResult, path: Path) -> Path:
    """A PNG: the hottest key's WCU/s second by second per layout, and each read's fan-out per layout."""
    import matplotlib  # noqa: PLC0415 - only the chart needs it, and it is slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 9), gridspec_kw={"height_ratios": [3, 2]})
    # The hottest key of every 10 s: per-second noise would hide the layouts behind each other.
    step = 10 if sim.workload.duration_s >= 600 else 1
    styles = ["-", "--", "-.", ":"]
    for i, result in enumerate(sim.layouts):
        series = result.per_second_max_wcu
        peaks = [int(series[j : j + step].max()) for j in range(0, series.size, step)]
        minutes = [j / 60 for j in range(0, series.size, step)]
        top.plot(minutes, peaks, linestyle=styles[i % len(styles)], linewidth=1.2, label=result.spec.label)
        if result.first_change_ms is not None and result.first_change_ms < sim.workload.end_ms:
            at = (result.first_change_ms - sim.workload.start_ms) / 60_000
            top.axvline(at, color="grey", linestyle=":", linewidth=1)
            top.annotate(f"{result.spec.label}: split effective", (at, PARTITION_WCU * 1.05), fontsize=8)
    top.axhline(PARTITION_WCU, color="red", linestyle="--", linewidth=1, label="1,000 WCU/s per key")
    top.set_yscale("log")
    top.set_xlabel(f"minutes from {format_ts(sim.workload.start_ms)}")
    top.set_ylabel("hottest partition key (WCU/s)")
    top.set_title(f"Write load on the hottest partition key (highest second in each {step} s)")
    top.legend(fontsize=8, loc="upper right")

    reads = [r.read for r in sim.layouts[0].reads]
    width = 0.8 / max(1, len(sim.layouts))
    for i, result in enumerate(sim.layouts):
        heights = [r.partitions or 0 for r in result.reads]
        xs = [x + i * width for x in range(len(reads))]
        bottom.bar(xs, heights, width=width, label=result.spec.label)
        for x, r in zip(xs, result.reads, strict=True):
            if r.not_applicable:
                bottom.text(x, 1.1, "N/A", rotation=90, fontsize=7, ha="center", va="bottom")
    bottom.set_xticks([x + 0.4 - width / 2 for x in range(len(reads))], reads, fontsize=8)
    bottom.set_yscale("log")
    bottom.set_ylim(bottom=1)
    bottom.set_ylabel("partitions queried")
    windows = ", ".join(map(duration_label, sim.reads.windows_ms))
    bottom.set_title(f"Read fan-out (reads at the end of the run; windows {windows})")
    bottom.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
