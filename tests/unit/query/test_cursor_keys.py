"""Cursor keys that rotate: sign with AWSCURRENT, accept AWSCURRENT and AWSPREVIOUS, refetch on a TTL
and (rate-limited) when a cursor verifies under no key held."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doubles.clocks import ManualClock
from query.cursor import MISS_REFRESH_MS, CursorCodec, CursorError, CursorKeys, binding
from query.merge import Position

BOUND = binding(route="entity_readings", entity="sensor-1", frm=0, to=10, order="asc", measures=None)
POSITION = Position("2026-11-22T06:57:51.123Z", "sensor-1#2026-11-22T06:57:51.123Z#evt-1")
TTL_MS = 300_000


class RotatingSecret:
    """A secret's staging labels, rotated the way Secrets Manager's finishSecret step leaves them."""

    def __init__(self) -> None:
        self.versions = [b"key-0-" + b"x" * 40]
        self.reads = 0
        self.unreachable = False

    def rotate(self) -> None:
        self.versions.append(f"key-{len(self.versions)}-".encode() + b"x" * 40)

    def read(self, stage: str) -> bytes | None:
        if self.unreachable:
            raise ConnectionError("secrets manager unreachable")
        self.reads += 1
        if stage == "AWSCURRENT":
            return self.versions[-1]
        return self.versions[-2] if len(self.versions) > 1 else None


@pytest.fixture
def secret() -> RotatingSecret:
    return RotatingSecret()


@pytest.fixture
def clock() -> ManualClock[int]:
    return ManualClock(1_000_000)


def container(secret: RotatingSecret, clock: ManualClock[int]) -> CursorCodec:
    """One warm function instance: its own key cache."""
    return CursorCodec(CursorKeys(secret.read, ttl_ms=TTL_MS, clock_ms=clock))


def test_a_cursor_signed_before_one_rotation_still_works_after_it(
    secret: RotatingSecret, clock: ManualClock[int]
) -> None:
    # Given a cursor issued with the current key
    token = container(secret, clock).encode(BOUND, POSITION)
    # When the key rotates once, and a fresh container (or one past its TTL) reads the new labels
    secret.rotate()
    # Then the cursor, now signed with AWSPREVIOUS, is still accepted
    assert container(secret, clock).decode(token, BOUND) == POSITION


def test_a_cursor_signed_two_rotations_ago_is_refused(secret: RotatingSecret, clock: ManualClock[int]) -> None:
    token = container(secret, clock).encode(BOUND, POSITION)
    secret.rotate()
    secret.rotate()

    with pytest.raises(CursorError, match="rotated out") as caught:
        container(secret, clock).decode(token, BOUND)
    assert caught.value.field == "cursor"


def test_new_cursors_are_signed_with_the_current_key_once_the_ttl_has_passed(
    secret: RotatingSecret, clock: ManualClock[int]
) -> None:
    warm = container(secret, clock)
    before = warm.encode(BOUND, POSITION)
    secret.rotate()
    # Inside the TTL the warm container still signs with the key it holds...
    assert warm.encode(BOUND, POSITION) == before
    # ...and after it with the new one, which a container that never saw the old key accepts.
    clock.now += TTL_MS
    after = warm.encode(BOUND, POSITION)
    assert after != before
    secret.rotate()  # the old key is now two rotations back
    assert container(secret, clock).decode(after, BOUND) == POSITION


def test_a_warm_container_meeting_a_cursor_signed_with_a_newer_key_fetches_it_early(
    secret: RotatingSecret, clock: ManualClock[int]
) -> None:
    # Given a warm container that holds key 0, and a cursor another container signed with key 1
    warm = container(secret, clock)
    warm.encode(BOUND, POSITION)
    clock.now += MISS_REFRESH_MS
    secret.rotate()
    token = container(secret, clock).encode(BOUND, POSITION)
    # Then the warm container accepts it without waiting for its TTL
    assert warm.decode(token, BOUND) == POSITION


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=50, max_size=300))
def test_forged_cursors_are_refused_and_refetch_at_most_once_per_interval(raw: bytes) -> None:
    # Given a container that has held its keys for longer than the miss interval
    secret, clock = RotatingSecret(), ManualClock(1_000_000)
    codec = container(secret, clock)
    codec.encode(BOUND, POSITION)
    clock.now += MISS_REFRESH_MS
    reads = secret.reads
    # When many forged cursors arrive within one interval
    token = base64.urlsafe_b64encode(bytes([1]) + raw).rstrip(b"=").decode()
    for _ in range(5):
        with pytest.raises(CursorError):
            codec.decode(token, BOUND)
    # Then every one is refused, and the keys were fetched again once, not per cursor: the previous key
    # (first asked for by the first forgery), then both labels (the early refresh)
    assert secret.reads - reads == 3


def test_an_unreachable_secret_keeps_the_keys_already_held(
    secret: RotatingSecret, clock: ManualClock[int], caplog: pytest.LogCaptureFixture
) -> None:
    codec = container(secret, clock)
    token = codec.encode(BOUND, POSITION)
    secret.unreachable = True
    clock.now += TTL_MS

    assert codec.decode(token, BOUND) == POSITION
    assert "keeping the ones held" in caplog.text


def test_a_secret_unreachable_at_first_use_fails_loudly(secret: RotatingSecret, clock: ManualClock[int]) -> None:
    secret.unreachable = True
    with pytest.raises(ConnectionError):
        container(secret, clock).encode(BOUND, POSITION)


def test_a_fixed_key_never_refetches() -> None:
    calls = []

    def key() -> bytes:
        calls.append(1)
        return b"k" * 40

    codec = CursorCodec(key)
    token = codec.encode(BOUND, POSITION)
    with pytest.raises(CursorError):
        codec.decode(token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1], BOUND)
    assert codec.decode(token, BOUND) == POSITION
    assert calls == [1]


def test_the_previous_key_is_fetched_only_for_a_cursor_the_current_one_does_not_verify(
    secret: RotatingSecret, clock: ManualClock[int]
) -> None:
    # Given a cursor signed before a rotation, and a container that came up after it
    old = container(secret, clock).encode(BOUND, POSITION)
    secret.rotate()
    fresh = container(secret, clock)
    reads = secret.reads
    # When it signs and verifies cursors of its own, one fetch of the current key serves them all
    fresh.decode(fresh.encode(BOUND, POSITION), BOUND)
    fresh.decode(fresh.encode(BOUND, POSITION), BOUND)
    assert secret.reads - reads == 1
    # And the older cursor costs one more fetch, the previous key's, once
    assert fresh.decode(old, BOUND) == fresh.decode(old, BOUND) == POSITION
    assert secret.reads - reads == 2
