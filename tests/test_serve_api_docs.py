"""`calimon serve`'s API page, ``/docs``: everything it loads comes from the service itself, so
it works with no network (calimon/serve/api_docs.py)."""

from __future__ import annotations

import re

from test_serve_app import AUTH, make_service, run

# every URL the page names: src/href attributes and the script's url: '...' values
URL = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*["']([^"']+)["']""")


def test_the_docs_page_names_no_other_host_and_its_assets_are_served(tmp_path):
    async def scenario(c):
        page = await c.get("/docs", headers=AUTH)
        assert page.status_code == 200 and "SwaggerUIBundle" in page.text
        urls = [a or b for a, b in URL.findall(page.text)]
        assert len(urls) >= 4, urls  # the script, the style, the icon and /openapi.json
        assert all(u.startswith("/") and not u.startswith("//") for u in urls), urls
        assert "://" not in page.text
        for url in urls:
            r = await c.get(url, headers=AUTH)
            assert r.status_code == 200 and r.content, url
        js = await c.get("/docs/static/swagger-ui-bundle.js", headers=AUTH)
        assert js.headers["content-type"].startswith("text/javascript")
        assert len(js.content) > 100_000
        assert (await c.get("/docs/static/swagger-ui-bundle.js")).status_code == 401
        missing = await c.get("/docs/static/..%2Fcore.py", headers=AUTH)
        assert missing.status_code == 404

    run(make_service(tmp_path), scenario)
