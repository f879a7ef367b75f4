"""boto3 clients, created once per container with botocore's ``standard`` retry mode.

Every client comes from one boto3 session: a session loads each service's
model and the endpoint rules once, so a second client costs 10-30 ms instead
of the 110-170 ms a fresh session pays again (docs/benchmarks.md, cold start).
There is one client per service and configuration; boto3 clients are
thread-safe, sessions are not, hence the lock around creation.

The region comes from the environment (``AWS_REGION`` in Lambda); the endpoint
too: boto3 honours ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_<SERVICE>``),
which is how the local runtime points every client at its moto server without
a line of special code here.
"""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config

_lock = threading.Lock()
_clients: dict[tuple[str, int, int, bool], Any] = {}
_session: list[boto3.session.Session] = []


def client_config(*, max_attempts: int = 3, pool: int = 32, validate: bool = True) -> Config:
    """botocore config: standard retries (with its own backoff for throttling), a
    connection pool sized for the parallel calls a handler makes, and timeouts
    well inside a Lambda's own. ``validate=False`` skips botocore's walk of every
    parameter before a call: for requests our own serialiser built, which refuses
    what DynamoDB would (DynamoDB still validates them)."""
    return Config(
        retries={"mode": "standard", "max_attempts": max_attempts},
        max_pool_connections=pool,
        connect_timeout=5,
        read_timeout=20,
        tcp_keepalive=True,
        parameter_validation=validate,
    )


def client(service: str, *, max_attempts: int = 3, pool: int = 32, validate: bool = True) -> Any:
    """The process-wide client for ``service`` and this configuration; thread-safe, created on first use."""
    key = (service, max_attempts, pool, validate)
    found = _clients.get(key)
    if found is not None:
        return found
    with _lock:
        found = _clients.get(key)
        if found is None:
            if not _session:
                _session.append(boto3.session.Session())
            config = client_config(max_attempts=max_attempts, pool=pool, validate=validate)
            found = _session[0].client(service, config=config)
            _clients[key] = found
        return found


def reset_clients() -> None:
    """Forget every cached client and the session (tests that switch mocks, endpoints or credentials call this)."""
    with _lock:
        _clients.clear()
        _session.clear()
