"""The shard-map store's tests run on the hot-key monitor's moto AWS (its control table holds the map):
that folder's ``aws`` fixture, reused here rather than copied."""

from tests.integration.hotkeys.conftest import aws

__all__ = ["aws"]
