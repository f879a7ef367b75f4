#!/usr/bin/env python3
"""CDK entry point: ``npx aws-cdk@2 synth`` / ``deploy``, or ``python app.py`` to synthesize offline.

The CDK CLI hands the app its context (cdk.json's ``"context"`` merged with
``-c key=value``) through the environment. Run directly, nobody does, so the
app reads cdk.json's context itself. Synthesis needs no AWS credentials, no
network and no Docker: the stack is environment-agnostic.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# The CLI runs `python3 app.py` with whatever Python is first on PATH. The
# key-design layer lives in functions/ (the Lambda code root), which `make venv`
# puts on the venv's path; putting it here too lets any interpreter that has
# requirements.txt installed synthesize.
if str(ROOT / "functions") not in sys.path:
    sys.path.insert(0, str(ROOT / "functions"))

import aws_cdk as cdk  # noqa: E402

from infra.config import ConfigError, Context, load_cdk_json_context  # noqa: E402
from infra.stack import TimeSeriesStack  # noqa: E402

# Set by the CDK CLI (aws-cdk-lib's cx-api CONTEXT_ENV, CONTEXT_OVERFLOW_LOCATION_ENV
# and OUTDIR_ENV; the Python bindings do not export the constants).
CLI_CONTEXT_ENV = ("CDK_CONTEXT_JSON", "CONTEXT_OVERFLOW_LOCATION_ENV")
CLI_OUTDIR_ENV = "CDK_OUTDIR"


def main() -> int:
    from_cli = any(os.environ.get(name) for name in CLI_CONTEXT_ENV)
    try:
        defaults = {} if from_cli else load_cdk_json_context(ROOT / "cdk.json")
    except ConfigError as exc:
        print(f"app.py: {exc}", file=sys.stderr)
        return 2
    # Without the CLI's CDK_OUTDIR, App would synthesize into a temporary
    # directory; cdk.out/ next to this file is where `cdk deploy --app cdk.out` looks.
    outdir = None if os.environ.get(CLI_OUTDIR_ENV) else str(ROOT / "cdk.out")
    app = cdk.App(context=defaults, outdir=outdir)

    try:
        config = Context.parse(app.node.get_all_context())
    except ConfigError as exc:
        print(
            f"app.py: invalid configuration: {exc}\n"
            f'  (set it in cdk.json\'s "context" or with -c {exc.field}=...; see docs/configuration.md)',
            file=sys.stderr,
        )
        return 2

    TimeSeriesStack(app, config.stack_name, config=config)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
