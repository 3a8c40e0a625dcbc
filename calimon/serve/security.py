"""The gate in front of every route (an ASGI middleware, so the OpenAPI page and unknown paths
are behind it too): the API key, then the body size.

- With a key set, every path but ``/healthz`` needs ``Authorization: Bearer KEY`` (compared in
  constant time); otherwise 401 with ``WWW-Authenticate: Bearer``.
- A body over ``max_body_bytes`` is refused with 413 before any of it is parsed (by its
  ``Content-Length``, or while it streams in).
- A JSON body (``application/json`` or ``+json``) that `calimon.serve.body.read_json` refuses
  (not UTF-8, not JSON, a non-finite number, nested too deep) is 400 ``bad_json`` naming the
  field, before any route reads it.
- A body sent to the API (``/v1/...``, where every body is JSON) without a JSON
  ``Content-Type`` is 415 naming the header: read as something else, it would reach the route
  as no object at all.
- With an ``auth`` (`calimon.serve.keys.Authenticator`: keys with a name each, reviewers'
  sign-ins), it decides instead of the single key, and the caller's name is in
  ``scope["calimon.user"]``.
"""

from __future__ import annotations

import hmac

from calimon.serve.body import BadJson, read_json
from calimon.serve.errors import JSON_TYPE, error_bytes

OPEN_PATHS = ("/healthz",)
API_PREFIX = "/v1/"


async def _send_error(send, status: int, code: str, message: str, field: str | None,
                      headers: list[tuple[bytes, bytes]] = ()) -> None:
    """The error answer of `calimon.serve.errors.error_bytes`, sent from the gate."""
    payload = error_bytes(status, code, message, field)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", JSON_TYPE.encode()),
                            (b"content-length", str(len(payload)).encode()), *headers]})
    await send({"type": "http.response.body", "body": payload})


async def _refuse(send, refusal) -> None:
    """Send a `calimon.serve.keys.Refusal`: a redirect to its location, or its error body."""
    if refusal.location is not None:
        await send({"type": "http.response.start", "status": refusal.status,
                    "headers": [(b"location", refusal.location.encode()),
                                (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return
    extra = [(b"www-authenticate", b"Bearer")] if refusal.status == 401 else []
    await _send_error(send, refusal.status, refusal.code, refusal.message, refusal.field, extra)


def key_matches(header: bytes, key: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer key``."""
    scheme, _, token = header.decode("latin-1").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(),
                                                              key.encode())


def is_json(content_type: bytes) -> bool:
    """Whether a ``Content-Type`` is one FastAPI parses as JSON (``application/json``,
    ``application/*+json``)."""
    kind = content_type.decode("latin-1").split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/")
                                           and kind.endswith("+json"))


class Gate:
    """ASGI middleware (module docstring)."""

    def __init__(self, app, *, key: str | None, max_body_bytes: int, auth=None):
        self.app, self.key, self.max_body = app, key, max_body_bytes
        self.auth = auth

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if self.auth is not None:
            refusal = await self.auth.check(scope, headers)
            if refusal is not None:
                return await _refuse(send, refusal)
        elif self.key is not None and scope.get("path", "") not in OPEN_PATHS and not key_matches(
                headers.get(b"authorization", b""), self.key):
            return await _send_error(send, 401, "unauthorized", "missing or wrong API key: "
                                     "send 'Authorization: Bearer KEY'", "authorization",
                                     [(b"www-authenticate", b"Bearer")])
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            return await self._too_large(send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                return await self._too_large(send)
        content_type = headers.get(b"content-type", b"")
        if body and is_json(content_type):
            try:
                read_json(body)
            except BadJson as exc:
                return await _send_error(send, 400, "bad_json", exc.message, exc.field)
        elif body and scope.get("path", "").startswith(API_PREFIX):
            given = content_type.decode("latin-1")[:100]
            return await _send_error(send, 415, "unsupported_media_type", "expected "
                                     "'Content-Type: application/json', got "
                                     + (repr(given) if given else "none"), "content-type")
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _too_large(self, send) -> None:
        await _send_error(send, 413, "too_large", f"the body is over the limit of "
                          f"{self.max_body} bytes", "body")
