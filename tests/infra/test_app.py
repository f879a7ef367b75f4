"""`python app.py` as a user and as the CDK CLI run it: no AWS credentials, no network, no Docker.

The three runs start together (each pays the jsii start-up once) and are
awaited by one module fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.infra.conftest import CDK_JSON, REPO_ROOT

pytestmark = pytest.mark.infra

TIMEOUT_S = 180


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    outdir: Path


def _clean_env(nowhere: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without AWS credentials, profiles or CDK CLI variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "CDK_")) and k not in {"CONTEXT_OVERFLOW_LOCATION_ENV"}
    }
    # ~/.aws could still supply credentials: point the SDKs' files at nothing.
    # (Not HOME: jsii keeps its unpacked-package cache there.)
    env["AWS_SHARED_CREDENTIALS_FILE"] = env["AWS_CONFIG_FILE"] = str(nowhere / "absent")
    env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"
    env.update(extra)
    return env


def _cli_context(overrides: Mapping[str, object]) -> str:
    """CDK_CONTEXT_JSON as the CLI builds it: cdk.json's context plus -c overrides (strings)."""
    context = json.loads(CDK_JSON.read_text())["context"]
    return json.dumps({**context, **overrides})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    nowhere = tmp_path_factory.mktemp("nowhere")
    cli_out = tmp_path_factory.mktemp("cli.out")
    bad_out = tmp_path_factory.mktemp("bad.out")
    elsewhere = tmp_path_factory.mktemp("cwd")
    plans = {
        # A user in another directory: cdk.json is read next to app.py and the
        # assembly lands in cdk.out/ next to it.
        "direct": (_clean_env(nowhere), REPO_ROOT / "cdk.out"),
        # The CLI: `cdk synth -c table_period=day -c shards=64 --output <dir>`.
        "cli": (
            _clean_env(
                nowhere,
                CDK_CONTEXT_JSON=_cli_context({"table_period": "day", "shards": "64"}),
                CDK_OUTDIR=str(cli_out),
            ),
            cli_out,
        ),
        # The CLI with a value AWS would refuse.
        "bad": (
            _clean_env(
                nowhere,
                CDK_CONTEXT_JSON=_cli_context({"ingest_batch_size": "20000"}),
                CDK_OUTDIR=str(bad_out),
            ),
            bad_out,
        ),
    }
    processes = {
        name: subprocess.Popen(  # noqa: S603 - fixed argv: this interpreter and the repo's app.py
            [sys.executable, str(REPO_ROOT / "app.py")],
            cwd=elsewhere,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (env, _) in plans.items()
    }
    results: dict[str, Run] = {}
    try:
        for name, process in processes.items():
            stdout, stderr = process.communicate(timeout=TIMEOUT_S)
            results[name] = Run(process.returncode, stdout, stderr, plans[name][1])
        yield results
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()


def _template(run: Run) -> dict[str, object]:
    manifest = json.loads((run.outdir / "manifest.json").read_text())
    (stack,) = [a for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"]
    return json.loads((run.outdir / stack["properties"]["templateFile"]).read_text())


def test_python_app_synthesizes_into_cdk_out_without_credentials(runs: dict[str, Run]) -> None:
    run = runs["direct"]
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    template = _template(run)
    types = [r["Type"] for r in template["Resources"].values()]  # type: ignore[union-attr]
    # The defaults: the control table only (the rotator builds the hourly readings tables); rotator, rollup and
    # compaction schedules
    assert types.count("AWS::DynamoDB::GlobalTable") == 1
    assert types.count("AWS::Scheduler::Schedule") == 3
    assert (REPO_ROOT / "cdk.out" / "TimeSeriesIngest.template.json").is_file()


def test_cli_context_and_string_overrides_take_effect(runs: dict[str, Run]) -> None:
    run = runs["cli"]
    assert run.returncode == 0, run.stderr
    template = _template(run)
    resources = template["Resources"].values()  # type: ignore[union-attr]
    tables = [r["Properties"]["TableName"] for r in resources if r["Type"] == "AWS::DynamoDB::GlobalTable"]
    assert tables == ["timeseries-control"]
    assert "64 shards" in str(template["Description"])
    assert "one table per day" in str(template["Description"])


def test_invalid_context_fails_fast_naming_the_key(runs: dict[str, Run]) -> None:
    run = runs["bad"]
    assert run.returncode == 2
    assert "ingest_batch_size: must be at most 10,000, got 20,000" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (run.outdir / "manifest.json").exists()
