"""A tiny Powertools REST app standing in for the query handler: path and query parameters, a body,
an error, a binary response. ``handler`` is a Lambda handler (``tests.unit.local_runtime.tiny_api.handler``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response

app = APIGatewayRestResolver()


@app.get("/entities/<entity_id>/readings")
def readings(entity_id: str) -> dict[str, Any]:
    # A REST API delivers path parameters percent-encoded; Powertools does not decode them.
    event = app.current_event
    return {
        "entity_id": unquote(entity_id),
        "raw_entity_id": entity_id,
        "from": event.get_query_string_value("from"),
        "measures": event.get_multi_value_query_string_values("measures"),
        "path": event.path,
    }


@app.post("/echo")
def echo() -> dict[str, Any]:
    return {"json": app.current_event.json_body, "content_type": app.current_event.headers.get("Content-Type")}


@app.get("/boom")
def boom() -> dict[str, Any]:
    raise RuntimeError("the handler failed")


@app.get("/bytes")
def raw_bytes() -> Response[bytes]:
    return Response(status_code=200, content_type="application/octet-stream", body=b"\x00\xffbin")


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
