"""botocore clients, created once per container with botocore's ``standard`` retry mode.

Every client comes from one botocore session (boto3 is not imported: nothing
on a handler's path uses it, and importing it and its session cost 25-40 ms
of every cold start). A session loads each service's model and the endpoint
rules once, so a second client costs 10-30 ms instead of the 110-170 ms a
fresh session pays again (docs/benchmarks.md, cold start). There is one
client per service and configuration; botocore clients are thread-safe,
sessions are not, hence the lock around creation.

The region comes from the environment (``AWS_REGION`` in Lambda); the endpoint
too: botocore honours ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_<SERVICE>``),
which is how the local runtime points every client at its moto server without
a line of special code here.
"""

from __future__ import annotations

import json
import os
import platform
import threading
from typing import Any

import botocore
from botocore.config import Config
from botocore.loaders import JSONFileLoader, Loader
from botocore.session import Session

#: Every client's User-Agent, made once. botocore's default is rebuilt from a dozen parts twice a
#: call (16% of a BatchWriteItem's CPU, docs/benchmarks.md); this one keeps botocore's and
#: Python's versions, and names the product in CloudTrail's ``userAgent``.
USER_AGENT = f"timeseries-dynamodb Botocore/{botocore.__version__} Python/{platform.python_version()}"

_lock = threading.Lock()
_clients: dict[tuple[str, int, int, bool], Any] = {}
_session: list[Session] = []


class _PlainJSONFiles(JSONFileLoader):  # type: ignore[misc]  # botocore is untyped (no stubs)
    """botocore's data files parsed into plain dicts (ordered, as every dict is) instead of through
    the ``OrderedDict`` hook botocore passes, which doubles the parse of the 1.2 MB endpoints.json."""

    def _load_file(self, full_path: str, open_method: Any) -> Any:
        if not os.path.isfile(full_path):
            return None
        with open_method(full_path, "rb") as fp:
            return json.loads(fp.read())


class _DataLoader(Loader):  # type: ignore[misc]  # botocore is untyped
    """botocore's loader, but a service is any directory of the data path: botocore lists each of its
    ~440 service directories to find which hold the file type asked for (twice per cold start, once
    for models and once for endpoint rules); a name that is not a service still fails, on loading."""

    FILE_LOADER_CLASS = _PlainJSONFiles

    def list_available_services(self, type_name: str) -> list[str]:
        return sorted({name for path in self.search_paths if os.path.isdir(path) for name in os.listdir(path)})


def _new_session() -> Session:
    session = Session()
    extra = session.get_config_variable("data_path")  # AWS_DATA_PATH, as botocore's own loader reads it
    paths = [os.path.expanduser(os.path.expandvars(p)) for p in extra.split(os.pathsep)] if extra else []
    session.register_component("data_loader", _DataLoader(extra_search_paths=paths))
    return session


def client_config(*, max_attempts: int = 3, pool: int = 32, validate: bool = True) -> Config:
    """botocore config: standard retries (with its own backoff for throttling), a
    connection pool sized for the parallel calls a handler makes, and timeouts
    well inside a Lambda's own. ``validate=False`` skips botocore's walk of every
    parameter before a call: for requests our own serialiser built, which refuses
    what DynamoDB would (DynamoDB still validates them)."""
    return Config(
        user_agent=USER_AGENT,
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
                _session.append(_new_session())
            config = client_config(max_attempts=max_attempts, pool=pool, validate=validate)
            found = _session[0].create_client(service, config=config)
            _clients[key] = found
        return found


def reset_clients() -> None:
    """Forget every cached client and the session (tests that switch mocks, endpoints or credentials call this)."""
    with _lock:
        _clients.clear()
        _session.clear()
