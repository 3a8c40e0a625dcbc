"""The service's API page, ``/docs``: Swagger UI served from this machine, with no request to
another host (the service is meant to run with no network). Its script, style and icon are the
copies the `fastapi-offline` package ships (a dependency of the ``serve`` extra), served at
``/docs/static/``; FastAPI's own ``/docs`` loads them from a CDN and is turned off."""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, HTTPException
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

DOCS_URL = "/docs"
STATIC_URL = "/docs/static"
# the asset names the package ships, and their media types (nothing else is served)
ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
          "favicon.png": "image/png"}


def _asset_folder():
    return files("fastapi_offline") / "static"


def install(app: FastAPI) -> None:
    """Add ``/docs`` and its assets to ``app`` (made with ``docs_url=None``)."""

    @app.get(DOCS_URL, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - API",
            swagger_js_url=f"{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_URL}/favicon.png")

    @app.get(STATIC_URL + "/{name}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        if name not in ASSETS:
            raise HTTPException(404, f"no asset {name!r}")
        return FileResponse(str(_asset_folder() / name), media_type=ASSETS[name],
                            headers={"Cache-Control": "max-age=86400"})
