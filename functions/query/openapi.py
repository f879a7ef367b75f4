"""Print the query API's OpenAPI document: ``python -m query.openapi > docs/openapi.json``.

The document is generated from the routes (Powertools), then adjusted to the
API's real error contract: Powertools lists a 422 with its own body for
validation errors and a 500 for response-validation errors, but this API
answers bad input with 400 and every error with ``{"error", "parameter"}``.
"""

from __future__ import annotations

import json
from typing import Any

from query.api import create_app

TITLE = "Time-series query API"
VERSION = "1.0.0"
DESCRIPTION = (
    "Reads readings back from the write-sharded DynamoDB store. Ranges are half-open [from, to) in UTC; "
    "every error is a JSON object {error, parameter}. Limits (MAX_RANGE, MAX_LIMIT, LATEST_LOOKBACK, "
    "MAX_SCAN_ITEMS, MAX_QUERY_CALLS) are the query function's fixed bounds, given in each description. "
    "A page stops early, with `complete: false` and a cursor that resumes where it stopped, at the "
    "function's deadline, MAX_QUERY_CALLS Query calls (200) or the response-size cap."
)


def document() -> dict[str, Any]:
    app = create_app(None)
    schema: dict[str, Any] = json.loads(
        app.get_openapi_json_schema(title=TITLE, version=VERSION, description=DESCRIPTION)
    )
    error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            responses.pop("422", None)
            responses["404"] = {"description": "No such route", "content": error_body}
            responses["500"] = {"description": "A fault of the service (never caused by input)", "content": error_body}
    schemas = schema.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        schemas.pop(unused, None)
    return schema


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
