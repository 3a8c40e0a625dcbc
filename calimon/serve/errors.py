"""One error body for every 4xx and 5xx answer (`calimon.serve.schemas.ErrorResponse`)::

    {"error": {"status": 422, "code": "invalid_request", "message": "...",
               "field": "messages.0.role", "errors": [{"field": ..., "message": ..., "type": ...}]}}

``field`` is a dotted path into the request body (``body`` for the body as a whole), or the
part of the request outside it that the answer is about: a header (``authorization``,
``content-type``, ``origin``...), ``path`` (no such route), ``method`` (a route without that
method). It is null only on answers that nothing in the request caused (429, 5xx: the server
is busy or failing; the message says to retry). A body that is not JSON the server reads
(`calimon.serve.body`: not UTF-8, malformed, a non-finite number, nested too deep) is 400
``bad_json``, a valid body with wrong or missing fields 422, a body over the size limit 413, a
body that is not declared JSON 415. A server fault is 500 naming only the exception's type: no
transcript text goes into an error.

Every error answer, whichever layer gives it (a route, the validation of a body, the gate in
front of the routes: `calimon.serve.security`), is rendered by `error_bytes`, so all have one
shape and one JSON spacing (compact, as FastAPI's own answers).
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("calimon.serve")


class ApiError(Exception):
    """An answer other than 200, raised by a route: status, short code, message, field."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.field, self.headers = field, headers or {}


def error_body(status: int, code: str, message: str, field: str | None = None,
               errors: list[dict] | None = None) -> dict:
    """The JSON of an error answer."""
    return {"error": {"status": status, "code": code, "message": message, "field": field,
                      "errors": errors or []}}


def error_bytes(status: int, code: str, message: str, field: str | None = None,
                errors: list[dict] | None = None) -> bytes:
    """The bytes of every error answer (module docstring). One naming a field says so first
    in its message and lists it under ``errors`` (unless ``errors`` are given: a validation
    error's problems, the first of them the one named)."""
    if errors is None:
        errors = [{"field": field, "message": message, "type": code}] if field else []
        message = f"{field}: {message}" if field else message
    return json.dumps(error_body(status, code, message, field, errors), ensure_ascii=False,
                      allow_nan=False, separators=(",", ":")).encode("utf-8")


JSON_TYPE = "application/json"


def error_response(status: int, code: str, message: str, field: str | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    """An error answer (`error_bytes`) as a response."""
    return Response(error_bytes(status, code, message, field), status_code=status,
                    headers=headers, media_type=JSON_TYPE)


_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none", "bytes"}


def _is_type_tag(part: str) -> bool:
    """Whether a location part names a member of a union (``str``, ``list[ContentPart]``,
    ``FunctionCall``) rather than a field: the request models' fields are snake_case."""
    return part in _TYPE_TAGS or "[" in part or part[:1].isupper()


def field_path(loc) -> str:
    """A pydantic error location as a dotted field path (``body`` itself for the whole body;
    a union's member tags left out)."""
    parts = [str(p) for p in loc if not (isinstance(p, str) and _is_type_tag(p))]
    if parts and parts[0] in ("body", "path", "query", "header"):
        kept = parts[1:] if parts[0] == "body" else parts
        parts = kept or ["body"]
    return ".".join(parts) or "body"


def _validation(request: Request, exc: RequestValidationError) -> Response:
    problems = []
    for err in exc.errors():
        kind = str(err.get("type", "invalid"))
        loc = err.get("loc", ())
        if kind == "json_invalid":
            where = loc[1] if len(loc) > 1 else "?"
            reason = (err.get("ctx") or {}).get("error", "invalid JSON")
            return error_response(400, "bad_json", f"the body is not valid JSON: {reason} "
                                  f"(at character {where})", "body")
        # pydantic's message; its "input" (the transcript text, possibly) is never echoed
        problems.append({"field": field_path(loc), "message": str(err.get("msg", "invalid")),
                         "type": kind})
    first = problems[0] if problems else {"field": "body", "message": "invalid request"}
    return Response(error_bytes(422, "invalid_request", f"{first['field']}: {first['message']}",
                                first["field"], problems), status_code=422, media_type=JSON_TYPE)


def _api_error(request: Request, exc: ApiError) -> Response:
    return error_response(exc.status, exc.code, exc.message, exc.field, exc.headers)


SHOWN_PATH = 200  # a path longer than this is cut in the message that names it


def _http(request: Request, exc: StarletteHTTPException) -> Response:
    if exc.status_code == 400:  # FastAPI could not read the body (the gate reads JSON first)
        return error_response(400, "bad_json", "the body could not be read as JSON", "body")
    path = request.url.path
    shown = path if len(path) <= SHOWN_PATH else path[:SHOWN_PATH] + "..."
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        return error_response(404, "not_found", f"no route {shown} (the routes: /docs)", "path",
                              headers)
    if exc.status_code == 405:
        allowed = headers.get("Allow") or headers.get("allow") or "?"
        return error_response(405, "method_not_allowed", f"{request.method} is not allowed on "
                              f"{shown} (allowed: {allowed})", "method", headers)
    field = "body" if 400 <= exc.status_code < 500 else None
    return error_response(exc.status_code, "http_error", str(exc.detail), field, headers)


def _internal(request: Request, exc: Exception) -> Response:
    log.error("internal error on %s: %s", request.url.path, type(exc).__name__)
    return error_response(500, "internal", f"internal error ({type(exc).__name__})")


def install(app: FastAPI) -> None:
    """Route every error of ``app`` through the one body."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _internal)
