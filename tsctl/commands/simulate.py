"""``tsctl simulate``: the write load on every partition key and the cost of reads, per layout, second by second.

The defaults are the seed scenario (``tsctl.seed``) for an hour starting half-way
through an hourly bucket (so a split decided in the first minutes takes effect
inside the run); the adaptive layout's settings default to the hot-key function's own.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keydesign import Ingest, InvalidInput, KeyDesignError, ShardMap, parse_duration, parse_timestamp
from tsctl import seed
from tsctl.commands.plan import entity_rate, parse_sample
from tsctl.output import emit_json, table

if TYPE_CHECKING:
    from hotkeys.settings import HotKeySettings
    from simulator import AdaptiveSettings, HotEntity, ReadPattern, SimWorkload
    from simulator.engine import LayoutSpec, SimulationResult

# numpy and the simulator are imported only when simulating: every other command stays quick to start.

DEFAULT_START = "2026-11-22T06:30:00Z"
DEFAULT_LAYOUTS = "random,calculated,hybrid:16,hybrid,adaptive"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="write load per partition key and read cost per layout, second by second, for a workload",
        description=(
            "Simulate a workload second by second under several layouts side by side (same readings, packed "
            "into the same blocks: each entity's readings of an ingest batch): the hottest key's WCU/s, the 99th "
            "percentile, key-seconds over 1,000 WCU (throttled), imbalance, and the fan-out and read units of "
            "single-entity and cross-entity reads. 'adaptive' is the hybrid layout with the hot-key detector's "
            "own logic splitting hot entities at future bucket boundaries. Defaults: the seed scenario (50,000 "
            "readings/s of three measures, 10,000 sensors, sensor-alpha-001 at 2,000/s, batches of the stack's window)."
        ),
    )
    w = p.add_argument_group("workload")
    w.add_argument("--rate", type=float, default=float(seed.GLOBAL_RATE), help="peak global writes/s (%(default)s)")
    w.add_argument("--entities", type=int, default=seed.SENSORS, help="entities, hot ones included (%(default)s)")
    w.add_argument("--zipf", type=float, default=0.0, help="Zipf skew of the background entities (0 = uniform)")
    w.add_argument(
        "--reading", metavar="JSON", help="a typical reading: blocks are measured by packing readings of its shape"
    )
    w.add_argument(
        "--batching-window",
        type=int,
        default=round(Ingest().batching_window_s),
        help="ingest's MaximumBatchingWindowInSeconds, 0-300 (%(default)s, cdk.json's)",
    )
    w.add_argument(
        "--hot",
        action="append",
        metavar="ENTITY=RATE[@FROM-TO[,FROM-TO]]",
        help=(
            f"a hot entity, its writes/s and optional burst windows from the start of the run, e.g. "
            f"sensor-alpha-001=2000@10m-40m (default: {seed.HOT_SENSOR}={seed.HOT_RATE} for the whole run)"
        ),
    )
    w.add_argument("--no-hot", action="store_true", help="no hot entity")
    w.add_argument("--arrivals", choices=["poisson", "even"], default="poisson", help="per-second counts")
    w.add_argument("--seed", type=int, default=7, help="random seed (%(default)s)")
    w.add_argument("--start", default=DEFAULT_START, help="start of the run, RFC 3339 (%(default)s)")
    w.add_argument("--duration", default="1h", help="simulated time, e.g. 90s, 15m, 1h (%(default)s)")

    lay = p.add_argument_group("layouts")
    lay.add_argument(
        "--layouts",
        default=DEFAULT_LAYOUTS,
        help=(
            "comma-separated: random[:n], calculated[:n], hybrid[:N], adaptive[:N]. Without a count hybrid "
            "and adaptive take N from the capacity plan, random and calculated the suffixes the hottest "
            "entity needs (default: %(default)s; hybrid:16 is the seed articles' design)"
        ),
    )
    lay.add_argument("--shard-map", type=Path, help="also simulate a hybrid layout with this fixed shard map (JSON)")
    lay.add_argument("--bucket", default="1h", help="bucket granularity (%(default)s)")
    lay.add_argument("--utilisation", type=float, default=0.5, help="target share of 1,000 WCU/s for the plan's N")

    # Defaults: the function's own, read off its settings model when simulating (pydantic is slow to import).
    det = p.add_argument_group("adaptive layout (the hot-key function's settings; default: the function's)")
    det.add_argument("--window", help="HOT_WINDOW")
    det.add_argument("--grace", help="HOT_WINDOW_GRACE")
    det.add_argument("--cache-ttl", help="SHARD_MAP_CACHE_TTL")
    det.add_argument("--margin", help="HOT_CHANGE_MARGIN (default: MAX_FUTURE + 60s)")
    det.add_argument("--split-threshold", type=float, help="HOT_SPLIT_THRESHOLD_WCU")
    det.add_argument("--target-utilisation", type=float, help="share of 1,000 WCU/s a split sizes each key for")
    det.add_argument("--scale-down-windows", type=int, help="HOT_SCALE_DOWN_WINDOWS")
    det.add_argument("--auto-global", action="store_true", help="HOT_AUTO_APPLY_GLOBAL: apply a larger global N")

    rd = p.add_argument_group("reads (issued at the end of the run)")
    rd.add_argument("--read-entity", action="append", help="entity of the single-entity reads (default: first hot)")
    rd.add_argument("--read-windows", default="1h,3h,24h", help="single-entity read windows (%(default)s)")
    rd.add_argument("--cross-window", default="1h", help="cross-entity read window, or 'none' (%(default)s)")
    rd.add_argument("--consistent", action="store_true", help="strongly consistent reads (twice the read units)")

    p.add_argument("--chart", type=Path, metavar="PATH", help="write a PNG chart here")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def function_settings() -> HotKeySettings:
    """The hot-key function's settings as it runs with its defaults (the placeholders name no detector setting)."""
    from hotkeys.settings import HotKeySettings  # noqa: PLC0415 - pydantic: only when simulating

    return HotKeySettings.model_validate({"CONTROL_TABLE": "control", "SHARDS": 1, "TABLE_PREFIX": "readings"})


def parse_hot(values: list[str] | None, *, none: bool) -> tuple[HotEntity, ...]:
    """``--hot`` values as hot entities; none given means the seed's hot sensor."""
    from simulator import Burst, HotEntity  # noqa: PLC0415 - see the imports

    if none:
        return ()
    if not values:
        return (HotEntity(seed.HOT_SENSOR, float(seed.HOT_RATE)),)
    hot = []
    for value in values:
        spec, _, windows = value.partition("@")
        name, writes = entity_rate(spec, "ENTITY=RATE[@FROM-TO,...]")
        bursts = []
        for window in filter(None, windows.split(",")):
            low, dash, high = window.partition("-")
            if not dash:
                raise InvalidInput("--hot", f"burst {window!r} of {name} is not FROM-TO (e.g. 10m-40m)")
            bursts.append(Burst(_seconds(low, "--hot"), _seconds(high, "--hot")))
        hot.append(HotEntity(name, writes, tuple(bursts)))
    return tuple(hot)


def _seconds(spec: str, field: str) -> int:
    return 0 if spec.strip() == "0" else parse_duration(spec, field) // 1000


def build(args: argparse.Namespace) -> tuple[SimWorkload, list[LayoutSpec], AdaptiveSettings, ReadPattern]:
    """The simulation the arguments describe; bad input raises InvalidInput / ConfigError naming the option."""
    from simulator import AdaptiveSettings, ReadPattern, SimWorkload, parse_layout_spec  # noqa: PLC0415
    from simulator.engine import LayoutSpec, default_shards  # noqa: PLC0415

    workload = SimWorkload(
        rate=args.rate,
        entities=args.entities,
        sample=parse_sample(args.reading),
        batching_window_s=args.batching_window,
        start_ms=parse_timestamp(args.start, "--start"),
        duration_s=parse_duration(args.duration, "--duration") // 1000,
        zipf=args.zipf,
        hot=parse_hot(args.hot, none=args.no_hot),
        arrivals=args.arrivals,
        seed=args.seed,
    )
    if not 0 < args.utilisation <= 1:
        raise InvalidInput("--utilisation", "must be in (0, 1]")
    hybrid_n, suffixes = default_shards(workload, args.utilisation)
    specs = [
        parse_layout_spec(text, hybrid_shards=hybrid_n, suffixes=suffixes)
        for text in args.layouts.split(",")
        if text.strip()
    ]
    if args.shard_map is not None:
        try:
            fixed = ShardMap.from_dict(json.loads(args.shard_map.read_text()))
        except (OSError, ValueError) as exc:  # ValueError: bad JSON, or a ConfigError naming the map's field
            raise InvalidInput("--shard-map", f"{args.shard_map}: {exc}") from None
        specs.append(
            LayoutSpec("hybrid", fixed.global_shards_at(workload.start_ms), shard_map=fixed, name="hybrid:map")
        )
    function = function_settings()
    given = {
        "window_ms": None if args.window is None else parse_duration(args.window, "--window"),
        "split_threshold_wcu": args.split_threshold,
        "target_utilisation": args.target_utilisation,
        "scale_down_windows": args.scale_down_windows,
    }
    detector = replace(function.detector, **{k: v for k, v in given.items() if v is not None})
    adaptive = AdaptiveSettings(
        detector=detector,
        grace_ms=function.window_grace_ms if args.grace is None else parse_duration(args.grace, "--grace"),
        cache_ttl_ms=function.shard_map_cache_ttl_ms
        if args.cache_ttl is None
        else parse_duration(args.cache_ttl, "--cache-ttl"),
        margin_ms=function.change_margin_ms if args.margin is None else parse_duration(args.margin, "--margin"),
        auto_global=args.auto_global or function.auto_apply_global,
    )
    windows = tuple(parse_duration(w.strip(), "--read-windows") for w in args.read_windows.split(",") if w.strip())
    cross = None if args.cross_window.strip().lower() == "none" else parse_duration(args.cross_window, "--cross-window")
    default_reads = ReadPattern.default(workload)
    reads = ReadPattern(
        tuple(args.read_entity) if args.read_entity else default_reads.entities,
        windows,
        cross,
        consistent=args.consistent,
    )
    return workload, specs, adaptive, reads


#: The simulator's field names that are not the option that sets them (the rest are ``--<name>``).
_RENAMED = {"entity": "read_entity", "reads": "read_windows", "split_threshold_wcu": "split_threshold"}


@contextmanager
def _naming_options(args: argparse.Namespace) -> Iterator[None]:
    """Re-raise the simulator's and the key-design layer's errors under the option's name, so an error names
    what to change."""
    try:
        yield
    except KeyDesignError as exc:
        name, _, detail = exc.field.partition(".")
        option = _RENAMED.get(name, name)
        if option not in vars(args):
            raise
        reason = f"{detail}: {exc.reason}" if detail else exc.reason
        raise type(exc)(f"--{option.replace('_', '-')}", reason) from None


def run(args: argparse.Namespace) -> int:
    from simulator import Simulation  # noqa: PLC0415 - see the imports
    from simulator.report import chart  # noqa: PLC0415

    with _naming_options(args):
        workload, specs, adaptive, reads = build(args)
        result = Simulation(workload, specs, bucket=args.bucket, adaptive=adaptive, reads=reads).run()
    path = chart(result, args.chart) if args.chart is not None else None
    if args.json:
        document = result.to_dict()
        document["chart"] = str(path) if path is not None else None
        emit_json(document)
    else:
        print(render(result))
        if path is not None:
            print(f"\nchart written to {path}")
    return 0


def render(result: SimulationResult) -> str:
    """The report for people: a header line, the writes table, the reads table and the notes."""
    from simulator.report import READ_HEADERS, WRITE_HEADERS, header, notes, read_rows, write_rows  # noqa: PLC0415

    return "\n".join(
        [
            header(result),
            "",
            "writes (per partition key, per second)",
            table(write_rows(result), WRITE_HEADERS),
            "",
            "reads (issued at the end of the run)",
            table(read_rows(result), READ_HEADERS),
            "",
            *(f"note: {n}" for n in notes(result)),
        ]
    )
