"""The review pages as a browser reads them, in this process around the stand-in monitor: the
summary of a policy with no target, the sign-in that goes on to the page asked for (and never to
another site), the 404 page of the browser routes beside the API's JSON 404, and the way on
after the last item. Their layout and keys in a real browser: tests/test_review_chromium.py."""

from __future__ import annotations

import pytest
from review_fakes import KEYS, auth, make_service, policy, run, score

from calimon.review.api import local_next
from calimon.review.settings import ReviewSettings

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def test_a_policy_with_no_target_says_so_in_words(tmp_path):
    async def scenario(c):
        await score(c, 0.6, 1)
        return (await c.get("/review", headers=auth("ada"))).text

    page = run(make_service(tmp_path, policy_path=policy(tmp_path, far=None, mr=None)), scenario)
    assert "FAR: no target set" in page and "MR: no target set" in page
    assert "no target)" not in page and "1.000" not in page


@pytest.mark.parametrize("asked", [
    "https://evil.test/review", "//evil.test/review", "/\\evil.test", "\\\\evil.test/review",
    "javascript:alert(1)", "/v1/score", "/reviewer", "/review/../v1/score",
    "/review/login", "/review\r\nSet-Cookie: x=1", "http:/review", ""])
def test_a_sign_in_never_goes_on_to_another_site(asked):
    assert local_next(asked) == "/review"


def test_a_sign_in_goes_on_to_the_page_asked_for(tmp_path):
    async def scenario(c):
        item = (await c.get("/v1/review/queue", headers=auth("ada"))).json()["items"]
        asked = f"/review/items/{item[0]['item_id']}"
        r = await c.get(asked)
        assert r.status_code == 303 and r.headers["location"] == f"/review/login?next={asked}"
        r = await c.get("/review/status?x=1&y=%2F")
        assert r.headers["location"] == "/review/login?next=/review/status%3Fx%3D1%26y%3D%252F"
        form = (await c.get(r.headers["location"])).text
        assert 'name="next" id="next" value="/review/status?x=1&amp;y=%2F"' in form
        wrong = await c.post("/review/login", headers=FORM,
                             content=f"key=wrong-key-0123456789&next={asked}")
        assert wrong.status_code == 401 and f'value="{asked}"' in wrong.text  # kept for a retry
        r = await c.post("/review/login", headers=FORM, content=f"key={KEYS['ada']}&next={asked}")
        assert r.status_code == 303 and r.headers["location"] == asked
        jar = {"Cookie": r.headers["set-cookie"].split(";")[0]}
        assert f'data-item="{item[0]["item_id"]}"' in (await c.get(asked, headers=jar)).text
        evil = await c.post("/review/login", headers=FORM,
                            content=f"key={KEYS['ada']}&next=//evil.test/review")
        assert evil.status_code == 303 and evil.headers["location"] == "/review"
        plain = await c.post("/review/login", headers=FORM, content=f"key={KEYS['ada']}")
        assert plain.headers["location"] == "/review"
        form = (await c.get("/review/login?next=https://evil.test/")).text
        assert 'name="next" id="next" value="/review"' in form and "evil" not in form

    async def setup_then(c):
        for i in range(6):
            await score(c, 0.6, i)
        await scenario(c)

    run(make_service(tmp_path), setup_then)


def test_browser_routes_answer_an_unknown_page_with_a_page(tmp_path):
    async def scenario(c):
        item = await c.get(f"/review/items/{'0' * 24}", headers=auth("ada"))
        other = await c.get("/review/nothing/here<b>", headers=auth("ada"))
        api = await c.get(f"/v1/review/items/{'0' * 24}", headers=auth("ada"))
        api_other = await c.get("/v1/review/nothing", headers=auth("ada"))
        return item, other, api, api_other

    item, other, api, api_other = run(make_service(tmp_path), scenario)
    for r in (item, other):
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
        assert "<h1>Not found</h1>" in r.text and 'href="/review"' in r.text
        assert 'id="reviewer">ada<' in r.text
        assert "script-src 'self'" in r.headers["content-security-policy"]
    assert f"No kept transcript {'0' * 24}: it was never scored" in item.text
    assert "No review page at /review/nothing/here&lt;b&gt;." in other.text  # escaped
    assert api.status_code == 404 and api.json()["error"]["field"] == "item_id"
    assert api_other.status_code == 404 and api_other.json()["error"]["code"] == "not_found"


def test_the_last_item_points_to_the_next_page(tmp_path):
    async def scenario(c):
        for i in range(3):
            await score(c, 0.6, i)
        return (await c.get("/review", headers=auth("ada"))).text

    page = run(make_service(tmp_path, review=ReviewSettings(store=str(tmp_path / "r.sqlite"),
                                                            retain=1.0)), scenario)
    end = page.split('id="page-end"', 1)[1]
    assert 'href="/review" id="next-page-end">Next page of the queue' in end
    assert "3 items on this page" in end
