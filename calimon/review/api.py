"""The review routes of `calimon serve --review` (`install`): the pages a reviewer's browser
reads (`calimon.review.pages`) and the API every action of theirs is (the pages call it;
any client with a key can too):

- ``GET /v1/review/queue``: what the caller is asked to label next, in order;
- ``GET /v1/review/items/{item_id}``: one item with its transcript, parts and evidence;
- ``POST /v1/review/labels``: a label (misbehavior / benign / unsure, a note, a second
  reviewer asked), idempotent by its ``label_id``, answered with its conflicts;
- ``POST /v1/review/sync``: what a page showing some items learns of them (conflicts, a label
  changed in another tab, who holds each), its leases renewed;
- ``GET /v1/review/status``: live recertification and drift (`calimon.review.status`);
- ``POST /v1/review/drift``: run the drift check now;
- ``GET /v1/review/export``: labelled traffic as a samples JSONL (`calimon.review.export`);
- ``/review/login`` (a key, answered with a sign-in cookie and the page asked for:
  `local_next`), ``/review/logout``, ``/review``, ``/review/items/{item_id}``,
  ``/review/status`` and ``/review/static/*``; an unknown review page is a 404 page (HTML).

`attach` builds the review side of a `calimon.serve.service.Service` from its settings.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlsplit

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints
from starlette.exceptions import HTTPException as StarletteHTTPException

from calimon.review.assets import CSS, ICON, JS
from calimon.review.conflicts import view
from calimon.review.export import ExportOptions, export_samples
from calimon.review.pages import (
    CSP,
    clock_time,
    login_page,
    not_found_page,
    queue_page,
    status_page,
)
from calimon.review.promotion import ShadowGauges, follow, shadow_status
from calimon.review.promotion import install as install_policy
from calimon.review.queue import Review
from calimon.review.status import ReviewGauges, live_status
from calimon.serve.errors import ApiError
from calimon.serve.keys import COOKIE, NAME, Authenticator, KeyStore
from calimon.serve.log_writer import Grouped

ITEM_ID = r"^[0-9a-f]{24}$"
CLIENT_ID = r"^[A-Za-z0-9._:-]+$"


class LabelIn(BaseModel):
    """One label: ``label_id`` (made once by the client; a resend with it is stored once),
    the item, the label, a note, whether a second reviewer is asked, and the hash of the
    transcript labelled (optional: checked against the item's when given). Optional too:
    ``reviewer``, who gave it (refused under anyone else's key or sign-in), and what it was
    given knowing (`calimon.review.conflicts`): ``seen``, the item's label count when it was
    shown, and ``tab``, the page's id."""

    model_config = ConfigDict(extra="forbid")
    label_id: str = Field(min_length=8, max_length=100, pattern=CLIENT_ID)
    item_id: str = Field(pattern=ITEM_ID)
    label: Literal["misbehavior", "benign", "unsure"]
    note: str = Field("", max_length=2000, pattern=r"^[^\x00]*$")
    second_review: StrictBool = False
    transcript_hash: str | None = Field(None, pattern=r"^[0-9a-f]{32}$")
    reviewer: str | None = Field(None, pattern=NAME.pattern)
    seen: int | None = Field(None, ge=0, le=1_000_000, strict=True)
    tab: str | None = Field(None, min_length=8, max_length=100, pattern=CLIENT_ID)


class SyncIn(BaseModel):
    """A page's items (item id: the id of the label it stored last, or null) and whether
    its reviewer has been at work since the last sync (then the leases are renewed)."""

    model_config = ConfigDict(extra="forbid")
    items: dict[Annotated[str, StringConstraints(pattern=ITEM_ID)],
                Annotated[str, StringConstraints(min_length=8, max_length=100,
                                                 pattern=CLIENT_ID)] | None] = Field(
        max_length=500)
    renew: StrictBool = False


def attach(service, settings) -> None:
    """Give ``service`` its review side when ``settings.review`` is set, and its key store's
    gate when keys are set (``service.review``, ``service.drift``, ``service.auth``)."""
    from calimon.review.drift import DriftWatch
    from calimon.review.store import open_review_store

    keys = KeyStore.load(settings.keys_file, settings.key())
    service.review = service.drift = service.auth = None
    if settings.review is None:
        service.auth = Authenticator(keys) if settings.keys_file is not None else None
        return
    if not keys:
        from calimon.errors import InputError

        raise InputError("the review queue needs reviewers' keys: give --keys FILE ('NAME KEY' "
                         "lines) or set $CALIMON_API_KEY", field="keys")
    store = open_review_store(settings.review.store)
    served = service.served
    service.review = Review(store, served.policy, served.policy_hash, settings.review)
    service.review_writes = Grouped(lambda rows: _store_rows(store, rows))
    service.groups.append(service.review_writes)
    service.observer = observe
    service.drift = DriftWatch(service.review, Path(service.policies.live_path))
    service.auth = Authenticator(keys, store, settings.review.session_hours)
    service.metrics.extra.append(ReviewGauges(service.review, service.drift))
    service.metrics.extra.append(ShadowGauges(service))
    follow(service)


def _store_rows(store, rows: list) -> list[None]:
    store.record_traffic_many(rows)
    return [None] * len(rows)


async def observe(service, entry, request: str, response: str, audit_id: str,
                  messages=None) -> None:
    """Store a decision's review row before it is logged (`calimon.review.queue.Review.observe`;
    the rows of decisions that arrive together in one transaction,
    `calimon.serve.log_writer.Grouped`); a store that cannot be written is 503, so nothing is
    answered that review would miss. Then let the drift watch count it."""
    from calimon.review.queue import Seen

    try:
        row = service.review.traffic_row(entry.request_id, entry.kind, entry.response,
                                         Seen(request, response, audit_id, messages),
                                         entry.session_id, entry.step)
        await service.review_writes.call(row)
    except Exception as exc:  # noqa: BLE001 - reported by type only: no transcript text
        service.metrics.errors.inc("review_store")
        raise ApiError(503, "review_store_unavailable", f"the review store could not be "
                       f"written ({type(exc).__name__}); retry",
                       headers={"Retry-After": "1"}) from None
    service.drift.maybe_start()


def _user(request: Request) -> str:
    return request.scope.get("calimon.user") or "anonymous"


def _html(text: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={
        "Content-Security-Policy": CSP, "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
        **(headers or {})})


def _entry(row, reason: str, state: str) -> dict[str, Any]:
    return {"item_id": row.item_id, "reason": reason, "state": state, "action": row.action,
            "p_raw": row.p_raw, "p_cal": row.p_cal, "audit": bool(row.audit),
            "kind": row.kind, "session_id": row.session_id, "step": row.step,
            "received_at": row.received_at, "transcript_hash": row.transcript_hash}


def leased(review: Review, who: str, entries: list) -> tuple[list, dict]:
    """``entries`` leased to ``who`` (`calimon.review.queue.Review.lease`), without those
    another reviewer took meanwhile, and their claims."""
    claims = review.lease(who, [q.row.item_id for q in entries])
    kept = [q for q in entries if (c := claims.get(q.row.item_id)) and c.reviewer == who]
    return kept, claims


def _seen(review: Review, item_ids) -> dict[str, int]:
    return {i: len(review.store.labels_of(i)) for i in item_ids}


def _mine(review: Review, reviewer: str) -> dict:
    snap = review.snapshot()
    return {i: r.latest[reviewer] for i, r in snap.resolutions.items() if reviewer in r.latest}


def install(app: FastAPI, service) -> None:
    """Add the review routes (module docstring) to ``app``."""
    _label_api(app, service)
    _api(app, service)
    _sign_in_pages(app, service)
    _pages(app, service)
    _not_found_pages(app)
    install_policy(app, service)


def _label_api(app: FastAPI, service) -> None:
    review: Review = service.review

    @app.get("/v1/review/queue")
    async def queue(request: Request, limit: int = 20, lease: bool = True) -> dict:
        """What the caller is asked to label next, in order, leased to them (``lease=false``:
        only look)."""
        if not 1 <= limit <= 500:
            raise ApiError(422, "invalid_request", "expected 1 to 500", "limit")
        who = _user(request)

        def build() -> tuple[list, dict]:
            entries = review.queue(who, limit)
            return leased(review, who, entries) if lease else (entries, {})

        entries, claims = await asyncio.to_thread(build)
        return {"reviewer": who, "items": [
            {**_entry(q.row, q.reason, q.state),
             "held_until": claims[q.row.item_id].expires_at if claims else None}
            for q in entries]}

    @app.get("/v1/review/items/{item_id}")
    async def item(request: Request, item_id: str) -> dict:
        """One item: its transcript, parts, evidence and the caller's own label."""
        row = await asyncio.to_thread(review.store.item, item_id)
        if row is None or not row.retained:
            raise ApiError(404, "unknown_item", f"no kept transcript {item_id!r}", "item_id")
        mine = (await asyncio.to_thread(_mine, review, _user(request))).get(item_id)
        labels = await asyncio.to_thread(review.store.labels_of, item_id)
        return {**_entry(row, "", ""), "request": row.request_text,
                "response": row.response_text, "parts": row.parts_list(),
                "evidence": row.evidence_list(), "labels": len(labels),
                "your_label": mine.to_dict() if mine is not None else None}

    @app.post("/v1/review/labels")
    async def label(request: Request, body: LabelIn) -> dict:
        """Store a label; a resent ``label_id`` is answered with the stored one. With the
        labels in conflict with it and the item's label count."""
        saved = await asyncio.to_thread(review.submit, _user(request), body)
        status = await asyncio.to_thread(live_status, review, service.drift)
        return {"label": saved.label.to_dict(), "replayed": saved.replayed,
                "conflicts": [view(c) for c in saved.conflicts],
                "item_labels": saved.item_labels, "status": status}

    @app.post("/v1/review/sync")
    async def sync(request: Request, body: SyncIn) -> dict:
        """What a page learns of its items (`calimon.review.queue.Review.sync`)."""
        items = await asyncio.to_thread(review.sync, _user(request), body.items, body.renew)
        return {"items": items}


def _api(app: FastAPI, service) -> None:
    review: Review = service.review

    @app.get("/v1/review/status")
    async def status() -> dict:
        """Live recertification and drift; the shadow candidate's checks (``shadow``)."""
        return await asyncio.to_thread(full_status, service)

    @app.post("/v1/review/drift")
    async def drift() -> dict:
        """Run the drift check now and return its result."""
        return await asyncio.to_thread(service.drift.check)

    @app.get("/v1/review/export")
    async def export(sample: str = "uniform", calib_share: float = 0.5,
                     category: str = "safety", task: str = "reasoning",
                     source: str | None = None) -> Response:
        """Labelled traffic as samples JSONL (one sample per line); what was exported in the
        ``X-Calimon-Export`` header (JSON)."""
        opts = ExportOptions(sample, calib_share, category, task, source)
        samples, summary = await asyncio.to_thread(export_samples, review, opts)
        text = "".join(json.dumps(s.to_dict(), ensure_ascii=False, sort_keys=True) + "\n"
                       for s in samples)
        return Response(text, media_type="application/x-ndjson",
                        headers={"X-Calimon-Export": json.dumps(summary)})


def _sign_in_pages(app: FastAPI, service) -> None:
    auth: Authenticator = service.auth

    @app.get("/review/static/review.js", include_in_schema=False)
    async def script() -> Response:
        return Response(JS, media_type="text/javascript", headers={"Cache-Control": "no-cache"})

    @app.get("/review/static/review.css", include_in_schema=False)
    async def style() -> Response:
        return Response(CSS, media_type="text/css", headers={"Cache-Control": "no-cache"})

    @app.get("/review/static/icon.svg", include_in_schema=False)
    async def icon() -> Response:
        return Response(ICON, media_type="image/svg+xml")

    @app.get("/review/login", include_in_schema=False)
    async def login_form(go: Annotated[str | None, Query(alias="next")] = None
                         ) -> HTMLResponse:
        return _html(login_page(next_path=local_next(go)))

    @app.post("/review/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        go = local_next((form.get("next") or [None])[0])
        found = await auth.sign_in((form.get("key") or [""])[0].strip())
        if found is None:
            return _html(login_page("That key is not a reviewer's key.", go), 401)
        secure = "; Secure" if request.url.scheme == "https" else ""
        cookie = (f"{COOKIE}={found[1]}; HttpOnly; SameSite=Strict; Path=/; "
                  f"Max-Age={int(auth.ttl)}{secure}")
        return RedirectResponse(go, 303, headers={"Set-Cookie": cookie})

    @app.post("/review/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        await auth.sign_out(dict(request.scope.get("headers") or []))
        return RedirectResponse("/review/login", 303, headers={
            "Set-Cookie": f"{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"})


def local_next(value: str | None) -> str:
    """Where a sign-in goes on to: ``value`` when it is a review page of this server (a path
    under ``/review``: no scheme, host, backslash, control character or dot segment, so
    never another site), else ``/review``."""
    if not value or len(value) > 2000 or "\\" in value or not value.isprintable():
        return "/review"
    parts = urlsplit(value)
    path = parts.path
    if parts.scheme or parts.netloc or not (path == "/review" or path.startswith("/review/")):
        return "/review"
    if any(seg in (".", "..") for seg in path.split("/")) or path == "/review/login":
        return "/review"
    return value


def _not_found_pages(app: FastAPI) -> None:
    """A browser asking for a review page that is not there gets a page (404), not JSON; the
    API (``/v1``) keeps its JSON errors."""
    json_handler = app.exception_handlers[StarletteHTTPException]

    async def not_found(request: Request, exc: StarletteHTTPException) -> Response:
        path = request.url.path
        if exc.status_code == 404 and (path == "/review" or path.startswith("/review/")):
            return _html(not_found_page(_user(request), f"No review page at {path}."), 404)
        out = json_handler(request, exc)
        return await out if inspect.isawaitable(out) else out

    app.add_exception_handler(StarletteHTTPException, not_found)


def _pages(app: FastAPI, service) -> None:
    review: Review = service.review

    @app.get("/review", include_in_schema=False)
    async def queue_html(request: Request) -> HTMLResponse:
        who = _user(request)

        def build() -> str:
            entries, claims = leased(review, who, review.queue(who))
            rows = [(review.store.item(q.row.item_id), q.reason) for q in entries]
            ids = [q.row.item_id for q in entries]
            until = min((claims[i].expires_at for i in ids), default=None)
            return queue_page(who, [(r, why) for r, why in rows if r is not None],
                              live_status(review, service.drift), _mine(review, who),
                              seen=_seen(review, ids), lease_until=until)

        return _html(await asyncio.to_thread(build))

    @app.get("/review/items/{item_id}", include_in_schema=False)
    async def item_html(request: Request, item_id: str) -> HTMLResponse:
        who = _user(request)
        row = await asyncio.to_thread(review.store.item, item_id)
        if row is None or not row.retained:
            return _html(not_found_page(who, f"No kept transcript {item_id}: it was never "
                                        "scored here, or its text was not kept."), 404)

        def build() -> str:
            holder = review.lease(who, [item_id]).get(item_id)
            why = "opened by link"
            if holder is not None and holder.reviewer != who:
                why += f" · {holder.reviewer} holds it until {clock_time(holder.expires_at)}"
            return queue_page(who, [(row, why)], live_status(review, service.drift),
                              _mine(review, who), seen=_seen(review, [item_id]))

        return _html(await asyncio.to_thread(build))

    @app.get("/review/status", include_in_schema=False)
    async def status_html(request: Request) -> HTMLResponse:
        st = await asyncio.to_thread(full_status, service)
        return _html(status_page(st, _user(request)))


def full_status(service) -> dict[str, Any]:
    """`live_status` of the live policy with the shadow candidate's checks; blocking."""
    return {**live_status(service.review, service.drift), "shadow": shadow_status(service)}


def route_of(path: str) -> str:
    """A review path as its route template (the label of the request metrics)."""
    if path.startswith("/v1/review/items/"):
        return "/v1/review/items/{id}"
    if path.startswith("/review/items/"):
        return "/review/items/{id}"
    if path.startswith("/review/static/"):
        return "/review/static"
    known = ("/v1/review/queue", "/v1/review/labels", "/v1/review/sync", "/v1/review/status", "/v1/review/drift",
             "/v1/review/export", "/review", "/review/login", "/review/logout",
             "/review/status")
    return path if path in known else "other"
