"""The process environment local mode runs in: every AWS client points at the embedded moto server.

boto3 honours ``AWS_ENDPOINT_URL``, so setting it (with dummy credentials and a
region) is all it takes for the handlers' own clients, created by
``adapters.clients``, to talk to moto. What could still send a request to a
real endpoint is removed for the duration: service-specific endpoint variables
(``AWS_ENDPOINT_URL_DYNAMODB`` would win over ``AWS_ENDPOINT_URL``), the
switch that ignores configured endpoints, profiles, and the shared config and
credentials files (which may hold an ``endpoint_url`` or SSO settings).
"""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import urlsplit

from botocore.config import Config

from adapters.clients import endpoint_client

#: moto's default account; ARNs it builds carry it.
ACCOUNT_ID = "123456789012"
LOOPBACK = "127.0.0.1"

# Variables that could route a request elsewhere or pick up real credentials.
_REMOVED = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_CA_BUNDLE")
_REMOVED_PREFIXES = ("AWS_ENDPOINT_URL_",)


class NotLoopbackError(ValueError):
    """An endpoint that is not on this machine: local mode refuses to use it."""


def assert_loopback(url: str) -> str:
    """Return ``url`` if its host is a loopback address (127.0.0.0/8, ::1 or localhost); raise otherwise."""
    host = urlsplit(url).hostname
    if host is None:
        raise NotLoopbackError(f"{url!r} has no host")
    if host == "localhost":
        return url
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise NotLoopbackError(f"{url!r} is not a loopback endpoint; local mode never talks to a remote service")
    return url


class LoopbackServer:
    """Serves every HTTP/1.1 request to ``url`` (``http://127.0.0.1:<port>``) with ``handle(request)``,
    each on a thread of its own, until :meth:`stop`."""

    def __init__(self, handle: Callable[[BaseHTTPRequestHandler], None], *, port: int, name: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                handle(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve  # noqa: N815

            def log_message(self, format: str, *args: Any) -> None:
                pass  # not a line per request on stderr

        self._server = ThreadingHTTPServer((LOOPBACK, port), Handler)
        self._server.daemon_threads = True
        host, bound = cast(tuple[str, int], self._server.server_address)[:2]
        self.url = assert_loopback(f"http://{host}:{bound}")
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def local_client(service: str, endpoint_url: str, region: str, *, max_attempts: int = 3) -> Any:
    """A boto3 client for the embedded moto server (never another endpoint)."""
    client = endpoint_client(
        service,
        endpoint_url=assert_loopback(endpoint_url),
        region=region,
        max_attempts=max_attempts,
        # Buckets as a path: a loopback IP has no subdomains.
        config=Config(max_pool_connections=32, s3={"addressing_style": "path"}),
        aws_access_key_id="local",
        aws_secret_access_key="local",  # noqa: S106 - moto accepts any credentials
    )
    assert_loopback(str(client.meta.endpoint_url))
    return client


def aws_environment(endpoint_url: str, region: str) -> dict[str, str | None]:
    """Variables to set (str) or remove (None) so that boto3 uses only ``endpoint_url``."""
    assert_loopback(endpoint_url)
    env: dict[str, str | None] = {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",  # moto accepts any credentials
        "AWS_SESSION_TOKEN": "local",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    removed = [*_REMOVED, *(name for name in os.environ if name.startswith(_REMOVED_PREFIXES))]
    return env | dict.fromkeys(removed)


@contextmanager
def patched_environ(changes: Mapping[str, str | None]) -> Iterator[None]:
    """Set (value) or remove (None) variables of ``os.environ``; restore them all on exit."""
    saved = {name: os.environ.get(name) for name in changes}
    try:
        _apply(changes)
        yield
    finally:
        _apply(saved)


def _apply(changes: Mapping[str, str | None]) -> None:
    for name, value in changes.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
