"""The rotation's tests read through the query API on the query tests' moto DynamoDB: those fixtures,
reused here rather than copied."""

from tests.integration.query.conftest import dynamodb, make_store

__all__ = ["dynamodb", "make_store"]
