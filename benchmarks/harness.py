"""The harness: a registry of benchmarks, a runner, a table and a JSON file.

Every benchmark's entry in ``results.json`` carries its figures (each with a
note on how it was measured), its parameters, ``method`` (how the benchmark
measures), ``command`` (how to reproduce just it) and ``seconds`` (its own
wall time); the document carries the machine, the full command and the time.
Ratios are always measured side by side inside one benchmark run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("out/bench/results.json")


@contextmanager
def collector_time() -> Iterator[list[float]]:
    """The garbage collector inside the block: [seconds it ran, full collections], filled as it runs."""
    spent, began = [0.0, 0], [0.0]

    def clock(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - began[0]
            spent[1] += info["generation"] == 2

    gc.callbacks.append(clock)
    try:
        yield spent
    finally:
        gc.callbacks.remove(clock)


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured number."""

    name: str
    value: float
    unit: str
    note: str = ""


@dataclass(slots=True)
class Result:
    """What one benchmark reports: its figures and the parameters it ran with."""

    figures: list[Figure] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    method: str = ""

    def add(self, name: str, value: float, unit: str, note: str = "") -> None:
        self.figures.append(Figure(name, value, unit, note))


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str
    description: str
    run: Callable[[bool], Result]


_REGISTRY: dict[str, Benchmark] = {}


def benchmark(name: str, description: str) -> Callable[[Callable[[bool], Result]], Callable[[bool], Result]]:
    """Register ``fn(quick) -> Result`` under ``name``."""

    def register(fn: Callable[[bool], Result]) -> Callable[[bool], Result]:
        if name in _REGISTRY:
            raise ValueError(f"benchmark {name!r} is registered twice")
        _REGISTRY[name] = Benchmark(name, description, fn)
        return fn

    return register


def registered() -> dict[str, Benchmark]:
    import benchmarks.registry  # noqa: F401, PLC0415 - importing registers the benchmarks

    return dict(_REGISTRY)


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "system": f"{platform.system()} {platform.release()}",
    }


def command_for(name: str, quick: bool) -> str:
    """The command that reruns one benchmark."""
    return f"python -m benchmarks {name}" + (" --quick" if quick else "")


def main(argv: Sequence[str] | None = None, available: Mapping[str, Benchmark] | None = None) -> int:
    """Run the benchmarks named in ``argv`` (all by default) from ``available`` (the registry by default)."""
    available = dict(registered() if available is None else available)
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description="Run the benchmarks.")
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(available)})")
    parser.add_argument("--quick", action="store_true", help="smaller workloads, for a smoke run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results file (default: %(default)s)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        for bench in available.values():
            print(f"{bench.name:24} {bench.description}")
        return 0
    unknown = [n for n in args.names if n not in available]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; --list shows them")
    selected = [available[n] for n in (args.names or available)]
    results: dict[str, Any] = {}
    rows: list[tuple[str, str, str, str]] = []
    for bench in selected:
        print(f"running {bench.name}: {bench.description}", file=sys.stderr)
        started = time.perf_counter()
        result = bench.run(args.quick)
        results[bench.name] = {
            "description": bench.description,
            "method": result.method,
            "command": command_for(bench.name, args.quick),
            "seconds": round(time.perf_counter() - started, 2),
            "params": result.params,
            "figures": {f.name: {"value": f.value, "unit": f.unit, "note": f.note} for f in result.figures},
        }
        rows.extend((bench.name, f.name, _format(f.value), f.unit) for f in result.figures)
    host = machine()
    document = {
        "machine": host,
        "command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "benchmarks": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(
        f"{document['finished_at']}  {host['cpus']} x {host['cpu']}, {host['implementation']} {host['python']}, "
        f"{host['system']}{'  (--quick)' if args.quick else ''}"
    )
    print(_table(rows))
    print(f"\nresults written to {args.out}")
    return 0


def _format(value: float) -> str:
    if value == int(value) and abs(value) >= 10:
        return f"{int(value):,}"
    return f"{value:,.2f}" if abs(value) < 1_000 else f"{value:,.0f}"


def _table(rows: list[tuple[str, str, str, str]]) -> str:
    headers = ("benchmark", "figure", "value", "unit")
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), "  ".join("-" * w for w in widths)]
    for row in rows:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2]), row[3].ljust(widths[3])]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
