"""IAM conformance: every AWS action a function's code calls is granted to that function's role.

A test drives one function's real code against moto inside :func:`recording`; a
botocore call made meanwhile counts for that function when the function's own package
(``functions/<package>/``) is on the calling stack, or when it is made from code under
``functions/`` on another thread (the thread pools the function's code starts: those
stacks hold only the shared adapters). Calls the test itself makes on its own thread
(creating tables, reading results, even through the adapters) do not count. The recorded
actions are then looked up in the function's role in the synthesized templates: the
default one (hourly tables, no export bucket) and one with daily tables and an export
bucket. This turns a missing permission into a failing test instead of an AccessDenied
in the account. Only the action is checked, not the resource or the condition: those
are asserted per statement in tests/infra.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import patch

from botocore.client import BaseClient

FUNCTIONS_DIR = str(Path(__file__).resolve().parents[2] / "functions") + os.sep
REPO_ROOT = Path(__file__).resolve().parents[2]
#: IAM's service prefix where it differs from the name botocore signs with.
IAM_PREFIX = {"monitoring": "cloudwatch"}
#: Operations IAM authorises with another action.
AUTHORISED_BY = {
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "lambda:Invoke": "lambda:InvokeFunction",
}
#: Creating with tags is also authorised as tagging: the service checks TagResource on the new resource.
TAGGED_ON_CREATE = {
    "dynamodb:CreateTable": "dynamodb:TagResource",
    "cloudwatch:PutMetricAlarm": "cloudwatch:TagResource",
}
#: The deployments checked: the shipped defaults, and daily tables exported before they are dropped.
VARIANTS: Mapping[str, Mapping[str, object]] = {
    "default": {},
    "daily-with-exports": {"stack_name": "IamDaily", "table_period": "day", "export_bucket": "iam-exports-example"},
}


#: Granted to every function for the Lambda service itself, never called by the function's code.
LAMBDA_SERVICE = {
    "xray:PutTraceSegments": "the Lambda service's X-Ray integration, not the function's code",
    "xray:PutTelemetryRecords": "the Lambda service's X-Ray integration, not the function's code",
    "logs:CreateLogStream": "the Lambda runtime writes the function's log",
    "logs:PutLogEvents": "the Lambda runtime writes the function's log",
}
#: Granted with a stream mapping's on-failure queue: the mapping, not the code, uses them.
FAILURE_DESTINATION = {
    "sqs:GetQueueAttributes": "the event source mapping checks its on-failure destination",
    "sqs:GetQueueUrl": "granted with the destination by CDK's grant; the mapping may resolve the queue",
}


def iam_action(client: Any, operation: str) -> str:
    model = client.meta.service_model
    prefix = IAM_PREFIX.get(model.signing_name, model.signing_name)
    action = f"{prefix}:{operation}"
    return AUTHORISED_BY.get(action, action)


def _made_by(package: str) -> bool:
    own = f"{FUNCTIONS_DIR}{package}{os.sep}"
    pooled = threading.current_thread() is not threading.main_thread()
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(own) or (pooled and filename.startswith(FUNCTIONS_DIR)):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


@contextmanager
def recording(package: str) -> Iterator[set[str]]:
    """The IAM actions the code of ``functions/<package>`` calls while inside."""
    actions: set[str] = set()
    real = BaseClient._make_api_call

    def record(client: Any, operation: str, params: Any) -> Any:
        if _made_by(package):
            action = iam_action(client, operation)
            actions.add(action)
            if action in TAGGED_ON_CREATE and params.get("Tags"):
                actions.add(TAGGED_ON_CREATE[action])
        return real(client, operation, params)

    with patch.object(BaseClient, "_make_api_call", record):
        yield actions


@functools.cache
def _templates() -> dict[str, dict[str, Any]]:
    """Synthesized once per test run (a few tens of seconds: the CDK's jsii runtime). Under pytest-xdist
    the first worker to ask synthesizes, holding a lock, and leaves the templates for the others in a file
    named by the run's id (``PYTEST_XDIST_TESTRUNUID``: new each run unless ``--testrunuid`` fixes it, so
    never the templates of an earlier tree)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return _synthesize()
    shared = Path(tempfile.gettempdir()) / f"iam-conformance-{run}.json"
    with shared.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not shared.exists():
            templates = _synthesize()
            shared.write_text(json.dumps(templates))
            return templates
    loaded: dict[str, dict[str, Any]] = json.loads(shared.read_text())
    return loaded


def _synthesize() -> dict[str, dict[str, Any]]:
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    import aws_cdk as cdk  # noqa: PLC0415

    from infra.config import Context, load_cdk_json_context  # noqa: PLC0415
    from infra.stack import TimeSeriesStack  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="iam-conformance-") as outdir:
        app = cdk.App(context=load_cdk_json_context(REPO_ROOT / "cdk.json"), outdir=outdir)
        names = {}
        for variant, overrides in VARIANTS.items():
            config = Context.parse({**app.node.get_all_context(), **overrides})
            names[variant] = TimeSeriesStack(app, config.stack_name, config=config).stack_name
        app.synth()
        return {v: json.loads((Path(outdir) / f"{name}.template.json").read_text()) for v, name in names.items()}


def granted(function: str) -> dict[str, frozenset[str]]:
    """Per variant, the actions the role of function ``<stack>-<function>`` is allowed."""
    found: dict[str, frozenset[str]] = {}
    for variant, template in _templates().items():
        resources = template["Resources"]
        roles = [
            r["Properties"]["Role"]["Fn::GetAtt"][0]
            for r in resources.values()
            if r["Type"] == "AWS::Lambda::Function"
            and str(r["Properties"].get("FunctionName", "")).endswith(f"-{function}")
        ]
        if not roles:
            continue  # the rotator exists only with a table period
        actions: set[str] = set()
        for policy in resources.values():
            if policy["Type"] == "AWS::IAM::Policy" and {"Ref": roles[0]} in policy["Properties"]["Roles"]:
                for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                    if statement["Effect"] == "Allow":
                        action = statement["Action"]
                        actions.update([action] if isinstance(action, str) else action)
        found[variant] = frozenset(actions)
    return found


def assert_conforms(
    function: str, called: set[str], *, not_called: Mapping[str, str], variants: Iterable[str] = VARIANTS
) -> None:
    """Every action ``called`` is granted to the function in each of ``variants`` (the deployments the
    run was configured like); every granted action is either called or listed in ``not_called`` with
    the reason it is granted anyway (the Lambda service's own, :data:`LAMBDA_SERVICE`, always are)."""
    assert called, f"the {function} test recorded no AWS call: it drives nothing"
    for variant, actions in granted(function).items():
        if variant not in variants:
            continue
        missing = called - actions
        assert not missing, f"{function} calls {sorted(missing)}, which its role does not grant ({variant})"
        unexercised = actions - called - set(not_called) - set(LAMBDA_SERVICE)
        assert not unexercised, (
            f"{function}'s role grants {sorted(unexercised)} ({variant}) but no test exercises them: "
            "exercise them here or remove the grant"
        )
