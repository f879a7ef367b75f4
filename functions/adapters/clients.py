"""botocore clients, created once per container with botocore's ``standard`` retry mode.

Every client comes from one botocore session (boto3 is not imported: nothing
on a handler's path uses it, and importing it and its session cost 25-40 ms
of every cold start). A session loads each service's model and the endpoint
rules once, so a second client costs a fraction of the first (docs/benchmarks.md,
cold start). There is one client per service and configuration; botocore
clients are thread-safe, sessions are not, hence the lock around creation.

The region comes from the environment (``AWS_REGION`` in Lambda); the endpoint
too: botocore honours ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_<SERVICE>``),
which is how the local runtime points every client at its moto server without
a line of special code here.

A function restored from a SnapStart snapshot (``adapters.snapstart``) keeps its
clients, and what init spent building them, but not two things of the machine
the snapshot was taken on: :func:`close_connections` drops the pooled
connections (their sockets lead nowhere once restored), and :func:`renew_credentials`
makes the next call resolve the credentials again through botocore's default
chain, from the restored environment (a SnapStart function gets them from
Lambda's container credentials endpoint, not from the variables it had at init).

A call that fails raises botocore's ``ClientError``: :func:`error_code` (and
:func:`error_message`, :func:`http_status`) read what it carries, and the code
sets below say which codes mean "not now" for each service.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable, Mapping
from typing import Any

import botocore
from botocore.config import Config
from botocore.credentials import Credentials, ReadOnlyCredentials, create_credential_resolver
from botocore.exceptions import ClientError, NoCredentialsError
from botocore.session import Session

#: Every client's User-Agent, made once. botocore's default is rebuilt from a dozen parts twice a
#: call (16% of a BatchWriteItem's CPU, docs/benchmarks.md); this one keeps botocore's and
#: Python's versions, and names the product in CloudTrail's ``userAgent``.
USER_AGENT = f"timeseries-dynamodb Botocore/{botocore.__version__} Python/{platform.python_version()}"

#: DynamoDB's "slow down": a table's or the account's throughput, or its request rate, was exceeded.
DYNAMODB_THROTTLING = frozenset(
    {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
)
#: DynamoDB codes that mean "not now": throttling or the service's own fault, retried with backoff.
DYNAMODB_RETRYABLE = DYNAMODB_THROTTLING | {"InternalServerError", "InternalFailure", "ServiceUnavailable"}
#: Kinesis codes that mean "not now": a shard's or KMS's throttling, a limit, the service's own fault.
KINESIS_RETRYABLE = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "LimitExceededException",
        "KMSThrottlingException",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
    }
)
#: SQS codes a retry cannot fix (no such queue, no permission, a refused parameter).
SQS_PERMANENT = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "InvalidParameterValue",
        "InvalidClientTokenId",
        "KMS.AccessDeniedException",
    }
)
#: A condition expression did not hold (a put or update that lost a race, or found the item changed).
CONDITION_FAILED = "ConditionalCheckFailedException"

_lock = threading.Lock()
_clients: dict[tuple[str, int, int, bool], Any] = {}
_session: list[Session] = []


class RenewableCredentials(Credentials):  # type: ignore[misc]  # botocore is untyped (no stubs)
    """The credentials every client of the session signs with: what botocore's default chain
    finds, resolved on the first call and again on the first call after :meth:`renew`.

    botocore hands each client the session's one credentials object, so renewing this
    one reaches every client. What the chain returns keeps its own refresh (Lambda's
    container credentials expire and are fetched again by botocore itself).
    """

    def __init__(self, resolve: Callable[[], Credentials | None]) -> None:
        # No botocore fields of its own: every read goes to the credentials resolved last.
        self._resolve = resolve
        self._found: Credentials | None = None
        self._renew_lock = threading.Lock()
        self.method = "renewable"

    def load_credentials(self) -> RenewableCredentials:
        """As the session's ``credential_provider`` component: always this one object."""
        return self

    def renew(self) -> None:
        """Resolve again on the next call."""
        with self._renew_lock:
            self._found = None

    def resolved(self) -> Credentials:
        """The credentials in use; :class:`NoCredentialsError` when the chain finds none."""
        found = self._found
        if found is None:
            with self._renew_lock:
                if self._found is None:
                    self._found = self._resolve()
                found = self._found
        if found is None:
            raise NoCredentialsError()
        return found

    def get_frozen_credentials(self) -> ReadOnlyCredentials:
        return self.resolved().get_frozen_credentials()

    @property
    def access_key(self) -> str:
        return str(self.resolved().access_key)

    @property
    def secret_key(self) -> str:
        return str(self.resolved().secret_key)

    @property
    def token(self) -> str | None:
        return self.resolved().token  # type: ignore[no-any-return]

    @property
    def account_id(self) -> str | None:
        # Read by botocore's endpoint rules (account-based DynamoDB endpoints); none when no credentials.
        try:
            return self.resolved().account_id  # type: ignore[no-any-return]
        except NoCredentialsError:
            return None


def _new_session() -> Session:
    session = Session()
    # One chain, built once: its providers read the environment each time they are asked.
    credentials = RenewableCredentials(create_credential_resolver(session).load_credentials)
    session.register_component("credential_provider", credentials)
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


def endpoint_client(
    service: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    max_attempts: int = 3,
    config: Config | None = None,
    **credentials: str,
) -> Any:
    """A new client of ``service`` for a tool (``tsctl``, the producer, the local runtime), not a handler
    (:func:`client`): at ``endpoint_url`` and in ``region`` (None: the environment's), botocore's standard
    retries with ``max_attempts``, ``config`` merged over that, ``credentials`` (``aws_access_key_id``...)
    instead of the environment's chain when given. Every client this project makes outside a handler is
    made here."""
    import boto3  # noqa: PLC0415 - the tools' clients; a handler's cold start does not load boto3

    base = Config(retries={"mode": "standard", "max_attempts": max_attempts})
    return boto3.session.Session().client(
        service,
        endpoint_url=endpoint_url,
        region_name=region,
        config=base if config is None else base.merge(config),
        **credentials,
    )


def close_connections() -> None:
    """Close every client's pooled connections; a client opens new ones on its next call."""
    with _lock:
        for made in _clients.values():
            made.close()


def renew_credentials() -> None:
    """Make every client resolve its credentials again on its next call."""
    with _lock:
        if _session:
            _session[0].get_credentials().renew()


def reset_clients() -> None:
    """Forget every cached client and the session (tests that switch mocks, endpoints or credentials call this)."""
    with _lock:
        _clients.clear()
        _session.clear()


def error_code(exc: BaseException) -> str | None:
    """The AWS error code a botocore ``ClientError`` carries (``ResourceNotFoundException``...);
    None for any other exception, and for a response that names no code."""
    code = _error(exc).get("Code")
    return str(code) if code else None


def deleted(delete: Callable[[], object]) -> bool:
    """Call ``delete``: True, or False when AWS answers that there was nothing to delete
    (``ResourceNotFoundException``); any other error propagates."""
    try:
        delete()
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return False
        raise
    return True


def error_message(exc: BaseException) -> str:
    """The message a botocore ``ClientError`` carries; empty when there is none."""
    return str(_error(exc).get("Message") or "")


def http_status(exc: BaseException) -> int:
    """The HTTP status of the answer a botocore ``ClientError`` came from; 0 when unknown."""
    response = exc.response if isinstance(exc, ClientError) else None
    metadata = response.get("ResponseMetadata") if isinstance(response, Mapping) else None
    status = metadata.get("HTTPStatusCode") if isinstance(metadata, Mapping) else None
    try:
        return int(status or 0)
    except (TypeError, ValueError):
        return 0


def _error(exc: BaseException) -> Mapping[str, Any]:
    response = exc.response if isinstance(exc, ClientError) else None
    error = response.get("Error") if isinstance(response, Mapping) else None
    return error if isinstance(error, Mapping) else {}
