"""One synthesis per test session, shared by every infra test.

The app is built with cdk.json's context set explicitly (as the CLI would),
and holds four stacks so that one synth covers the configurations whose
templates differ in kind: the shipped defaults (hourly tables and the
rotator); one readings table with TTL (``table_period`` none); provisioned
capacity on one table with destroy-on-delete, an alarm email, no API Gateway
logging role, uncapped ingest retries, reserved concurrency for ingest and
the hot-key detector and the IoT Core topic rule; and daily provisioned tables with a rotator that exports before it
drops (with every optional capacity key set).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from infra.config import Context, load_cdk_json_context
from tests.infra.template_queries import Synth

# Node 20 is past its end of life for jsii, which prints a banner on every
# start. Silence that banner, for Node 20 only, before aws_cdk loads the runtime.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

REPO_ROOT = Path(__file__).resolve().parents[2]
CDK_JSON = REPO_ROOT / "cdk.json"

#: Context overrides per variant, on top of cdk.json. Values are strings where
#: the CLI would pass strings (``-c key=value``), to exercise that path too.
VARIANTS: Mapping[str, Mapping[str, object]] = {
    "default": {},
    "single": {"stack_name": "TimeSeriesSingleTable", "table_period": "null"},
    "provisioned": {
        "stack_name": "TimeSeriesProvisioned",
        "table_period": "null",
        "billing_mode": "provisioned",
        "read_capacity_min": "50",
        "read_capacity_max": "5000",
        "write_capacity_min": "2000",
        "write_capacity_max": "30000",
        "autoscaling_target_percent": "60",
        "warm_writes_per_s": "20000",
        "deletion_protection": "false",
        "removal_policy": "destroy",
        "point_in_time_recovery": "false",
        "contributor_insights": "off",
        "kinesis_mode": "provisioned",
        "kinesis_shards": "8",
        "kinesis_retention_hours": "48",
        "alarm_email": "ops@example.com",
        "api_cloudwatch_role": "false",
        "hot_split_threshold_wcu": "10",
        "ingest_max_retries": "-1",
        "ingest_max_record_age_s": "-1",
        "ingest_reserved_concurrency": "8",
        "hotkeys_reserved_concurrency": "4",
        "iot_topic_rule": '{"topic_filter": "fleet/+/+/readings", "entity_level": 3}',
    },
    "periodic": {
        "stack_name": "TimeSeriesPeriodic",
        "table_period": "day",
        "bucket": "15m",
        "export_bucket": "timeseries-exports-example",
        # Provisioned period tables sized by the planner and by hand: the rotator's optional capacity keys.
        "billing_mode": "PROVISIONED",
        "period_write_capacity": "4000",
        "peak_writes_per_s": "5000",
        "warm_writes_per_s": "20000",
    },
}


@dataclass(frozen=True)
class Synthesized:
    app: Any
    assembly_dir: Path
    stacks: Mapping[str, Any]
    templates: Mapping[str, Any]
    configs: Mapping[str, Context]
    _json: dict[str, Any] = field(default_factory=dict)

    def template_file(self, variant: str) -> Path:
        return self.assembly_dir / self.stacks[variant].template_file

    def synth(self, variant: str) -> Synth:
        """The variant's stack, config and template JSON, for queries by property."""
        if variant not in self._json:
            self._json[variant] = self.templates[variant].to_json()
        return Synth(stack=self.stacks[variant], config=self.configs[variant], template=self._json[variant])


@pytest.fixture(scope="session")
def cdk_context() -> dict[str, object]:
    return load_cdk_json_context(CDK_JSON)


@pytest.fixture(scope="session")
def synthesized(cdk_context: dict[str, object], tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    # Imported here, not at the top, so the environment above is set before
    # the first aws_cdk import starts the jsii runtime.
    import aws_cdk as cdk  # noqa: PLC0415
    from aws_cdk.assertions import Template  # noqa: PLC0415

    from infra.stack import TimeSeriesStack  # noqa: PLC0415

    outdir = tmp_path_factory.mktemp("cdk.out")
    app = cdk.App(context=cdk_context, outdir=str(outdir))
    stacks: dict[str, Any] = {}
    configs: dict[str, Context] = {}
    for variant, overrides in VARIANTS.items():
        config = Context.parse({**app.node.get_all_context(), **overrides})
        configs[variant] = config
        stacks[variant] = TimeSeriesStack(app, config.stack_name, config=config)
    app.synth()
    templates = {variant: Template.from_stack(stack) for variant, stack in stacks.items()}
    return Synthesized(app=app, assembly_dir=outdir, stacks=stacks, templates=templates, configs=configs)


@pytest.fixture(params=list(VARIANTS))
def synth(synthesized: Synthesized, request: pytest.FixtureRequest) -> Synth:
    """Each variant's synth in turn: a test that takes it runs once a variant (the variant its id)."""
    return synthesized.synth(request.param)
