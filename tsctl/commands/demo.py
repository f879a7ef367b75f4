"""``tsctl demo`` (``make demo``): the seed scenario through the real code path on this machine.

The report also carries ``tsctl preview``'s capacity plan for the full-scale
seed workload, so one report tells the whole story: the plan at 50,000
readings/s, and what the running system did at this machine's scale.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tsctl.arguments import faults_option, positive, positive_int
from tsctl.commands import preview
from tsctl.output import emit_json

if TYPE_CHECKING:
    from demo.options import DemoOptions


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run the seed scenario on the embedded local system: ingest, hot-key split, queries, a report",
        description=(
            "Start the whole system on loopback (moto's server as a child process, the functions in this one), "
            "replay the rotator's last hours, publish the seed scenario scaled to this machine (sensors at 5 "
            "readings/s each, sensor-alpha-001 far above them), let the hot-key detector split the hot sensor "
            "(its threshold lowered for the demo), publish again after the split, query through the local HTTP "
            "API, and report what was published, written, rejected, lost and duplicated, the write units and "
            "bytes stored per reading beside one item per reading, the hot keys, the shard-map change, partition "
            "load before and after, and the query answers and latencies. "
            "Time is compressed (1-minute buckets, 5 s hot-key windows): a few minutes in all. "
            "Exits 1 when anything was lost or duplicated, the split did not happen or a query answer differs."
        ),
        epilog='examples:\n  tsctl demo\n  tsctl demo --quick\n  tsctl demo --faults "throttle=2,rate=0.05,partial=3,'
        'partial_rate=0.2,fraction=0.5,invoke_errors=0.1"',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="a smaller scenario: 30 sensors, the hot one at 900/s")
    faults_option(p)
    p.add_argument("--sensors", type=positive_int, help="sensors besides sensor-alpha-001 (default 80)")
    p.add_argument("--hot-rate", type=positive, help="readings/s of sensor-alpha-001 (default 1,200)")
    p.add_argument("--seed", type=int, default=7, help="the workload's random seed")
    p.add_argument("--out", type=Path, default=Path("out/demo"), help="where report.json and the picture go")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of the summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: moto and boto3 take a while to import, which every other command would pay.
    from demo.report import render  # noqa: PLC0415
    from demo.run import run_demo  # noqa: PLC0415

    options = options_from(args)
    # What the preview computes for the full-scale seed workload (no server involved).
    plan = preview.build_report(int(time.time() * 1000))
    shown = ("scenario", "plan", "key_load", "split", "all_readings_found_by_their_plan")
    what = "tsctl preview: the seed workload at full scale, computed by the key-design layer"
    report = run_demo(options, extra={"seed_scale_plan": {"what": what, **{name: plan[name] for name in shown}}})
    if args.json:
        emit_json(report)
    else:
        print(render(report))
    return 0 if report["ok"] else 1


def options_from(args: argparse.Namespace) -> DemoOptions:
    """The demo's options from the parsed (and so already checked) arguments."""
    from demo.options import DemoOptions  # noqa: PLC0415

    given = {"sensors": args.sensors, "hot_rate": args.hot_rate}  # None: the scenario's own
    overrides = {name: value for name, value in given.items() if value is not None}
    overrides |= {"faults": args.faults, "out_dir": args.out, "seed": args.seed}
    return DemoOptions.quick(**overrides) if args.quick else DemoOptions(**overrides)
