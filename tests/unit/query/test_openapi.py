"""The committed OpenAPI document is the one the code generates, and it is valid OpenAPI 3.1."""

from __future__ import annotations

import json
from pathlib import Path

from openapi_spec_validator import validate

from query.api import ROUTES
from query.openapi import document, render

COMMITTED = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"
REGENERATE = "cd functions && python -m query.openapi > ../docs/openapi.json"


def test_docs_openapi_json_is_up_to_date() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == render(), f"docs/openapi.json is stale; run: {REGENERATE}"


def test_the_document_is_valid_openapi() -> None:
    validate(document())


def test_every_route_documents_its_errors_with_the_error_body_and_no_powertools_422() -> None:
    doc = json.loads(COMMITTED.read_text(encoding="utf-8"))

    operations = [op for path in doc["paths"].values() for op in path.values()]

    # Every route of the app, with its method (the list itself is checked against docs/query.md in test_api).
    assert {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops} == set(ROUTES)
    for op in operations:
        assert "422" not in op["responses"]
        for code in ("400", "404", "500", "503"):
            assert op["responses"][code]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"
            }
        assert "schema" in op["responses"]["200"]["content"]["application/json"]
    limit = next(p for p in doc["paths"]["/entities/{entity_id}/readings"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"]["anyOf"][0] == {"maximum": 1000, "minimum": 1, "type": "integer"}
