"""``--faults`` parsing, and the process environment that keeps every client on loopback."""

from __future__ import annotations

import os

import pytest

from local_runtime.environment import NotLoopbackError, assert_loopback, aws_environment, patched_environ
from local_runtime.faults import FaultPlan, LocalFaults


def test_write_faults_and_invocation_errors_are_parsed_from_one_spec() -> None:
    faults = LocalFaults.parse("throttle=2,rate=0.1,partial=3,fraction=0.5,invoke_errors=0.25,seed=9")
    assert faults.writes == FaultPlan(
        throttle_first=2, throttle_rate=0.1, partial_first=3, partial_fraction=0.5, seed=9
    )
    assert (faults.invocation_error_fraction, faults.seed) == (0.25, 9)
    assert faults.active
    assert "25% of invocations fail" in faults.describe()
    assert "throttled" in faults.describe() and "UnprocessedItems" in faults.describe()


@pytest.mark.parametrize("spec", ["", "  ", "seed=3"])
def test_no_faults(spec: str) -> None:
    faults = LocalFaults.parse(spec)
    assert faults.writes is None and faults.invocation_error_fraction == 0
    assert not faults.active
    assert faults.describe() == "none"


def test_invocation_errors_alone() -> None:
    faults = LocalFaults.parse("errors=0.5")
    assert faults.writes is None and faults.invocation_error_fraction == 0.5


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("invoke_errors=lots", "not a number"),
        ("invoke_errors=2", "0..1"),
        ("throttle", "key=value"),
        ("bogus=1", "key=value"),
        ("rate=7", "0..1"),
        ("seed=x", "whole number"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_part(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LocalFaults.parse(spec)


@pytest.mark.parametrize("url", ["http://127.0.0.1:5000", "http://localhost:1", "http://[::1]:80", "http://127.9.9.9"])
def test_loopback_endpoints_are_accepted(url: str) -> None:
    assert assert_loopback(url) == url


@pytest.mark.parametrize(
    "url", ["https://dynamodb.eu-west-1.amazonaws.com", "http://10.0.0.1:5000", "http://0.0.0.0:5000", "nohost"]
)
def test_anything_else_is_refused(url: str) -> None:
    with pytest.raises(NotLoopbackError):
        assert_loopback(url)


def test_the_environment_points_at_the_endpoint_and_removes_what_could_point_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a shell that would send DynamoDB calls to a real endpoint with a profile's credentials
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", "https://dynamodb.eu-west-1.amazonaws.com")
    monkeypatch.setenv("AWS_PROFILE", "production")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "real-secret")
    # When the local environment is applied
    env = aws_environment("http://127.0.0.1:4566", "eu-west-1")
    with patched_environ(env):
        # Then only the loopback endpoint, dummy credentials and no profile or config file remain
        assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:4566"
        assert "AWS_ENDPOINT_URL_DYNAMODB" not in os.environ
        assert "AWS_PROFILE" not in os.environ
        assert os.environ["AWS_SECRET_ACCESS_KEY"] == "local"
        assert os.environ["AWS_CONFIG_FILE"] == os.devnull
        assert os.environ["AWS_DEFAULT_REGION"] == "eu-west-1"
    # And everything is restored afterwards
    assert os.environ["AWS_ENDPOINT_URL_DYNAMODB"] == "https://dynamodb.eu-west-1.amazonaws.com"
    assert os.environ["AWS_PROFILE"] == "production"
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == "real-secret"


def test_a_remote_endpoint_never_makes_an_environment() -> None:
    with pytest.raises(NotLoopbackError):
        aws_environment("https://kinesis.eu-west-1.amazonaws.com", "eu-west-1")


def test_patched_environ_restores_after_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_RUNTIME_TEST_VAR", raising=False)
    with pytest.raises(RuntimeError), patched_environ({"LOCAL_RUNTIME_TEST_VAR": "x"}):
        raise RuntimeError
    assert "LOCAL_RUNTIME_TEST_VAR" not in os.environ
