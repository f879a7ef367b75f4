"""Cold start: how long importing each handler module takes, each Lambda code asset's size, and what is
left on the first request of a query function restored from its SnapStart snapshot.

Import time is measured in a fresh interpreter per run (``python -c``), with
a clean environment holding only what the function's settings need (see each
``functions/<name>/settings.py``), so nothing is cached from an earlier
import. ``LAMBDA_TASK_ROOT`` is set, as the Lambda runtime sets it; a second
figure per handler leaves it out, as local mode runs. The floor is the same
interpreter importing only botocore's session and building Powertools' Logger
and Metrics: what every handler pays before a line of its own (and again with
boto3, which the handlers no longer import). The child times ``import
<name>.handler`` with ``time.perf_counter`` (and its CPU time with
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

The query function runs with SnapStart, so its import is paid once per published version and a
cold start restores the snapshot instead. What is left is measured on a moto server on loopback
holding the default deployment's tables (``cdk.json``) and an hour of readings written through the
ingest logic: a fresh child runs init, the before-snapshot hooks (priming included), the
after-restore hooks, then the first request (the last hour of one sensor reporting 5 times a
second, the API's default page) and warm ones, each timed in CPU, with the AWS calls each made. Lambda's
``snapshot_restore_py`` is played by a module recording the hooks. Alternating with it, a child
that cold-starts (no hooks, no priming) gives the first request a plain cold start would serve.

Asset size: the ``functions/`` directory zipped as a CDK code asset would be
(deflate, level 9), without ``__pycache__``, ``*.pyc``, tool caches and tests.
Every function can share that one asset; the per-function figure is the
zip of only the first-party files the handler actually imported. Third-party
packages are not in the asset: ``aws_lambda_powertools`` (and the
``pydantic`` it uses) come from the Powertools Lambda layer, ``boto3`` /
``botocore`` from the Lambda Python runtime.

The ``tracing`` benchmark (below) compares what tracing the functions' AWS calls costs three ways.
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
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.harness import Result, benchmark
from doubles.lambda_context import FakeLambdaContext

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
    "rollup": ("rollup.handler", {"ROLLUPS": "1m,1h,1d"}),
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


#: What every handler runs before its own code (botocore's session, and the two objects of
#: adapters/observability.py): the floor of its import time; and the same with boto3, for comparison.
FLOOR, FLOOR_BOTO3 = "floor", "floor with boto3"
_POWERTOOLS = "from aws_lambda_powertools import Logger, Metrics\nLogger(); Metrics(namespace='TimeSeries')"
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


def run_child(
    args: list[str], env: dict[str, str], *, what: str, timeout: int, cwd: Path = ROOT
) -> tuple[dict[str, Any], str]:
    """Run this interpreter with ``args`` in ``env`` from ``cwd`` (the repository's root): the JSON object its
    stdout ends with, and its stderr. Raises naming ``what`` if the child fails."""
    done = subprocess.run(  # noqa: S603 - our own interpreter running our own code
        [sys.executable, *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {done.stderr.strip().splitlines()[-3:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1])), done.stderr


def median_of(reports: Iterable[Mapping[str, Any]], key: str) -> float:
    """The median of ``key`` over the children's ``reports``."""
    return statistics.median(float(r[key]) for r in reports)


def interpreter_start() -> float:
    """Seconds to start and stop this interpreter with nothing to do (measured in-process by the parent)."""
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


@benchmark(
    "cold-start",
    "each handler's import in a fresh interpreter, each code asset's size, a restored query function's first request",
)
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

    def median_ms(name: str, figure: str = "seconds", **options: Any) -> tuple[float, float, Mapping[str, Any]]:
        """``import_once(name, **options)`` ``repeats`` times: the medians of ``figure`` and of the CPU time in
        ms, and the last report."""
        reports = [import_once(name, **options)[0] for _ in range(repeats)]
        cpu = round(median_of(reports, "cpu_seconds") * 1000, 1)
        return round(median_of(reports, figure) * 1000, 1), cpu, reports[-1]

    floor_ms, floor_cpu, _ = median_ms(FLOOR)
    result.add(
        "floor: botocore + Powertools Logger, Metrics",
        floor_ms,
        "ms",
        f"what every handler pays first; CPU time {floor_cpu:.0f} ms",
    )
    boto3_ms, boto3_cpu, _ = median_ms(FLOOR_BOTO3)
    result.add(
        "floor with boto3 instead of botocore",
        boto3_ms,
        "ms",
        f"{boto3_ms / floor_ms:.2f}x the floor; CPU time {boto3_cpu:.0f} ms, {boto3_cpu / floor_cpu:.2f}x",
    )
    for name in HANDLERS:
        ms, cpu, report = median_ms(name)
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
    first_request_figures(result, quick)
    return result


# -- a restored query function's first request -----------------------------------------------------------

#: What a dashboard opens with after a quiet hour: the last hour of one sensor, the API's default page (100).
FIRST_ENTITY = "sensor-alpha-001"
#: The seed workload's sensors report 5 times a second; others share the partitions.
FIRST_RATE_PER_S = 5
OTHER_ENTITIES = 200
#: The target: a restored copy's first request costs at most this many warm requests (CPU).
FIRST_REQUEST_TARGET = 1.5


def provision(endpoint_url: str, now_ms: int) -> dict[str, str]:
    """In a child: the default deployment's query tables on the moto server at ``endpoint_url``,
    an hour of readings written through the real ingest logic (blocks, occupancy records, the
    ``since`` marker), the cursor key in Secrets Manager. Returns the query function's environment."""
    import logging  # noqa: PLC0415 - the children's imports are theirs

    from adapters.clients import client  # noqa: PLC0415
    from adapters.observability import metrics  # noqa: PLC0415
    from benchmarks.ingest import lambda_records  # noqa: PLC0415
    from infra.config import (  # noqa: PLC0415
        READINGS_SCHEMA,
        Context,
        FunctionWiring,
        LambdaFunction,
        load_cdk_json_context,
    )
    from ingest.kinesis_records import parse_records  # noqa: PLC0415
    from ingest.logic import Ingestor  # noqa: PLC0415
    from ingest.settings import IngestSettings  # noqa: PLC0415
    from local_runtime.resources import ResourceNames, TableDefinition, table_definitions  # noqa: PLC0415

    logging.getLogger("aws_lambda_powertools").setLevel(logging.ERROR)
    config = Context.parse(load_cdk_json_context(ROOT / "cdk.json"))
    names = ResourceNames.for_config(config, now_ms)
    dynamodb = client("dynamodb")
    layout = config.layout()
    hour_ago = now_ms - 3_600_000
    readings_tables = {layout.table_for(hour_ago), layout.table_for(now_ms)}
    tables = [TableDefinition(name, READINGS_SCHEMA, "PAY_PER_REQUEST") for name in sorted(readings_tables)]
    tables += [t for t in table_definitions(config, names) if t.name == names.control_table]
    for table in tables:
        dynamodb.create_table(**table.create_request())
    secret_arn = client("secretsmanager").create_secret(Name=names.cursor_secret, SecretString="k" * 64)["ARN"]
    queue_url = client("sqs").create_queue(QueueName=names.rejects_queue)["QueueUrl"]

    ingest_env = config.function_environment(LambdaFunction.INGEST, FunctionWiring(rejects_queue_url=queue_url))
    ingestor = Ingestor.from_settings(IngestSettings.from_env(ingest_env))
    items: list[dict[str, Any]] = []
    for second in range(3_600):
        at = hour_ago + second * 1_000
        items += [
            {
                "entity_id": FIRST_ENTITY,
                "event_id": f"a{second}-{n}",
                "timestamp": at + n * 200,
                "measures": {"t": 20.5},
            }
            for n in range(FIRST_RATE_PER_S)
        ]
        if second % 60 == 0:  # every minute, each other sensor once
            items += [
                {"entity_id": f"sensor-{e:05d}", "timestamp": at + e, "measures": {"t": 19.0 + e % 7}}
                for e in range(OTHER_ENTITIES)
            ]
    try:
        for start in range(0, len(items), 5_000):  # one ingest batch per 5,000 readings, as a stream delivers them
            outcome = ingestor.ingest(
                parse_records({"Records": lambda_records(items[start : start + 5_000], packed=True)}), 900_000
            )
            assert not outcome.failed_records, "provisioning could not store the readings"
    finally:
        ingestor.close()
        metrics.clear_metrics()
    return config.function_environment(LambdaFunction.QUERY, FunctionWiring(cursor_secret_arn=secret_arn))


def restored_query(now_ms: int, warm: int, hooks: bool) -> dict[str, Any]:
    """In a fresh child, as Lambda restores a SnapStart copy: init (``import query.handler``), the
    before-snapshot hooks, the after-restore hooks (CPU), then the first request and ``warm`` more
    (CPU each, and the AWS calls each made). ``hooks`` False: no snapshot, the first request after a
    plain cold start. Lambda's ``snapshot_restore_py`` is played by a module that records the hooks."""
    import types  # noqa: PLC0415
    from collections import Counter  # noqa: PLC0415
    from functools import partial  # noqa: PLC0415
    from urllib.parse import urlencode  # noqa: PLC0415

    registered: dict[str, list[Any]] = {"before": [], "after": []}
    runtime = types.ModuleType("snapshot_restore_py")
    runtime.register_before_snapshot = lambda hook, *args: registered["before"].append(partial(hook, *args))  # type: ignore[attr-defined]
    runtime.register_after_restore = lambda hook, *args: registered["after"].append(partial(hook, *args))  # type: ignore[attr-defined]
    if hooks:
        sys.modules["snapshot_restore_py"] = runtime

    cpu = time.process_time()
    from query import handler  # noqa: PLC0415 - init

    init_ms = (time.process_time() - cpu) * 1000

    from botocore.session import Session  # noqa: PLC0415

    from adapters import clients  # noqa: PLC0415
    from adapters.observability import metrics  # noqa: PLC0415
    from keydesign import format_ts  # noqa: PLC0415
    from local_runtime.api_gateway import HttpRequest, proxy_event  # noqa: PLC0415

    cpu = time.process_time()
    for hook in reversed(registered["before"]):  # Lambda runs them in reverse order of registration
        hook()
    snapshot_ms = (time.process_time() - cpu) * 1000
    cpu = time.process_time()
    for hook in registered["after"]:
        hook()
    restore_ms = (time.process_time() - cpu) * 1000

    # Count every AWS call: on the clients init made, and on any made later (the secret's, on first use).
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    for made in clients._clients.values():
        made.meta.events.register("before-call", count)
    create_client = Session.create_client

    def counted(self: Session, *args: Any, **kwargs: Any) -> Any:
        made = create_client(self, *args, **kwargs)
        made.meta.events.register("before-call", count)
        return made

    Session.create_client = counted

    params = urlencode({"from": format_ts(now_ms - 3_600_000), "to": format_ts(now_ms)})
    request = HttpRequest("GET", f"/v1/entities/{FIRST_ENTITY}/readings?{params}", [], b"", "127.0.0.1", "localhost")
    event = proxy_event(request, stage="v1", request_id="benchmark", now_ms=now_ms)
    spent: list[float] = []
    made_calls: list[dict[str, int]] = []
    for _ in range(1 + warm):
        calls.clear()
        cpu = time.process_time()
        answer = handler.handler(event, FakeLambdaContext(28_000, function_name="query"))
        spent.append((time.process_time() - cpu) * 1000)
        made_calls.append(dict(calls))
        if answer["statusCode"] != 200 or len(json.loads(answer["body"])["items"]) != 100:
            raise AssertionError(f"the page was not served: {answer['statusCode']} {answer['body'][:300]}")
    metrics.clear_metrics()
    return {
        "init_ms": init_ms,
        "snapshot_ms": snapshot_ms,
        "restore_ms": restore_ms,
        "first_ms": spent[0],
        "warm_ms": statistics.median(spent[1:]),
        "first_calls": made_calls[0],
        "warm_calls": made_calls[-1],
        "hooks_registered": [len(registered["before"]), len(registered["after"])],
    }


def first_request_figures(result: Result, quick: bool) -> None:
    """Add what a restored query function's first request costs, against a warm one (moto on loopback)."""
    from local_runtime.moto_server import EmbeddedMoto  # noqa: PLC0415 - only this part needs a server

    runs, warm = (2, 20) if quick else (5, 50)
    now_ms = int(time.time() * 1000)
    with EmbeddedMoto() as moto:
        env = handler_env("query", in_lambda=False)
        env.update(
            AWS_ENDPOINT_URL=moto.endpoint_url,
            AWS_ACCESS_KEY_ID="benchmark",
            AWS_SECRET_ACCESS_KEY="benchmark",  # noqa: S106 - moto's, it checks none
            PYTHONPATH=os.pathsep.join([str(FUNCTIONS), str(ROOT)]),
            POWERTOOLS_LOG_LEVEL="WARNING",
        )
        env.pop("CURSOR_SECRET")  # provisioning puts the key in Secrets Manager: the function reads it there
        deployed = run_child(
            ["-m", "benchmarks.cold_start", "provision", str(now_ms)], env, what="provisioning", timeout=900
        )[0]
        env.update(deployed)
        restored: list[dict[str, Any]] = []
        cold: list[dict[str, Any]] = []
        for _ in range(runs):  # alternating: both see the same load
            for kind, into in (("restored", restored), ("cold", cold)):
                args = ["-m", "benchmarks.cold_start", kind, str(now_ms), str(warm)]
                into.append(run_child(args, env, what=f"the {kind} query function", timeout=600)[0])

    def median(reports: list[dict[str, Any]], key: str) -> float:
        return round(median_of(reports, key), 1)

    warm_ms, first_ms = median(restored, "warm_ms"), median(restored, "first_ms")
    ratios = sorted(r["first_ms"] / r["warm_ms"] for r in restored)
    extra = {k: v - restored[-1]["warm_calls"].get(k, 0) for k, v in restored[-1]["first_calls"].items()}
    result.add(
        "query, before the snapshot: priming and closing (CPU)",
        median(restored, "snapshot_ms"),
        "ms",
        "paid once per published version, in its init",
    )
    result.add(
        "query, restored: after-restore hooks (CPU)",
        median(restored, "restore_ms"),
        "ms",
        "reseed, close, renew, forget",
    )
    result.add(
        "query, restored: first request (CPU)",
        first_ms,
        "ms",
        f"its AWS calls: {restored[-1]['first_calls']}; beyond a warm request's: "
        f"{ {k: v for k, v in extra.items() if v} }",
    )
    result.add("query, restored: warm request (CPU)", warm_ms, "ms", f"median of {warm} after the first, per run")
    result.add(
        "query, restored: first request / warm request (CPU)",
        round(statistics.median(ratios), 2),
        "x",
        f"target <= {FIRST_REQUEST_TARGET}; runs: {', '.join(f'{r:.2f}' for r in ratios)}",
    )
    cold_ratio = median(cold, "first_ms") / median(cold, "warm_ms")
    result.add(
        "query, plain cold start: first request (CPU)",
        median(cold, "first_ms"),
        "ms",
        f"init in the same process, no hooks, no priming: {cold_ratio:.2f}x its warm request",
    )
    result.params["restored_query"] = {"runs": runs, "warm_requests": warm, "reports": restored, "cold": cold}


# -- tracing: what each way of tracing the functions' AWS calls costs --------------------------------------

TRACING = ("lambda", "xray", "otel")
#: Calls per invocation: ingest makes hundreds of BatchWriteItem calls for a batch of 10,000 readings.
TRACED_CALLS = 200
#: The trace header Lambda hands a sampled invocation (``_X_AMZN_TRACE_ID``).
TRACE_HEADER = "Root=1-67891233-abcdef012345678912345678;Parent=53995c3f42cd8ad8;Sampled=1"


def _traced_invocation(mode: str, sent: list[int]) -> Callable[[Callable[[], None]], None]:
    """Set up ``mode``'s tracing (what is timed as its import and set-up) and return how one invocation runs
    its work under it; ``sent`` counts the subsegments or spans it sends."""
    if mode == "xray":
        from aws_lambda_powertools import Tracer  # noqa: PLC0415 - the child's imports are what is measured

        tracer = Tracer(patch_modules=("botocore",))
        from aws_xray_sdk.core import xray_recorder  # type: ignore[import-untyped]  # noqa: PLC0415

        send = xray_recorder.emitter.send_entity

        def counted(entity: Any) -> Any:
            sent[0] += 1
            return send(entity)

        xray_recorder.emitter.send_entity = counted
        return lambda work: tracer.capture_lambda_handler(capture_response=False)(lambda *_: work())(
            {}, FakeLambdaContext(28_000, function_name="query")
        )
    if mode == "otel":
        from opentelemetry import trace  # noqa: PLC0415
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: PLC0415
        from opentelemetry.instrumentation.botocore import BotocoreInstrumentor  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: PLC0415

        class Encoded(SpanExporter):
            def export(self, spans: Any) -> Any:
                encode_spans(spans).SerializeToString()
                sent[0] += len(spans)
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Encoded()))
        trace.set_tracer_provider(provider)
        BotocoreInstrumentor().instrument()  # type: ignore[no-untyped-call]
        otel = trace.get_tracer("benchmark")

        def invocation(work: Callable[[], None]) -> None:
            with otel.start_as_current_span("invocation"):
                work()
            provider.force_flush()

        return invocation
    return lambda work: work()


def traced_calls(mode: str, calls: int, rounds: int) -> dict[str, Any]:
    """In a fresh child: what setting up ``mode``'s tracing costs beyond botocore and Powertools' Logger and
    Metrics (import and set-up, wall and CPU), then the CPU of one BatchWriteItem of 25 blocks (answered in
    the process by a ``before-send`` handler: every step of botocore's but the network) inside invocations of
    ``calls`` calls each, as the function would trace them; median of ``rounds`` invocations.

    ``lambda``: Lambda's active tracing, nothing in the function. ``xray``: Powertools' Tracer (the X-Ray
    SDK) patching botocore, one subsegment per call sent to the daemon's UDP port as in Lambda.
    ``otel``: the OpenTelemetry SDK with its botocore instrumentation, one span per call, batched and
    encoded as OTLP protobuf at the end of each invocation (what the ADOT collector receives; the
    collector, a Lambda extension of its own, is not measured)."""
    import botocore.session  # noqa: PLC0415
    from aws_lambda_powertools import Logger, Metrics  # noqa: PLC0415
    from botocore.awsrequest import AWSResponse  # noqa: PLC0415

    Logger(), Metrics(namespace="TimeSeries")
    sent = [0]
    started, cpu = time.perf_counter(), time.process_time()
    invocation = _traced_invocation(mode, sent)
    setup = (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000
    dynamodb = botocore.session.Session().create_client(
        "dynamodb",
        region_name="eu-west-1",
        aws_access_key_id="a",
        aws_secret_access_key="b",  # noqa: S106
    )

    def answer(request: Any, **_: Any) -> AWSResponse:
        response = AWSResponse(request.url, 200, {"Content-Type": "application/x-amz-json-1.0"}, None)
        response._content = b'{"UnprocessedItems": {}}'
        return response

    dynamodb.meta.events.register("before-send.dynamodb", answer)
    items = [{"PutRequest": {"Item": {"pk": {"S": f"p{n}"}, "sk": {"S": f"s{n}"}, "b": {"B": b"x" * 200}}}}
             for n in range(25)]  # fmt: skip

    def work() -> None:
        for _ in range(calls):
            dynamodb.batch_write_item(RequestItems={"readings": items})

    invocation(work)  # the first pays for what botocore builds on first use
    sent[0] = 0
    per_call = []
    for _ in range(rounds):
        cpu = time.process_time()
        invocation(work)
        per_call.append((time.process_time() - cpu) * 1000 / calls)
    return {
        "setup_ms": setup[0],
        "setup_cpu_ms": setup[1],
        "per_call_cpu_ms": statistics.median(per_call),
        "emitted_per_call": sent[0] / (calls * rounds),
    }


def tracing_env() -> dict[str, str]:
    """A Lambda-like environment for the tracing children: the X-Ray SDK traces (and sends) only inside one."""
    env = {key: os.environ[key] for key in ("PATH", "HOME") if key in os.environ}
    env.update(
        LAMBDA_TASK_ROOT=str(FUNCTIONS),
        AWS_LAMBDA_FUNCTION_NAME="ingest",
        _X_AMZN_TRACE_ID=TRACE_HEADER,
        AWS_XRAY_DAEMON_ADDRESS="127.0.0.1:2000",  # UDP on loopback: sent, whether or not anyone listens
        POWERTOOLS_SERVICE_NAME="ingest",
        AWS_EC2_METADATA_DISABLED="true",
        PYTHONPATH=os.pathsep.join([str(FUNCTIONS), str(ROOT)]),
    )
    return env


@benchmark("tracing", "what tracing the functions' AWS calls costs: Lambda's own, the X-Ray SDK, OpenTelemetry")
def tracing(quick: bool) -> Result:
    runs, rounds = (2, 3) if quick else (5, 7)
    found: dict[str, list[dict[str, Any]]] = {mode: [] for mode in TRACING}
    for _ in range(runs):  # alternating: every mode sees the same load
        for mode in TRACING:
            args = ["-m", "benchmarks.cold_start", "tracing", mode, str(TRACED_CALLS), str(rounds)]
            found[mode].append(run_child(args, tracing_env(), what=f"tracing with {mode}", timeout=300)[0])
    result = Result(
        params={"runs": runs, "calls_per_invocation": TRACED_CALLS, "invocations": rounds},
        method=(
            f"{runs} fresh interpreters per mode, alternating, with a Lambda-like environment (LAMBDA_TASK_ROOT, a "
            "sampled _X_AMZN_TRACE_ID, the X-Ray daemon's address on loopback); each times the import and set-up of "
            "its tracer after botocore and Powertools' Logger and Metrics, then the CPU of invocations of "
            f"{TRACED_CALLS} BatchWriteItem calls of 25 blocks answered in the process by a before-send handler "
            "(botocore's every step but the network); medians"
        ),
    )

    def median(mode: str, key: str) -> float:
        return median_of(found[mode], key)

    base = median("lambda", "per_call_cpu_ms")
    names = {
        "lambda": "Lambda's active tracing, no SDK in the function",
        "xray": "Powertools' Tracer (X-Ray SDK), botocore patched",
        "otel": "OpenTelemetry SDK, botocore instrumented, OTLP encoded",
    }
    for mode, name in names.items():
        if mode != "lambda":
            result.add(
                f"{name}: import and set-up",
                round(median(mode, "setup_ms"), 1),
                "ms",
                f"CPU {median(mode, 'setup_cpu_ms'):.0f} ms; every cold start SnapStart does not cover pays it",
            )
        per_call = median(mode, "per_call_cpu_ms")
        note = "nothing traced in the process; the trace has no subsegment per call"
        if mode != "lambda":
            note = (
                f"+{(per_call - base) * 1000:.0f} us ({(per_call - base) / base:.0%}) a call; "
                f"{median(mode, 'emitted_per_call'):.2f} subsegments or spans sent per call"
            )
        result.add(f"{name}: CPU per BatchWriteItem", round(per_call, 3), "ms", note)
    return result


if __name__ == "__main__":
    if sys.argv[1] == "provision":
        print(json.dumps(provision(os.environ["AWS_ENDPOINT_URL"], int(sys.argv[2]))))
    elif sys.argv[1] == "tracing":
        print(json.dumps(traced_calls(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        print(json.dumps(restored_query(int(sys.argv[2]), int(sys.argv[3]), hooks=sys.argv[1] == "restored")))
