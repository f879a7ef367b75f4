"""The CDK app's infrastructure: typed configuration and one construct per concern.

``infra.config`` is pure Python (the local runtime and the CLI import it too);
every other module imports ``aws_cdk``.
"""
