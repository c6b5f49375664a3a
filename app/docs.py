"""The interactive API docs at ``/docs``, self-contained, and ``/mcp`` in
the OpenAPI document.

Swagger UI's script, styles and icon come from the ``swagger-ui-bundle``
package and are served by keepmem under ``/docs/assets``: the page works on a
closed network and references no outside host.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from app.kit.ids import PROJECT_SLUG_PATTERN

ASSETS = "/docs/assets"


def mount(app: FastAPI) -> None:
    from swagger_ui_bundle import swagger_ui_path

    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
            oauth2_redirect_url="/docs/oauth2-redirect",
            # no validator badge: it would be fetched from swagger.io
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()


# -- /mcp in the OpenAPI document ------------------------------------------------------

_JSONRPC_ID = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
_JSONRPC_MESSAGE = {
    "type": "object",
    "description": "One JSON-RPC 2.0 request (with an id) or notification (without).",
    "required": ["jsonrpc", "method"],
    "properties": {
        "jsonrpc": {"type": "string", "enum": ["2.0"]},
        "id": _JSONRPC_ID,
        "method": {
            "type": "string",
            "description": "initialize, tools/list, tools/call, prompts/list, prompts/get, "
            "resources/list, resources/read, ping, notifications/initialized ...",
        },
        "params": {"anyOf": [{"type": "object"}, {"type": "null"}]},
    },
}
_JSONRPC_ANSWER = {
    "type": "object",
    "description": "A JSON-RPC 2.0 response: `result`, or `error` with `code` and `message`.",
    "required": ["jsonrpc"],
    "properties": {
        "jsonrpc": {"type": "string", "enum": ["2.0"]},
        "id": {"anyOf": [_JSONRPC_ID, {"type": "null"}]},
        "result": {"type": "object"},
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
        },
    },
}


JSONRPC_MESSAGE_REF = "#/components/schemas/JsonRpcMessage"
JSONRPC_ANSWER_REF = "#/components/schemas/JsonRpcAnswer"


def _answer(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_PROJECT_HEADER = {
    "name": "X-Project",
    "in": "header",
    "required": False,
    "description": "Project slug inside the tenant (as on every route).",
    "schema": {"type": "string", "pattern": PROJECT_SLUG_PATTERN, "minLength": 2, "maxLength": 63},
}


def describe_mcp(app: FastAPI, path: str) -> None:
    """Put ``path`` (MCP's streamable HTTP transport: POST with JSON answers,
    GET for the server's event stream) in the app's OpenAPI document: it is
    served by the MCP endpoint, not a FastAPI route, and clients and fuzzers
    read the document to find it."""
    build = app.openapi
    error = {"$ref": "#/components/schemas/ErrorOut"}
    message, answer = {"$ref": JSONRPC_MESSAGE_REF}, {"$ref": JSONRPC_ANSWER_REF}
    refusals = {
        "400": _answer(
            "Not a JSON-RPC message (a JSON-RPC error), or a bad X-Project "
            "(the service's error shape).",
            {"anyOf": [answer, error]},
        ),
        "401": _answer("Missing or bad credentials.", error),
        "403": _answer("The credential may not use this project.", error),
        "406": _answer("The Accept header allows neither JSON nor an event stream.", answer),
        "429": _answer("Rate limited, or too many open streams: see Retry-After.", error),
        "503": _answer("MCP is not installed here.", error),
    }
    post = {
        "tags": ["mcp"],
        "summary": "MCP (streamable HTTP, JSON-RPC 2.0)",
        "description": "The Model Context Protocol for remote agents: the same tools, prompts "
        "and resources as `keepmem-mcp`. Send `Accept: application/json, text/event-stream`; "
        "the answer is JSON. `X-Project` chooses the project. Protocol errors are JSON-RPC "
        "errors (400 for a message that is not JSON-RPC); authentication, media-type and rate "
        "errors are the service's error shape.",
        "operationId": "mcp_post",
        "parameters": [_PROJECT_HEADER],
        "requestBody": {"required": True, "content": {"application/json": {"schema": message}}},
        "responses": {
            "200": _answer("The JSON-RPC response.", answer),
            "202": {"description": "A notification, accepted (no body)."},
            **refusals,
            "413": _answer("The message is too large.", error),
            "415": _answer("The body is not JSON.", error),
        },
        "security": [{"ApiKey": []}],
    }
    get = {
        "tags": ["mcp"],
        "summary": "MCP server-to-client event stream",
        "description": "Server-Sent Events from the MCP server. Counts against the tenant's "
        "open streams (with `GET /v1/events`) and ends after `KEEPMEM_MCP_STREAM_MAX_SECONDS` "
        "(reconnect).",
        "operationId": "mcp_stream",
        "parameters": [_PROJECT_HEADER],
        "responses": {
            "200": {"description": "An event stream.", "content": {"text/event-stream": {}}},
            **refusals,
        },
        "security": [{"ApiKey": []}],
    }

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components["JsonRpcMessage"] = _JSONRPC_MESSAGE
            components["JsonRpcAnswer"] = _JSONRPC_ANSWER
            schema["paths"][path] = {"post": post, "get": get}
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
