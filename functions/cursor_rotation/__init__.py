"""Rotates the query API's cursor-signing key: Secrets Manager's four rotation steps for a random HMAC key."""
