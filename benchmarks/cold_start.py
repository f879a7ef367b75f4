"""Cold start: how long importing each handler module takes, and how big each Lambda's code asset is.

Import time is measured in a fresh interpreter per run (``python -c``), with
a clean environment holding only what the function's settings need (see each
``functions/<name>/settings.py``), so nothing is cached from an earlier
import. ``LAMBDA_TASK_ROOT`` is set, as the Lambda runtime sets it (tracing is
on, as deployed); a second figure per handler leaves it out, as local mode
runs (tracing off, but the X-Ray SDK builds its sampler). The floor is the
same interpreter importing only botocore's session and building Powertools'
Logger, Tracer and Metrics: what every handler pays before a line of its own
(and again with boto3, which the handlers no longer import). The child times
``import <name>.handler`` with ``time.perf_counter`` (and its CPU time with
``time.process_time``, which other processes on a shared machine disturb far
less) and refuses every socket connection first: a handler that called AWS while
importing would fail the benchmark (the clients are created at import, the
calls must wait for the first event). Another set of runs takes the CPU time of
the calls to ``adapters.clients.client`` during the import: the part of it that creating
clients on first use would move to the first invocation. One more set imports a copy of
``functions/`` without bytecode, as the deployed asset is (no ``__pycache__``, and Lambda's
``/var/task`` is read-only, so every cold start compiles our modules again). A separate run under ``python -X
importtime`` names the slowest top-level imports. This is the import part of
a Lambda cold start on this machine; the Lambda service adds its own start-up
(sandbox, runtime) on top, and its CPU share depends on the memory setting.

Asset size: the ``functions/`` directory zipped as a CDK code asset would be
(deflate, level 9), without ``__pycache__``, ``*.pyc``, tool caches and tests.
Every function can share that one asset; the per-function figure is the
zip of only the first-party files the handler actually imported. Third-party
packages are not in the asset: ``aws_lambda_powertools`` (and the
``pydantic`` it uses) come from the Powertools Lambda layer, ``boto3`` /
``botocore`` from the Lambda Python runtime.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.harness import Result, benchmark

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ROOT / "functions"
#: Directory and file names a code asset leaves out.
EXCLUDED_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "tests", ".hypothesis"})
EXCLUDED_SUFFIXES = (".pyc", ".pyo")

_COMMON = {
    "LAYOUT": "hybrid",
    "SHARDS": "16",
    "BUCKET": "1h",
    "TABLE_PREFIX": "readings",
    "AWS_REGION": "eu-west-1",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "POWERTOOLS_METRICS_NAMESPACE": "TimeSeries",
    "CONTROL_TABLE": "control",  # the stack sets it for every function
}
#: Each handler module and the environment its settings need at cold start.
HANDLERS: dict[str, tuple[str, dict[str, str]]] = {
    "ingest": (
        "ingest.handler",
        {"REJECTS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/rejects"},
    ),
    "query": ("query.handler", {"CURSOR_SECRET": "benchmark-cursor-secret-0123456789abcdef"}),
    "hotkeys": ("hotkeys.handler", {}),
    "rotator": ("rotator.handler", {"TABLE_PERIOD": "day"}),
}

# Runs in the child: block the network, time the import, list what it loaded.
_CHILD = """
import json, socket, sys, time
sys.path[:0] = [{functions!r}]
def refuse(*args, **kwargs):
    raise RuntimeError("a network connection at import time")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
started, cpu_started = time.perf_counter(), time.process_time()
{statement}
seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
files, third = [], set()
for name, mod in list(sys.modules.items()):
    path = getattr(mod, "__file__", None) or ""
    if path.startswith({functions!r}):
        files.append(path)
    elif "site-packages" in path and not name.startswith("_"):
        third.add(name.split(".")[0])
made = getattr(sys.modules.get("adapters.clients"), "_clients", {{}})
report = {{"seconds": seconds, "cpu_seconds": cpu_seconds, "files": sorted(files), "third_party": sorted(third)}}
# Powertools' batch utilities import every parser model when pydantic came first (+80 ms): no handler may
report["parser_models"] = "aws_lambda_powertools.utilities.parser.models" in sys.modules
print(json.dumps({{**report, "clients": len(made), "client_seconds": sum(globals().get("_spent", []))}}))
"""


#: What every handler runs before its own code (botocore's session, and the three objects of
#: adapters/observability.py): the floor of its import time; and the same with boto3, for comparison.
FLOOR, FLOOR_BOTO3 = "floor", "floor with boto3"
_POWERTOOLS = (
    "from aws_lambda_powertools import Logger, Metrics, Tracer\n"
    "Logger(); Tracer(patch_modules=('botocore',)); Metrics(namespace='TimeSeries')"
)
_FLOORS = {FLOOR: "import botocore.session\n" + _POWERTOOLS, FLOOR_BOTO3: "import boto3\n" + _POWERTOOLS}
#: Before a handler's import: the CPU time of every call to adapters.clients.client (the ones that create
#: a client cost; the rest are a dict look-up). Imports botocore first, so only its client figure is used.
_TIME_CLIENTS = """
import adapters.clients
_spent, _client = [], adapters.clients.client
def _timed(*args, **kwargs):
    begun = time.process_time()
    try:
        return _client(*args, **kwargs)
    finally:
        _spent.append(time.process_time() - begun)
adapters.clients.client = _timed
"""


def handler_env(name: str, *, in_lambda: bool = True) -> dict[str, str]:
    """A clean environment for the handler ``name``: only what its settings need, plus PATH and HOME, and
    ``LAMBDA_TASK_ROOT`` when ``in_lambda``."""
    _, extra = HANDLERS.get(name, ("", {}))
    env = {key: os.environ[key] for key in ("PATH", "HOME") if key in os.environ}
    env.update(_COMMON)
    env.update(extra)
    env["POWERTOOLS_SERVICE_NAME"] = name
    if in_lambda:
        env["LAMBDA_TASK_ROOT"] = str(FUNCTIONS)
    return env


def import_once(
    name: str,
    *,
    importtime: bool = False,
    in_lambda: bool = True,
    time_clients: bool = False,
    functions: Path = FUNCTIONS,
) -> tuple[dict[str, Any], str]:
    """Import one handler (or a floor) in a fresh interpreter: its report, and stderr (``-X importtime``
    output). ``time_clients``: the report's ``client_seconds`` is the time spent creating clients.
    ``functions``: where the code is; a copy without bytecode is imported as the deployed asset is."""
    # __import__: the import statement's own path, which -X importtime times (importlib's would not)
    statement = _FLOORS.get(name) or f"__import__({HANDLERS[name][0]!r})"
    flags = ["-X", "importtime"] if importtime else []
    child = _CHILD.format(functions=str(functions), statement=statement)
    if time_clients:
        child = child.replace("started, ", _TIME_CLIENTS + "started, ", 1)
    env = handler_env(name, in_lambda=in_lambda)
    if functions != FUNCTIONS:
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # /var/task is read-only: every cold start compiles again
    return run_child([*flags, "-c", child], env, what=f"importing {name}", timeout=120)


def run_child(args: list[str], env: dict[str, str], *, what: str, timeout: int) -> tuple[dict[str, Any], str]:
    """Run this interpreter with ``args`` in ``env`` from the repository's root: the JSON object its
    stdout ends with, and its stderr. Raises naming ``what`` if the child fails."""
    done = subprocess.run(  # noqa: S603 - our own interpreter running our own code
        [sys.executable, *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {done.stderr.strip().splitlines()[-3:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1])), done.stderr


def interpreter_start() -> float:
    """Seconds to start and stop this interpreter with nothing to do (measured in-process by the parent)."""
    import time  # noqa: PLC0415 - only this function times a process from outside

    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env={}, timeout=60)
    return time.perf_counter() - started


def slowest_imports(importtime_stderr: str, count: int = 3) -> list[tuple[str, float]]:
    """Where the import time goes, by package, from ``-X importtime`` output (ms, largest first).

    Each time a package is entered from outside it, its cumulative time counts
    for it; packages overlap (one package's time includes those it imports).
    The handler module's own body (settings parsed, clients built) is listed as
    ``<module> body``. First-party packages (``functions/``) are left out: their
    time is mostly the third-party packages they are first to import.
    """
    first_party = {p.name for p in FUNCTIONS.iterdir() if p.is_dir()}
    entries: list[tuple[int, str, int, int]] = []
    for line in importtime_stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        own_us, cumulative_us, name = line.removeprefix("import time:").split("|")
        if not cumulative_us.strip().isdigit():
            continue  # the header
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        entries.append((depth, name.strip(), int(own_us), int(cumulative_us)))
    totals: dict[str, float] = {}
    parents: dict[int, str] = {}
    # The output lists a module after everything it imported: reversed, a parent comes first.
    for depth, name, own, cumulative in reversed(entries):
        parents[depth] = name
        parent = parents.get(depth - 1) if depth else None
        package = name.split(".")[0]
        if depth == 0:
            totals[f"{name} body"] = own / 1000
        elif parent is not None and parent.split(".")[0] != package and package not in first_party:
            totals[package] = totals.get(package, 0.0) + cumulative / 1000
    return sorted(totals.items(), key=lambda item: -item[1])[:count]


def asset_files(root: Path) -> list[Path]:
    """Every file a code asset of ``root`` holds, sorted."""
    files = []
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if any(part in EXCLUDED_DIRS for part in relative.parts[:-1]) or not path.is_file():
            continue
        if path.suffix in EXCLUDED_SUFFIXES or path.name in EXCLUDED_DIRS:
            continue
        files.append(path)
    return sorted(files)


def zipped_size(root: Path, files: Iterable[Path]) -> tuple[int, int]:
    """(zip bytes, uncompressed bytes) of ``files`` stored relative to ``root``, deflated at level 9."""
    buffer = io.BytesIO()
    raw = 0
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for path in files:
            data = path.read_bytes()
            raw += len(data)
            archive.writestr(str(path.relative_to(root)), data)
    return len(buffer.getvalue()), raw


@benchmark("cold-start", "import time of each handler in a fresh interpreter, and each Lambda code asset's size")
def cold_start(quick: bool) -> Result:
    repeats = 2 if quick else 5
    baseline = statistics.median(interpreter_start() for _ in range(repeats))
    result = Result(
        method=(
            f"per handler, {repeats} fresh interpreters (python -c) with a clean environment holding only what its "
            "settings need, LAMBDA_TASK_ROOT set (and again without it), every socket connection refused; "
            "time.perf_counter (and time.process_time: CPU) around `import <name>.handler` "
            "in the child, median; the CPU time of creating clients in another set of runs; "
            "one more run under -X importtime names the slowest top-level imports. Assets: "
            "functions/ zipped (deflate 9) without caches and tests, and per function only the first-party files "
            "its import loaded"
        )
    )
    result.add("interpreter start and exit (python -c pass)", round(baseline * 1000, 1), "ms", "median, for scale")
    shared_zip, shared_raw = zipped_size(FUNCTIONS, asset_files(FUNCTIONS))
    third_party: dict[str, list[str]] = {}
    parser_models: dict[str, bool] = {}

    # The asset as deployed: no __pycache__ (ASSET_EXCLUDE), and Lambda's /var/task is read-only.
    no_bytecode = Path(tempfile.mkdtemp(prefix="cold-start-")) / "functions"
    shutil.copytree(FUNCTIONS, no_bytecode, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    def median_ms(
        name: str,
        *,
        in_lambda: bool = True,
        figure: str = "seconds",
        time_clients: bool = False,
        functions: Path = FUNCTIONS,
    ) -> tuple[float, Mapping[str, Any], list[dict[str, Any]]]:
        reports = [
            import_once(name, in_lambda=in_lambda, time_clients=time_clients, functions=functions)[0]
            for _ in range(repeats)
        ]
        return round(statistics.median(float(r[figure]) for r in reports) * 1000, 1), reports[-1], reports

    def cpu_ms(reports: Iterable[Mapping[str, Any]]) -> float:
        return round(statistics.median(float(r["cpu_seconds"]) for r in reports) * 1000, 1)

    floor_ms, _, floor_reports = median_ms(FLOOR)
    floor_cpu = cpu_ms(floor_reports)
    result.add(
        "floor: botocore + Powertools Logger, Tracer, Metrics",
        floor_ms,
        "ms",
        f"what every handler pays first; CPU time {floor_cpu:.0f} ms",
    )
    boto3_ms, _, boto3_reports = median_ms(FLOOR_BOTO3)
    boto3_cpu = cpu_ms(boto3_reports)
    result.add(
        "floor with boto3 instead of botocore",
        boto3_ms,
        "ms",
        f"{boto3_ms / floor_ms:.2f}x the floor; CPU time {boto3_cpu:.0f} ms, {boto3_cpu / floor_cpu:.2f}x",
    )
    for name in HANDLERS:
        ms, report, reports = median_ms(name)
        cpu = cpu_ms(reports)
        _, importtime = import_once(name, importtime=True)
        slowest = ", ".join(f"{module} {ms:.0f} ms" for module, ms in slowest_imports(importtime))
        result.add(
            f"{name}: import handler",
            ms,
            "ms",
            f"{ms / floor_ms:.2f}x the floor, {ms - floor_ms:.0f} ms above it; CPU time {cpu:.0f} ms, "
            f"{cpu / floor_cpu:.2f}x the floor's, {cpu - floor_cpu:.0f} ms above it; "
            f"most of it: {slowest} (cumulative)",
        )
        clients_ms, *_ = median_ms(name, figure="client_seconds", time_clients=True)
        result.add(
            f"{name}: creating its clients, within the import (CPU time)",
            clients_ms,
            "ms",
            f"clients: {report['clients']}; what creating them on first use would move to the first invocation",
        )
        result.add(
            f"{name}: import handler, no bytecode cache",
            median_ms(name, functions=no_bytecode)[0],
            "ms",
            "as deployed: the asset ships no .pyc and /var/task is read-only, so our modules compile each cold start",
        )
        result.add(
            f"{name}: import handler, outside Lambda",
            median_ms(name, in_lambda=False)[0],
            "ms",
            "no LAMBDA_TASK_ROOT, as local mode",
        )
        own_zip, own_raw = zipped_size(FUNCTIONS, [Path(f) for f in report["files"]])
        result.add(
            f"{name}: asset, imported first-party files only",
            round(own_zip / 1024, 1),
            "KiB",
            f"{len(report['files'])} files, {own_raw / 1024:.0f} KiB unzipped",
        )
        third_party[name] = list(report["third_party"])
        parser_models[name] = bool(report["parser_models"])
    result.add(
        "shared asset: functions/ zipped",
        round(shared_zip / 1024, 1),
        "KiB",
        f"{len(asset_files(FUNCTIONS))} files, {shared_raw / 1024:.0f} KiB unzipped; one asset serves every function",
    )
    shutil.rmtree(no_bytecode.parent, ignore_errors=True)
    result.params = {"repeats": repeats, "third_party_imported": third_party, "parser_models_imported": parser_models}
    return result
